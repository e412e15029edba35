"""Dependencies point one way (DESIGN §2): runtime imports none of the suite's packages."""

from __future__ import annotations

import ast
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

    tree = ast.parse((Path(runtime.__file__).parent / "agent.py").read_text())
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
