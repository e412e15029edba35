"""``pairproof check-driver``: on the reference target the core, the sandbox rules (SBX-1..6) and every facet
work (exit 0, about 6 s); on a wrapper without snapshots the facet is missing, naming the cases it leaves not
covered, and the rest works; on one whose ``rotate`` changes nothing the credentials facet fails (exit 1); bad
input exits 2. Each driver run takes 6-12 s (the module about 50 s on two busy cores), so none is marked slow."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from acceptance import catalogue
from acceptance.contract import FACETS
from acceptance.contract.sandbox import RULES

CHECKOUT = Path(__file__).resolve().parents[3]


def check_driver(target: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(CHECKOUT), str(CHECKOUT / "tests")])}
    return subprocess.run([sys.executable, "-m", "acceptance.cli", "check-driver", target], cwd=CHECKOUT, env=env,
                          capture_output=True, text=True, timeout=180)


def states(out: str) -> dict[str, str]:
    """facet (or core, close) -> works | missing | FAILS | not checked, from the printed lines."""
    lines = [line.split(None, 2) for line in out.splitlines() if line.startswith("  ")]
    return {parts[0]: parts[1] for parts in lines}


def test_the_reference_target_passes_check_driver():
    result = check_driver("reference")
    assert result.returncode == 0, result.stdout + result.stderr
    assert states(result.stdout) == {name: "works" for name in ["core", *RULES, *FACETS, "close"]}, result.stdout
    assert "check-driver: PASSED" in result.stdout


def test_a_missing_facet_is_named_with_the_cases_it_leaves_not_covered():
    result = check_driver("support.partial_reference:without_snapshots")
    assert result.returncode == 0, result.stdout + result.stderr  # what it claims works
    found = states(result.stdout)
    assert found.pop("snapshots") == "missing"
    assert set(found.values()) == {"works"}, result.stdout
    needing = [c.id for c in catalogue.load().values() if "snapshots" in c.facets]
    line = next(line for line in result.stdout.splitlines() if line.split()[:1] == ["snapshots"])
    assert f"{', '.join(needing)} will be not covered" in line


def test_a_claimed_facet_that_does_not_work_fails_the_check():
    result = check_driver("support.partial_reference:rotate_does_nothing")
    assert result.returncode == 1, result.stdout + result.stderr
    found = states(result.stdout)
    assert found.pop("credentials") == "FAILS", result.stdout
    assert set(found.values()) == {"works"}, result.stdout
    assert "rotate changed none of the capabilities" in result.stdout
    assert "check-driver: FAILED" in result.stdout and "fails: credentials" in result.stdout


@pytest.mark.parametrize("factory, failing, says", [
    # its capabilities, rotated in name, buy no model call either: model fails too
    ("rotate_in_name_only", {"credentials", "model"}, "the platform did not rotate what it honours"),
    ("restore_restores_nothing", {"snapshots"}, "it restored nothing"),
])
def test_a_facet_that_only_looks_like_it_works_fails_the_check(factory, failing, says):
    """The check asks the platform, not the driver's word: a rotation the proxy does not honour, a restore
    that leaves what was written after the snapshot."""
    result = check_driver(f"support.partial_reference:{factory}")
    assert result.returncode == 1, result.stdout + result.stderr
    found = states(result.stdout)
    assert {f for f, state in found.items() if state != "works"} == failing, result.stdout
    assert {found[f] for f in failing} == {"FAILS"}, result.stdout
    assert says in result.stdout


@pytest.mark.parametrize("target, says", [
    ("nosuch", "unknown target 'nosuch'"),
    ("no.such.module:create", "cannot import 'no.such.module'"),
    ("acceptance.contract:nothing", "has no 'nothing'"),
    ("acceptance.contract:FACETS", "not a factory"),
])
def test_bad_input_is_one_line_and_exit_2(target, says):
    result = check_driver(target)
    assert result.returncode == 2
    assert says in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
