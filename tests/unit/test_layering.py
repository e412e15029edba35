"""Dependencies point one way (DESIGN §2): runtime imports none of the suite's packages."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import runtime

FORBIDDEN = {"acceptance", "canaries", "mutants", "reports"}


def test_runtime_imports_nothing_from_the_suite():
    offenders = []
    for path in Path(runtime.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
    assert offenders == []


def test_agent_uses_the_standard_library_only():
    """The agent runs under the sandbox's system Python with nothing else installed."""
    import sys

    tree = ast.parse((Path(runtime.__file__).parent / "agents" / "reference.py").read_text())
    modules = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert modules - set(sys.stdlib_module_names) - {"__future__"} == set()


def test_each_case_lives_in_one_module():
    """Under xdist the plugin keeps a module's tests on one worker (--dist loadfile), so a case whose refusal
    and controls sit in two modules would judge two platform runs, and be broken. Keep each case in one."""
    import re
    from pathlib import Path

    modules: dict[str, set[str]] = {}
    for path in (Path(__file__).resolve().parents[2] / "acceptance" / "cases").glob("test_*.py"):
        for case in re.findall(r'case\("([A-Z]{2}-\d+)"', path.read_text()):
            modules.setdefault(case, set()).add(path.name)
    assert modules, "no case found: the pattern no longer matches how cases are marked"
    assert {case: sorted(m) for case, m in modules.items() if len(m) > 1} == {}


# -- no import cycles; the harness reaches the runtime only through the reference driver ----------------

ROOT = Path(runtime.__file__).resolve().parent.parent
PACKAGES = ("acceptance", "runtime", "canaries", "reports", "mutants")
REFERENCE_DRIVER = ("acceptance", "targets", "reference")
# The docker target is the reference platform with Docker as its sandbox engine: a driver of the runtime too.
RUNTIME_DRIVERS = (REFERENCE_DRIVER, ("acceptance", "targets", "docker"))


def _modules(root: Path, packages=PACKAGES) -> dict[str, Path]:
    found = {}
    for package in packages:
        for path in (root / package).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:`` (never executed, so no edge at run time)."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return skipped


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ``modules`` that ``module`` imports: at module level or in a function, absolute or
    relative; ``from pkg import name`` counts as ``pkg.name`` when that is a module, else as ``pkg``."""
    tree = ast.parse(path.read_text())
    skipped = _type_checking_only(tree)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    names = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            names += [f"{target}.{a.name}" if f"{target}.{a.name}" in modules else target for a in node.names]
    found = set()
    for name in names:
        while name and name not in modules:
            name = name.rpartition(".")[0]  # an attribute of a module, or a package's submodule not in the tree
        if name and name != module:
            found.add(name)
    return found


def import_graph(root: Path, packages=PACKAGES) -> dict[str, set[str]]:
    modules = _modules(root, packages)
    return {module: _imports(module, path, modules) for module, path in modules.items()}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected set of two or more modules, as one cycle through it (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(set(component))
    return [_cycle_through(component, graph) for component in components]


def _cycle_through(component: set[str], graph: dict[str, set[str]]) -> list[str]:
    """One concrete cycle inside a strongly connected component, for the failure message."""
    first = min(component)
    path, seen = [first], {first}
    while True:
        following = sorted(graph[path[-1]] & component)
        if first in following and len(path) > 1:
            return path + [first]
        step = next((m for m in following if m not in seen), None)
        if step is None:  # every neighbour seen: close the loop at the one met again
            again = following[0]
            return path[path.index(again):] + [again]
        path.append(step)
        seen.add(step)


def test_the_cycle_finder_finds_a_cycle(tmp_path):
    """The check below is only as good as its graph: a planted cycle through a function-level import and a
    relative one is found; an import under TYPE_CHECKING is not an edge."""
    package = tmp_path / "acceptance"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from .b import thing\n")
    (package / "b.py").write_text("def f():\n    from acceptance import c\n")
    (package / "c.py").write_text("import acceptance.a\n")
    (package / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import e\n")
    (package / "e.py").write_text("from . import d\n")
    cycles = import_cycles(import_graph(tmp_path, ("acceptance",)))
    assert [sorted(set(c)) for c in cycles] == [["acceptance.a", "acceptance.b", "acceptance.c"]]


def test_no_import_cycles():
    graph = import_graph(ROOT)
    assert {"acceptance.harness.plugin", "runtime.controller", "acceptance.targets.reference.driver"} <= set(graph)
    cycles = import_cycles(graph)
    assert cycles == [], "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def _acceptance_files():
    for path in sorted((ROOT / "acceptance").rglob("*.py")):
        yield path.relative_to(ROOT), ast.parse(path.read_text())


def test_the_harness_imports_the_runtime_only_through_the_reference_driver():
    """A security team's driver replaces the reference one; nothing else in the harness may need ``runtime``
    (the drivers of the runtime's platform, reference and docker, excepted)."""
    offenders = []
    for rel, tree in _acceptance_files():
        if rel.parts[:3] in RUNTIME_DRIVERS:
            continue
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str) and ast.unparse(node.func).endswith(("import_module", "__import__")):
                names = [node.args[0].value]
            offenders += [f"{rel}:{node.lineno} imports {n}" for n in names if n.split(".")[0] == "runtime"]
    assert offenders == []


# Objects of the harness's own (never the runtime's) whose underscored attributes the harness may read,
# each with its reason. An entry names the file, the expression, and why.
PRIVATE_READS_ALLOWED: dict[tuple[str, str], str] = {
    ("acceptance/cases/inside/userns_probe.py", "os._exit"): "the standard library's documented exit for a forked child "
    "(it must not run the parent's exit handlers or flush its buffers a second time): public despite its name",
}


def test_no_code_in_the_harness_reads_a_private_attribute_of_another_object():
    """``x._name`` (or ``getattr(x, "_name")``, or ``from m import _name``) where x is not ``self``, ``cls``
    or ``super()``: the reference driver is a worked example a real platform's authors copy, so it reaches the
    runtime through public hooks only, and the rest of the harness does the same with its own objects."""
    offenders = []
    for rel, tree in _acceptance_files():
        for node in ast.walk(tree):
            name = None
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
                        or ast.unparse(node.value) == "super()"):  # the object's own class's, as self's
                    name = ast.unparse(node)
            elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("getattr", "setattr", "hasattr") \
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                    and str(node.args[1].value).startswith("_") and not str(node.args[1].value).startswith("__"):
                if not (isinstance(node.args[0], ast.Name) and node.args[0].id in ("self", "cls")):
                    name = ast.unparse(node)
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                name = next((f"from {node.module} import {a.name}" for a in node.names
                             if a.name.startswith("_") and not a.name.startswith("__")), None)
            if name and (str(rel), name) not in PRIVATE_READS_ALLOWED:
                offenders.append(f"{rel}:{node.lineno} {name}")
    assert offenders == []


def test_no_case_module_names_a_way_past_its_view():
    """A case reaches the target through ``target`` (its case's view) only: no case module names the whole
    driver's fixture or the view's insides (the plugin refuses the fixture at run time; a name given to
    ``request.getfixturevalue`` or ``object.__getattribute__`` it cannot see, so this looks for it)."""
    cases = Path(__file__).resolve().parents[2] / "acceptance" / "cases"
    words = re.compile(r"\bpairproof_target\b|getfixturevalue|__getattribute__|\._target\b|\._violations\b|"
                       r"[\"']_target[\"']|[\"']_violations[\"']")
    found = [f"{path.name}: {hit}" for path in sorted(cases.glob("*.py")) for hit in words.findall(path.read_text())]
    assert found == []
