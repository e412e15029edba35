"""Dependencies point one way (DESIGN §2), checked on the source: each rule is a function of a tree, tested
against a planted offender on a tree of its own, then held on this checkout.

(a) one-way arrows between acceptance's parts (``ARROWS``, each edge with its reason); (b) no import cycles;
(c) what runs inside a sandbox (``acceptance/cases/inside``) imports the standard library only; (d) only the
drivers of the runtime's platform (``acceptance/targets/reference``, ``acceptance/targets/docker``) import
``runtime``; (e) ``runtime`` imports nothing of the suite; (f) the lab's fake provider is the harness's, not the
runtime's: covered by (a) (the lab imports ``acceptance.errors`` only) and (d).
"""

from __future__ import annotations

import ast
import re
import sys
from functools import cache
from pathlib import Path

import runtime

FORBIDDEN = {"acceptance", "canaries", "mutants", "reports"}


@cache
def _parsed(path: Path) -> ast.Module:
    """Each file parsed once per session: the rules below walk the same trees (parsing is most of their time)."""
    return ast.parse(path.read_text())


def _absolute_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of each absolute import, and of each ``import_module("x")`` / ``__import__("x")``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) and ast.unparse(node.func).endswith(("import_module", "__import__")):
            out.append((node.lineno, node.args[0].value))
    return out


def suite_imports_in_runtime(root: Path) -> list[str]:
    """(e) Imports of the suite's packages anywhere under ``root/runtime``."""
    return [f"{path.relative_to(root)}:{line} imports {name}" for path in sorted((root / "runtime").rglob("*.py"))
            for line, name in _absolute_imports(_parsed(path)) if name.split(".")[0] in FORBIDDEN]


def test_runtime_imports_nothing_from_the_suite():
    assert suite_imports_in_runtime(ROOT) == []


def test_the_runtime_rule_finds_a_planted_import(tmp_path):
    (tmp_path / "runtime" / "authority").mkdir(parents=True)
    (tmp_path / "runtime" / "authority" / "broker.py").write_text("import json\n\ndef f():\n    from acceptance import errors\n")
    assert suite_imports_in_runtime(tmp_path) == ["runtime/authority/broker.py:4 imports acceptance"]


def test_agent_uses_the_standard_library_only():
    """The agent runs under the sandbox's system Python with nothing else installed."""
    tree = _parsed(Path(runtime.__file__).parent / "agents" / "reference.py")
    modules = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert modules - set(sys.stdlib_module_names) - {"__future__"} == set()


def test_each_case_lives_in_one_module():
    """Under xdist the plugin keeps a module's tests on one worker (--dist loadfile), so a case whose refusal
    and controls sit in two modules would judge two platform runs, and be broken. Keep each case in one."""
    import re
    from pathlib import Path

    modules: dict[str, set[str]] = {}
    for path in (Path(__file__).resolve().parents[2] / "acceptance" / "cases").rglob("test_*.py"):
        for case in re.findall(r'case\("([A-Z]{2}-\d+)"', path.read_text()):
            modules.setdefault(case, set()).add(path.as_posix().split("/acceptance/cases/", 1)[1])
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
    tree = _parsed(path)
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


@cache
def _this_checkout() -> dict[str, set[str]]:
    return import_graph(ROOT)


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
    graph = _this_checkout()
    assert {"acceptance.harness.plugin", "runtime.controller", "acceptance.targets.reference.driver"} <= set(graph)
    cycles = import_cycles(graph)
    assert cycles == [], "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def _acceptance_files(root: Path = None):
    root = root or ROOT
    for path in sorted((root / "acceptance").rglob("*.py")):
        yield path.relative_to(root), _parsed(path)


# -- (a) one-way arrows between acceptance's parts ---------------------------------------------------------
#
# A module's part is the longest key of ARROWS it falls under; it may import its own part and what its entry
# names: "x.*" is x and everything under it, a bare name is that module alone. The picture (DESIGN §2):
# cases -> harness -> contract <- targets (drivers) -> runtime, the CLI above them all.
_ALL = ("acceptance.*", "canaries.*", "mutants.*", "reports.*")
DRIVER_HELPERS = ("acceptance.harness.wait", "acceptance.harness.http", "acceptance.harness.evidence")
ARROWS: dict[str, tuple[str, ...]] = {
    # The root package and the two leaves everyone may use: the error tree, and the catalogue (data, read with
    # the contract's facet names).
    "acceptance": (),
    "acceptance.errors": (),
    "acceptance.catalogue": ("acceptance.contract.*", "acceptance.errors"),
    # The contract is what a driver's author reads: it depends on nothing of the harness (ALLOWED_EDGES below
    # names the arrows check-driver still has).
    "acceptance.contract": ("acceptance.errors",),
    # Cases judge through the harness and the contract's records, never a driver or the runtime: a case that
    # named one would judge that platform only.
    "acceptance.cases": ("acceptance.cases.judges.*", "acceptance.harness.*", "acceptance.contract.*", "acceptance.catalogue",
                         "acceptance.errors", "canaries.*"),
    # Host-side judges: read what a script inside left (its parser included) through the harness's probes.
    "acceptance.cases.judges": ("acceptance.cases.inside.*", "acceptance.harness.*", "acceptance.contract.*",
                                "acceptance.errors", "canaries.*"),
    # Runs inside a sandbox with the system Python only: nothing of ours (rule (c) says the rest).
    "acceptance.cases.inside": (),
    # The harness reaches a target through the registry (acceptance.targets: a driver by name; its profiles:
    # the agent by name), never a driver module; writes its reports through reports/; plants canaries.
    "acceptance.harness": ("acceptance.harness.lab.*", "acceptance.contract.*", "acceptance.targets",
                           "acceptance.targets.profiles", "acceptance.catalogue", "acceptance.errors", "canaries.*", "reports.*"),
    # The lab (netns, sink, capture, the fake provider) is the harness's own machinery: the runtime's errors
    # included, it uses none of the runtime (rule (f)).
    "acceptance.harness.lab": ("acceptance.errors",),
    # The registry and the profiles: what a driver is given.
    "acceptance.targets": ("acceptance.targets.profiles", "acceptance.contract.*", "acceptance.errors"),
    "acceptance.targets.profiles": ("acceptance.contract.*", "acceptance.errors"),
    # Drivers implement the contract, start the lab's stand-ins where their breakers need them, and the runtime's
    # own platform (reference, and docker built on it) drives the runtime; hermes runs on the reference platform.
    # Of the rest of the harness a driver uses only the one helper of each repeated shape (a deadline wait, a
    # JSON/SSE request, an Allure attachment), so that no driver writes its own: those modules, never .*.
    "acceptance.targets.reference": ("acceptance.targets", "acceptance.targets.profiles", "acceptance.contract.*",
                                     "acceptance.harness.lab.*", *DRIVER_HELPERS, "acceptance.errors", "runtime.*"),
    "acceptance.targets.docker": ("acceptance.targets", "acceptance.targets.profiles", "acceptance.targets.reference.*",
                                  "acceptance.contract.*", "acceptance.harness.lab.*", *DRIVER_HELPERS, "acceptance.errors",
                                  "runtime.*"),
    "acceptance.targets.hermes": ("acceptance.targets", "acceptance.targets.profiles", "acceptance.targets.reference.*",
                                  "acceptance.contract.*", "acceptance.harness.lab.*", *DRIVER_HELPERS, "acceptance.errors"),
    # The CLI runs every command: it may use anything of the suite.
    "acceptance.cli": _ALL,
}
# Single edges that break their part's arrow, each with why and when it goes.
ALLOWED_EDGES: dict[tuple[str, str], str] = {
    ("acceptance.contract.conformance", "acceptance.catalogue"): "check-driver names the cases a missing facet leaves "
    "not covered (a named arrow of the contract's module docstring)",
    ("acceptance.contract.conformance", "acceptance.harness.lab"): "check-driver starts a real lab for "
    "broken_open_egress's round trip only (a named arrow of the contract's module docstring)",
}


def _covers(entry: str, module: str) -> bool:
    return module == entry[:-2] or module.startswith(entry[:-1]) if entry.endswith(".*") else module == entry


def _part(module: str) -> str | None:
    keys = [k for k in ARROWS if module == k or module.startswith(k + ".")]
    return max(keys, key=len) if keys else None


def arrow_violations(graph: dict[str, set[str]]) -> list[str]:
    """(a) Each import of an acceptance module its part's entry of ARROWS does not allow (and no allowance names)."""
    out = []
    for module in sorted(m for m in graph if m.split(".")[0] == "acceptance"):
        part = _part(module)
        for target in sorted(graph[module]):
            if _part(target) == part or any(_covers(e, target) for e in ARROWS[part]) \
                    or (module, target) in ALLOWED_EDGES:
                continue
            out.append(f"{module} -> {target} ({part} may not import {_part(target) or target.split('.')[0]})")
    return out


def test_the_arrow_rule_finds_a_planted_import(tmp_path):
    """A case importing a driver, the lab importing the runtime's errors, the contract importing the harness: found;
    the same imports where their part allows them are not."""
    for folder in ("cases", "harness/lab", "contract", "targets/reference"):
        (tmp_path / "acceptance" / folder).mkdir(parents=True)
    (tmp_path / "runtime").mkdir()
    for init in ("acceptance", "acceptance/cases", "acceptance/harness", "acceptance/harness/lab", "acceptance/contract",
                 "acceptance/targets", "acceptance/targets/reference", "runtime"):
        (tmp_path / init / "__init__.py").write_text("")
    (tmp_path / "runtime" / "errors.py").write_text("")
    (tmp_path / "acceptance" / "errors.py").write_text("")
    (tmp_path / "acceptance" / "cases" / "test_x.py").write_text("from acceptance.targets.reference import driver\n"
                                                                  "from acceptance.harness.lab import provider\n")
    (tmp_path / "acceptance" / "harness" / "lab" / "provider.py").write_text("from runtime.errors import ConfigError\n")
    contract, driver = tmp_path / "acceptance" / "contract", tmp_path / "acceptance" / "targets" / "reference"
    (contract / "core.py").write_text("from acceptance import errors\nfrom acceptance.harness import lab\n")
    (driver / "driver.py").write_text("import runtime.errors\nfrom .. import reference\n"
                                      "from acceptance.harness.lab import provider\n")
    graph = import_graph(tmp_path, ("acceptance", "runtime"))
    assert arrow_violations(graph) == [
        "acceptance.cases.test_x -> acceptance.targets.reference.driver "
        "(acceptance.cases may not import acceptance.targets.reference)",
        "acceptance.contract.core -> acceptance.harness.lab (acceptance.contract may not import acceptance.harness.lab)",
        "acceptance.harness.lab.provider -> runtime.errors (acceptance.harness.lab may not import runtime)",
    ]


def test_acceptance_s_parts_import_one_way():
    graph = _this_checkout()
    assert arrow_violations(graph) == []
    unplaced = sorted(m for m in graph if m.split(".")[0] == "acceptance" and _part(m) == "acceptance" and m != "acceptance")
    assert unplaced == [], "modules of no part: give their folder an entry in ARROWS"
    stale = [f"{a} -> {b}" for (a, b) in ALLOWED_EDGES if b not in graph.get(a, set())]
    assert stale == [], "allowances for edges that are gone: delete them from ALLOWED_EDGES"


# -- (c) what runs inside a sandbox: the standard library only ---------------------------------------------

INSIDE = Path("acceptance") / "cases" / "inside"


def inside_violations(root: Path) -> list[str]:
    """(c) Imports under ``acceptance/cases/inside`` that are relative, or of neither the standard library nor a
    sibling script: the scripts run in a sandbox under its system Python, a sibling (``listeners``) installed
    beside the one that imports it by the runner (``acceptance/cases/judges/netprobes.py``)."""
    out = []
    siblings = {path.stem for path in (root / INSIDE).glob("*.py")}
    for path in sorted((root / INSIDE).rglob("*.py")):
        for node in ast.walk(_parsed(path)):
            if isinstance(node, ast.ImportFrom) and node.level:
                out.append(f"{path.relative_to(root)}:{node.lineno} imports relatively")
        out += [f"{path.relative_to(root)}:{line} imports {name}" for line, name in _absolute_imports(_parsed(path))
                if name.split(".")[0] not in {*sys.stdlib_module_names, *siblings}]
    return out


def test_the_inside_rule_finds_a_planted_import(tmp_path):
    (tmp_path / INSIDE).mkdir(parents=True)
    (tmp_path / INSIDE / "listeners.py").write_text("import socket\n")
    (tmp_path / INSIDE / "probe.py").write_text("from __future__ import annotations\nimport os, json\nimport yaml\n"
                                                "from . import dump\nfrom acceptance import errors\nimport listeners\n")
    assert inside_violations(tmp_path) == [f"{INSIDE}/probe.py:4 imports relatively", f"{INSIDE}/probe.py:3 imports yaml",
                                           f"{INSIDE}/probe.py:5 imports acceptance"]


def test_what_runs_inside_a_sandbox_uses_the_standard_library_only():
    assert inside_violations(ROOT) == []


# -- (d) only the runtime's own drivers import it ----------------------------------------------------------

def runtime_importers(root: Path) -> list[str]:
    """(d) Imports of ``runtime`` in the suite's packages outside the drivers of the runtime's platform."""
    offenders = []
    for package in ("acceptance", "canaries", "reports", "mutants"):
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root)
            if rel.parts[:3] in RUNTIME_DRIVERS:
                continue
            offenders += [f"{rel}:{line} imports {name}" for line, name in _absolute_imports(_parsed(path))
                          if name.split(".")[0] == "runtime"]
    return offenders


def test_the_runtime_importers_rule_finds_a_planted_import(tmp_path):
    for folder in ("acceptance/harness/lab", "acceptance/targets/reference", "acceptance/targets/docker", "reports"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "acceptance" / "harness" / "lab" / "provider.py").write_text("from runtime.errors import ConfigError\n")
    (tmp_path / "reports" / "gate.py").write_text("import importlib\nimportlib.import_module('runtime.controller')\n")
    (tmp_path / "acceptance" / "targets" / "reference" / "driver.py").write_text("import runtime.controller\n")
    (tmp_path / "acceptance" / "targets" / "docker" / "driver.py").write_text("from runtime.isolation import containers\n")
    assert runtime_importers(tmp_path) == ["acceptance/harness/lab/provider.py:1 imports runtime.errors",
                                           "reports/gate.py:2 imports runtime.controller"]


def test_only_the_runtime_s_own_drivers_import_it():
    """A security team's driver replaces the reference one; nothing else of the suite may need ``runtime``
    (the drivers of the runtime's platform, reference and docker, excepted)."""
    assert runtime_importers(ROOT) == []


# Objects of the harness's own (never the runtime's) whose underscored attributes the harness may read,
# each with its reason. An entry names the file, the expression, and why.
PRIVATE_READS_ALLOWED: dict[tuple[str, str], str] = {
    ("acceptance/cases/inside/userns_probe.py", "os._exit"): "the standard library's documented exit for a forked child "
    "(it must not run the parent's exit handlers or flush its buffers a second time): public despite its name",
    ("acceptance/cases/inside/posture_probe.py", "os._exit"): "the same: the CPU hog's forked workers exit with it",
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
    # rglob: the case helpers the cases call with ``target`` live in judges/ since the re-layout (a glob of
    # cases/*.py alone no longer sees them); inside/ has no target, and is scanned at no cost.
    scanned = sorted(cases.rglob("*.py"))
    assert any(p.parent.name == "judges" for p in scanned), "no judge scanned: the case helpers moved again"
    found = [f"{path.relative_to(cases)}: {hit}" for path in scanned for hit in words.findall(path.read_text())]
    assert found == []
