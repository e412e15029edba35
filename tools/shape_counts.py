"""Count the repeated shapes of issue 25 in a tree: one line per shape, measured with the AST (not grep).

    python tools/shape_counts.py              # the working tree
    python tools/shape_counts.py --rev f41dc9c  # a commit (read with ``git archive`` into a temporary folder)

The shapes and exactly what is counted:

- attach helpers: functions that call ``allure.attach`` or ``allure.attach.file``, other than the one helper
  (``acceptance/harness/evidence.py``'s ``attach``/``attach_file``).
- HTTP client call sites (acceptance/, runtime/, tests/support/): calls of ``urlopen``, constructions of
  ``HTTPConnection``/``HTTPSConnection``, and socket-level HTTP (a function that ``sendall``s a literal
  request line, ``GET /x HTTP/1.x``, on a socket it connected itself), outside the HTTP helper modules.
- SSE parsers: functions that test a line with ``startswith("data:")`` and slice the field off it, outside
  the HTTP helper modules.
- ``monotonic() +`` deadlines: additions with a ``monotonic()`` call as an operand, in every tracked .py file,
  split into those in the wait helpers, those elsewhere; and the same shape as text (as grep sees it:
  sandbox scripts held in string literals too).
- runtime exceptions not under RuntimeFault: classes in runtime/ deriving (through any chain) from a builtin
  exception but not from ``RuntimeFault``.
- profile-check lines: the line span of the hand-written profile checker (``_parse`` in
  acceptance/targets/profiles/__init__.py).
"""

from __future__ import annotations

import argparse
import ast
import builtins
import re
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

SKIP_DIRS = {".venv", ".git", "build", "node_modules", ".tox", "__pycache__"}
ATTACH_HELPER = "acceptance/harness/evidence.py"
HTTP_HELPERS = {"runtime/httpjson.py", "acceptance/harness/http.py"}
WAIT_HELPERS = {"acceptance/harness/wait.py", "runtime/wait.py"}
HTTP_ROOTS = ("acceptance/", "runtime/", "tests/support/")
REQUEST_LINE = re.compile(r"^(GET|POST|PUT|DELETE|HEAD|PATCH|CONNECT|OPTIONS) \S+ HTTP/1\.[01]\r\n")
BUILTIN_EXCEPTIONS = {name for name, value in vars(builtins).items()
                      if isinstance(value, type) and issubclass(value, BaseException)}


TEXT_DEADLINE = re.compile(r"monotonic\(\) *\+")


def sources(root: Path) -> Iterator[tuple[str, str]]:
    """The tree's Python files as git sees them (tracked, and untracked but not ignored): never a virtualenv,
    the hermes venv under .tools or a build folder."""
    if (root / ".git").exists():
        listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "--", "*.py"], cwd=root,
                                capture_output=True, text=True, check=True).stdout.split()
        paths = sorted(root / name for name in listed)
    else:  # an archive of a commit (--rev): every file is the commit's
        paths = sorted(root.rglob("*.py"))
    for path in paths:
        if not path.is_file():
            continue
        rel = path.relative_to(root)
        if SKIP_DIRS & set(rel.parts[:-1]) or rel.parts[0] == "tests" and "vectors" in rel.parts:
            continue
        if rel.as_posix() != "tools/shape_counts.py":  # this file names the shapes it counts
            yield rel.as_posix(), path.read_text(errors="replace")


def python_files(root: Path) -> Iterator[tuple[str, ast.Module]]:
    for rel, text in sources(root):
        try:
            yield rel, ast.parse(text)
        except SyntaxError:
            continue


def dotted(node: ast.AST) -> str:
    """``a.b.c`` for a Name/Attribute chain, else ''."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def functions(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def own_nodes(func: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``func``'s body, not descending into nested functions or classes."""
    stack = list(ast.iter_child_nodes(func))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))


def calls(func: ast.AST) -> Iterator[tuple[ast.Call, str]]:
    for node in own_nodes(func):
        if isinstance(node, ast.Call):
            yield node, dotted(node.func)


def is_monotonic_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and dotted(node.func).split(".")[-1] == "monotonic"


def monotonic_deadlines(tree: ast.Module) -> list[int]:
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)
            and (is_monotonic_call(node.left) or is_monotonic_call(node.right))]


def attach_helpers(rel: str, tree: ast.Module) -> list[str]:
    out = []
    for func in functions(tree):
        if any(name in ("allure.attach", "allure.attach.file") for _, name in calls(func)):
            out.append(f"{rel}:{func.name}")
    return out


def http_sites(rel: str, tree: ast.Module) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            last = dotted(node.func).split(".")[-1]
            if last in ("urlopen", "HTTPConnection", "HTTPSConnection"):
                out.append(f"{rel}:{node.lineno} {last}")
    for func in functions(tree):
        names = [name.split(".")[-1] for _, name in calls(func)]
        literal = any(isinstance(n, ast.Constant) and isinstance(n.value, (str, bytes))
                      and REQUEST_LINE.match(n.value if isinstance(n.value, str) else n.value.decode("latin-1"))
                      for n in own_nodes(func))
        if "sendall" in names and literal and ({"create_connection", "connect"} & set(names)):
            out.append(f"{rel}:{func.lineno} socket-level HTTP in {func.name}")
    return out


def sse_parsers(rel: str, tree: ast.Module) -> list[str]:
    out = []
    for func in functions(tree):
        tests = any(name.endswith("startswith") and node.args and isinstance(node.args[0], ast.Constant)
                    and node.args[0].value in ("data:", b"data:") for node, name in calls(func))
        slices = any(isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Slice) and n.slice.lower is not None
                     and (isinstance(n.slice.lower, ast.Constant) and n.slice.lower.value == 5
                          or "data:" in ast.unparse(n.slice.lower))
                     for n in own_nodes(func))
        if tests and slices:
            out.append(f"{rel}:{func.name}")
    return out


def runtime_exceptions(trees: dict[str, ast.Module]) -> list[str]:
    bases: dict[str, list[str]] = {}
    where: dict[str, str] = {}
    for rel, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = [dotted(b).split(".")[-1] for b in node.bases]
                where[node.name] = f"{rel}:{node.name}"

    def chain(name: str, seen: frozenset = frozenset()) -> set[str]:
        if name in seen or name not in bases:
            return {name}
        out = {name}
        for base in bases[name]:
            out |= chain(base, seen | {name})
        return out

    out = []
    for name in bases:
        ancestors = chain(name) - {name}
        if ancestors & BUILTIN_EXCEPTIONS and "RuntimeFault" not in ancestors | {name}:
            out.append(where[name])
    return sorted(out)


def profile_check_lines(trees: dict[str, ast.Module], texts: dict[str, str]) -> int:
    """Code lines (not blank, not a comment, not a docstring) of the profile module's functions: the
    hand-written reading and checking of a profile (the module moved from acceptance/profiles/ in issue 25)."""
    for rel in ("acceptance/targets/profiles/__init__.py", "acceptance/profiles/__init__.py"):
        if rel in trees:
            break
    else:
        return 0
    lines = texts[rel].splitlines()
    counted: set[int] = set()
    for node in ast.walk(trees[rel]):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node in trees[rel].body:
            doc = node.body[0] if node.body and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant) and isinstance(node.body[0].value.value, str) else None
            skip = set(range(doc.lineno, doc.end_lineno + 1)) if doc else set()
            counted |= {n for n in range(node.lineno, node.end_lineno + 1) if n not in skip
                        and lines[n - 1].strip() and not lines[n - 1].strip().startswith("#")}
    return len(counted)


def count(root: Path, verbose: bool = False) -> list[str]:
    texts = dict(sources(root))
    trees = dict(python_files(root))
    attach = [h for rel, t in trees.items() for h in attach_helpers(rel, t)]
    extra_attach = [h for h in attach if not h.startswith(ATTACH_HELPER + ":")]
    http = [s for rel, t in trees.items() if rel.startswith(HTTP_ROOTS) and rel not in HTTP_HELPERS
            for s in http_sites(rel, t)]
    inside = [s for s in http if s.startswith(("acceptance/cases/inside/", "tests/support/tiny_agent.py",
                                               "runtime/agents/reference.py"))]
    sse = [p for rel, t in trees.items() if rel not in HTTP_HELPERS for p in sse_parsers(rel, t)]
    deadlines = {rel: monotonic_deadlines(t) for rel, t in trees.items()}
    in_helpers = sum(len(v) for rel, v in deadlines.items() if rel in WAIT_HELPERS)
    elsewhere = {rel: v for rel, v in deadlines.items() if v and rel not in WAIT_HELPERS}
    rt = {rel: t for rel, t in trees.items() if rel.startswith("runtime/")}
    exc = runtime_exceptions(rt)
    lines = [
        f"attach helpers (call allure.attach, not the one helper): {len(extra_attach)} in "
        f"{len({h.split(':')[0] for h in extra_attach})} files (all helpers: {len(attach)})",
        f"JSON-over-HTTP client call sites (acceptance, runtime, tests/support; outside the HTTP helpers): "
        f"{len(http)} (of which {len(inside)} in code run inside a sandbox, stdlib only)",
        f"SSE parsers (outside the HTTP helpers): {len(sse)}",
        f"monotonic() + deadlines: {sum(len(v) for v in elsewhere.values())} outside the wait helpers "
        f"(in {len(elsewhere)} files), {in_helpers} in them; as text (grep, scripts in strings too): "
        f"{sum(len(TEXT_DEADLINE.findall(text)) for _, text in sources(root))}",
        f"runtime exceptions not deriving from RuntimeFault: {len(exc)}",
        f"hand-written profile reading/checking lines (the profile module's functions): {profile_check_lines(trees, texts)}",
    ]
    if verbose:
        for title, items in (("attach", extra_attach), ("http", http), ("sse", sse), ("exceptions", exc)):
            lines += [f"  {title}: {item}" for item in items]
        lines += [f"  monotonic: {rel}: {len(v)} (lines {', '.join(map(str, v))})" for rel, v in sorted(elsewhere.items())]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", help="count this commit instead of the working tree")
    parser.add_argument("-v", "--verbose", action="store_true", help="list each item counted")
    args = parser.parse_args(argv)
    root = Path(__file__).resolve().parent.parent
    if args.rev is None:
        print("\n".join(count(root, args.verbose)))
        return 0
    with tempfile.TemporaryDirectory() as work:
        archive = subprocess.run(["git", "-C", str(root), "archive", args.rev], check=True, capture_output=True).stdout
        tar = Path(work) / "tree.tar"
        tar.write_bytes(archive)
        with tarfile.open(tar) as t:
            t.extractall(Path(work) / "tree", filter="data")
        print("\n".join(count(Path(work) / "tree", args.verbose)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
