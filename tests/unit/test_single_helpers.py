"""One helper per repeated shape, kept single (issue 25): a lint over the source's AST, fast and without imports.

- Allure attachments go through ``acceptance/harness/evidence.py``'s ``attach``; nothing else calls
  ``allure.attach``.
- A deadline is a ``wait`` helper's (``acceptance/harness/wait.py``, ``runtime/wait.py``); a hand-written
  ``monotonic() +`` is allowed only where the deadline bounds something else, each place named below with
  its reason.
- HTTP clients are the two HTTP helpers' (``runtime/httpjson.py``, ``acceptance/harness/http.py``): no
  ``urlopen``, ``HTTPConnection`` or ``urllib.request`` elsewhere, except the code that runs inside a
  sandbox on the standard library alone. (Catching ``http.client.HTTPException`` is mapping an error at the
  boundary, and allowed.) Server-sent events are read by those helpers too.
- Every exception class of the runtime derives from ``RuntimeFault``, except the few named below.

Each rule is tested on a planted offender in a temporary tree, next to a control that shows a clean tree
passes (the checker can see, and does not cry wolf).
"""

from __future__ import annotations

import ast
import builtins
import functools
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("acceptance", "runtime", "tests/support")

ATTACH_HELPER = "acceptance/harness/evidence.py"
WAIT_HELPERS = {"acceptance/harness/wait.py", "runtime/wait.py"}
HTTP_HELPERS = {"acceptance/harness/http.py", "runtime/httpjson.py"}

# (file, function): why its deadline is not a wait for a condition.
DEADLINES_ALLOWED: dict[tuple[str, str], str] = {
    ("runtime/authority/broker.py", "__init__"): "when the model capability is next renewed: a schedule, not a wait",
    ("runtime/authority/broker.py", "rotate"): "when the model capability is next renewed: a schedule, not a wait",
    ("runtime/authority/broker.py", "_model_capability"):
        "when the model capability is next renewed: a schedule, not a wait",
    ("acceptance/harness/lab/capture.py", "_mark"):
        "waits on a Condition the reader thread notifies, not a poll; a blind capture is a SetupError",
    ("acceptance/harness/lab/lab.py", "__init__"): "bounds a select() read of the sink's 'ready' line",
    ("acceptance/harness/lab/lab.py", "_drained"):
        "bounds a barrier resent each second; its timeout is a SetupError (the lab's records untrustworthy)",
    # check-driver's round trips live in the contract, which imports nothing of the harness (so not its wait),
    # and a round trip that runs out is a verdict on the driver (CheckFailed: 'fails'), not a harness timeout.
    ("acceptance/contract/checking.py", "until_gone"):
        "check-driver's verdict is CheckFailed ('fails' for the facet), not a harness timeout",
    ("acceptance/contract/facets/model.py", "round_trip"):
        "check-driver compares the meter once settled or as it stands; its verdict is CheckFailed",
    ("acceptance/contract/sandbox.py", "_sleeper_cgroups"):
        "SBX-6 waits for its own sleeper to show in the pid namespace; its verdict is CheckFailed",
    ("runtime/agents/launch.py", "deliver"): "a turn's poll with a growing pause and three outcomes (done, failed, held)",
    ("runtime/agents/reference.py", "serve"): "the reference agent is a stdlib script inside the sandbox",
    ("runtime/authority/broker.py", "forward_runctl"):
        "bounds a connect retry whose timeout is an answer (502 agent_unreachable), not an error",
    ("runtime/isolation/cgroups.py", "_rmdir"): "retries an rmdir while EBUSY; the error is the OSError's own",
    ("runtime/isolation/containers.py", "_pump"): "bounds a select() read of an exec's stream",
    ("runtime/isolation/sandbox.py", "_read_info"): "bounds a select() read of the sandbox's info pipe",
    ("runtime/isolation/sandbox.py", "_finish"):
        "bounds a select() read of a command's output (``_collect``) and its drain after the kill",
    ("tests/support/local_target.py", "_start"):
        "stands in for an outside driver, written against the contract alone (no harness import)",
}

# File or folder (ending in /): why it speaks HTTP itself.
HTTP_ALLOWED: dict[str, str] = {
    "acceptance/cases/inside/": "scripts run inside a sandbox, standard library only, self-contained",
    "tests/support/tiny_agent.py": "a second agent served inside a sandbox, standard library only",
    "runtime/agents/reference.py": "the reference agent: a stdlib script inside the sandbox (and its start-up time)",
}

# "file:Class": why it is not under RuntimeFault.
EXCEPTIONS_ALLOWED: dict[str, str] = {
    "runtime/agents/reference.py:ManagedConfigInvalid": "the reference agent cannot import runtime.errors",
    "runtime/agents/reference.py:ModelUnavailable": "the reference agent cannot import runtime.errors",
    "runtime/authority/mcp_filter.py:_DuplicateKey": "a ValueError mcp_filter's JSON parser raises and catches itself",
    "runtime/walk.py:TooDeep": "an OSError handed to walk()'s onerror, as os.fwalk's own errors are; never raised past it",
}

BUILTIN_EXCEPTIONS = {n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)}


# A file none of whose text holds one of these cannot offend, and is not parsed (the lint stays well under 1 s).
WORDS = ("allure", "monotonic", "urlopen", "HTTPConnection", "HTTPSConnection", "urllib", "data:")


@functools.cache
def _parsed(root: Path) -> tuple[tuple[str, ast.Module], ...]:
    out = []
    for top in SCANNED:
        for path in sorted((root / top).rglob("*.py")):
            rel, text = path.relative_to(root).as_posix(), path.read_text()
            if any(w in text for w in WORDS) or rel.startswith("runtime/") and "class " in text:
                out.append((rel, ast.parse(text, str(path))))
    return tuple(out)


def _sources(root: Path) -> Iterator[tuple[str, ast.Module]]:
    yield from _parsed(root)


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _with_function(tree: ast.Module) -> Iterator[tuple[ast.AST, str]]:
    """Every node with the name of the innermost function around it ('' at module level)."""
    stack: list[tuple[ast.AST, str]] = [(tree, "")]
    while stack:
        node, func = stack.pop()
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else func
            yield child, inner
            stack.append((child, inner))


def _is_monotonic(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and _dotted(node.func).split(".")[-1] == "monotonic"


def _http_allowed(rel: str) -> bool:
    return rel in HTTP_HELPERS or any(rel == k or k.endswith("/") and rel.startswith(k) for k in HTTP_ALLOWED)


def _slices_data_field(node: ast.AST) -> bool:
    """``x[5:]`` or ``x[len("data:"):]``: a server-sent event's data field cut off its line."""
    lower = node.slice.lower if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice) else None
    return lower is not None and (isinstance(lower, ast.Constant) and lower.value == 5 or "data:" in ast.unparse(lower))


def violations(root: Path) -> list[str]:
    found: list[str] = []
    classes: dict[str, tuple[str, list[str]]] = {}
    for rel, tree in _sources(root):
        sse_tests: dict[str, int] = {}
        sse_slices: set[str] = set()
        for node, func in _with_function(tree):
            if _slices_data_field(node):
                sse_slices.add(func)
            where = f"{rel}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Call):
                name = _dotted(node.func)
                if name in ("allure.attach", "allure.attach.file") and rel != ATTACH_HELPER:
                    found.append(f"{where}: {name} outside {ATTACH_HELPER} (use evidence.attach)")
                if name.split(".")[-1] in ("urlopen", "HTTPConnection", "HTTPSConnection") and not _http_allowed(rel):
                    found.append(f"{where}: {name} outside the HTTP helpers ({', '.join(sorted(HTTP_HELPERS))})")
                if (name.endswith("startswith") and node.args and isinstance(node.args[0], ast.Constant)
                        and node.args[0].value in ("data:", b"data:") and not _http_allowed(rel)):
                    sse_tests.setdefault(func, node.lineno)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                if "urllib.request" in modules and not _http_allowed(rel):
                    found.append(f"{where}: urllib.request imported outside the HTTP helpers")
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) \
                    and (_is_monotonic(node.left) or _is_monotonic(node.right)) \
                    and rel not in WAIT_HELPERS and (rel, func) not in DEADLINES_ALLOWED:
                found.append(f"{where}: a hand-written monotonic() + deadline in {func or 'module'} (use wait.until, "
                             "or list it in DEADLINES_ALLOWED with the reason)")
            elif isinstance(node, ast.ClassDef) and rel.startswith("runtime/"):
                classes[node.name] = (f"{rel}:{node.name}", [_dotted(b).split(".")[-1] for b in node.bases])
        found += [f"{rel}:{line}: a server-sent-event parser in {func} outside the HTTP helpers (use their sse_*)"
                  for func, line in sorted(sse_tests.items()) if func in sse_slices]

    def ancestors(name: str, seen: frozenset[str] = frozenset()) -> set[str]:
        if name in seen or name not in classes:
            return set()
        out = set(classes[name][1])
        for base in classes[name][1]:
            out |= ancestors(base, seen | {name})
        return out

    for name, (where, _) in sorted(classes.items()):
        up = ancestors(name)
        if up & BUILTIN_EXCEPTIONS and "RuntimeFault" not in up | {name} and where not in EXCEPTIONS_ALLOWED:
            found.append(f"{where}: a runtime exception not under RuntimeFault (runtime/errors.py)")
    return found


def test_each_repeated_shape_has_one_helper():
    """The tree has no allure.attach, deadline loop, HTTP client, SSE parser or runtime exception outside
    its helper and the allowlists."""
    assert violations(ROOT) == []


def test_every_allowlisted_place_still_exists():
    """An allowlist entry whose place is gone is dropped, not kept as a hole for a later offender."""
    def defined(rel: str, kind: type | tuple[type, ...]) -> set[str]:
        path = ROOT / rel
        tree = ast.parse(path.read_text()) if path.is_file() else ast.Module(body=[], type_ignores=[])
        return {node.name for node in ast.walk(tree) if isinstance(node, kind)}

    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    assert [key for key in DEADLINES_ALLOWED if key[1] not in defined(key[0], functions)] == []
    assert [k for k in HTTP_ALLOWED if not (ROOT / k).exists()] == []
    assert [k for k in EXCEPTIONS_ALLOWED if k.split(":")[1] not in defined(k.split(":")[0], ast.ClassDef)] == []


CLEAN = {
    ATTACH_HELPER: "import allure\ndef attach(name, text):\n    allure.attach(text, name=name)\n",
    "acceptance/harness/wait.py": "import time\ndef until(p, d):\n    end = time.monotonic() + d\n",
    "acceptance/harness/http.py": "import http.client\ndef request(u):\n    return http.client.HTTPConnection(u)\n",
    "runtime/errors.py": "class RuntimeFault(Exception):\n    pass\nclass SandboxError(RuntimeFault):\n    pass\n",
    "runtime/httpjson.py": "import urllib.request\ndef ask(u):\n    return urllib.request.urlopen(u)\n",
    "runtime/store.py": "from runtime.errors import SandboxError\nclass StoreError(SandboxError):\n    pass\n",
    "acceptance/cases/inside/probe.py": "import urllib.request\nurllib.request.urlopen('http://127.0.0.1/')\n",
    "tests/support/__init__.py": "",
}

PLANTED = {
    "acceptance/cases/test_x.py": ("import allure\ndef test_x():\n    allure.attach('t', name='n')\n",
                                   "allure.attach outside"),
    "acceptance/harness/observe.py": ("import time\ndef wait_for(p):\n    end = time.monotonic() + 5\n",
                                      "hand-written monotonic() + deadline in wait_for"),
    "acceptance/targets/mine.py": ("import http.client\ndef call():\n    return http.client.HTTPConnection('h')\n",
                                   "http.client.HTTPConnection outside the HTTP helpers"),
    "runtime/ask.py": ("from urllib.request import urlopen\n", "urllib.request imported outside"),
    "runtime/stream.py": ("def parse(line):\n    if line.startswith(b'data:'):\n        return line[5:]\n"
                          "def last(line):\n    return line.startswith(b'data:') and b'stop' in line\n",
                          "server-sent-event parser in parse outside"),
    "runtime/quota.py": ("class QuotaError(ValueError):\n    pass\nclass Over(QuotaError):\n    pass\n",
                         "runtime/quota.py:Over: a runtime exception not under RuntimeFault"),
}


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_a_clean_tree_passes(tmp_path):
    """Control: the helpers themselves, a RuntimeFault subclass and a sandbox script are no offence."""
    assert violations(_tree(tmp_path, CLEAN)) == []


def test_each_planted_offender_is_found(tmp_path):
    """One offender per rule, each found and named by its file."""
    found = violations(_tree(tmp_path, {**CLEAN, **{rel: text for rel, (text, _) in PLANTED.items()}}))
    for rel, (_, words) in PLANTED.items():
        assert [f for f in found if f.startswith(rel) and words in f] != [], (rel, found)
    assert len(found) == len(PLANTED) + 1  # QuotaError and Over: both outside RuntimeFault
