"""The hostile agent's test helpers (tests/support/hostile_agent.py), shared by its reference and Docker runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from canaries import Mint, detect

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = ROOT / "tests" / "support" / "hostile_agent.toml"
# The whole catalogue against an agent that kills every probe it can see: the run's watchdog budget (seconds).
BUDGET = 1500


def outside_folder() -> tuple[Path, str]:
    """A host folder only root may read, with a synthetic secret in it: what the agent's links point at. The
    caller removes ``secret.parent``."""
    # Under /run, which no sweep of the suite's walks (as SN-4's folder): in /var/tmp, another test's at-rest sweep
    # running beside this one listed it as root, and the inotify watch blamed the platform (a CI failure).
    folder = Path(tempfile.mkdtemp(prefix="pairproof-hostile-outside-", dir="/run"))
    os.chmod(folder, 0o700)
    secret = folder / "secret"
    # A token of the run this process's scans look for (the suite's own mint), so the at-rest sweep and every scanner
    # find it wherever it lands: a token of another run would be found by none, and the sweep's check could not fail.
    token = Mint(detect.run_in_use()).mint("plat", "key").token
    secret.write_text(token + "\n")
    os.chmod(secret, 0o600)
    return secret, token


def profile(tmp_path: Path, marker: Path, kill: bool, deep: bool = False) -> Path:
    """The hostile profile with the marker's path, the killer and the deep folder switched on or off (its files by
    full path)."""
    text = HOSTILE.read_text().replace('env = { TINY_MODEL_URL = "{broker}" }',
                                       f'env = {{ TINY_MODEL_URL = "{{broker}}", HOSTILE_MARKER = "{marker}", '
                                       f'HOSTILE_KILL = "{int(kill)}", HOSTILE_DEEP = "{int(deep)}" }}')
    support = HOSTILE.parent
    text = text.replace('files = ["hostile_agent.py", "tiny_agent.py"]',
                        f'files = ["{support / "hostile_agent.py"}", "{support / "tiny_agent.py"}"]')
    path = tmp_path / "hostile.toml"
    path.write_text(text)
    return path


def tiny_cases() -> list[str]:
    """The cases the tiny agent passes (tests/integration/profiles/test_second_profile.py; PB-1 among them)."""
    from acceptance import catalogue

    arrangements = {"broken_shared_volume", "broken_shared_tmp", "broken_shared_pid_ns", "broken_nested_userns",
                    "broken_same_uid", "broken_host_account_uid", "broken_open_egress", "broken_secret_in_env"}
    core = sorted(c.id for c in catalogue.load().values() if set(c.facets) <= {"broker"} | arrangements
                  and c.id != "NT-5")
    return [*core, "FS-3", "MD-1"]


def qualify_with_killer(tmp_path: Path, state_dir: Path, marker: Path, *target: str) -> dict:
    """``pairproof qualify`` of the whole catalogue with the hostile agent's killer on (``target``: extra arguments,
    e.g. ``--target docker --image ID``), judged: it ends within its budget with a verdict; no case passes on a
    killed probe (a case passes only on probes that ran, with proof); the cases the tiny agent's API carries are
    all reached, and those its probes were killed in say so; the static probe's scans completed. The verdict.

    The hostile agent is the tiny agent's API with traps: the cases that need more than it has (the product's
    tools, a model-driven loop) fail or break on what it lacks, which is a verdict too; none may pass without
    proof and none may leave the run without a verdict."""
    from acceptance import catalogue

    reports = tmp_path / "reports"
    done = subprocess.run(
        [sys.executable, "-m", "acceptance.cli", "qualify", *target,
         "--profile", str(profile(tmp_path, marker, kill=True, deep=True)),
         "--state-dir", str(state_dir), "--reports-dir", str(reports), "--budget", str(BUDGET)],
        cwd=ROOT, capture_output=True, text=True, timeout=BUDGET + 300)
    assert done.returncode == 1, done.stdout[-3000:]
    verdict = json.loads((reports / "verdict.json").read_text())  # a verdict, within the budget
    # And the run removed what it made, 1200 nested folders and all (a removal that fails only logs a warning).
    runs = state_dir / "runs"
    assert not runs.exists() or list(runs.iterdir()) == [], sorted(p.name for p in runs.iterdir())
    every = {case["id"]: case for case in verdict["cases"]}
    assert set(every) == set(catalogue.load()), sorted(set(catalogue.load()) ^ set(every))
    assert verdict["status"] != "passed"
    # Every case ran, or says which facet of the target it lacks: nothing left out without a reason.
    unrun = {cid: case for cid, case in every.items() if case["status"] == "not covered"}
    assert all("target lacks" in case.get("reason", "") for case in unrun.values()), unrun
    run = {cid: case for cid, case in every.items() if cid not in unrun}
    assert set(tiny_cases()) <= set(run), sorted(set(tiny_cases()) - set(run))
    assert {case["status"] for case in run.values()} <= {"passed", "failed", "broken"}
    # The attack landed (probes killed: rc -9, no proof line) and each case it reached says so with its reason;
    # nothing else broke them (a name that is not UTF-8 once broke PR-1's host-side listing with
    # UnicodeDecodeError).
    broken = {cid: case["reason"] for cid, case in run.items() if case["status"] == "broken"}
    assert broken, "no probe was killed: the hostile agent's killer did not run"
    assert all(why for why in broken.values()), {cid: why for cid, why in broken.items() if not why}
    killed = {cid: why for cid, why in broken.items() if any(mark in why for mark in ("-9", "137", "ProofError"))}
    tiny_broken = {cid: why for cid, why in broken.items() if cid in tiny_cases()}
    # In the cases its API carries, a broken case is broken by the killer, never by anything else.
    assert set(tiny_broken) <= set(killed), {cid: why for cid, why in tiny_broken.items() if cid not in killed}
    assert not any("UnicodeDecodeError" in why or "RecursionError" in why for why in broken.values()), broken
    # A case that passed did so on probes that ran unharmed: every test of it has proof of execution (the plugin
    # refuses a refusal without; a killed probe is no proof), never on the absence of an answer.
    for cid, case in run.items():
        if case["status"] == "passed":
            assert case.get("refusals"), (cid, case)
            assert all(t.get("proofs", 0) > 0 for t in case["refusals"]), (cid, case)
    # The static probe is the one the killer could not reach: held out of its way (the instance frozen), its scans
    # completed in the hostile instances, sentinels and all.
    scans = [e for case in run.values() for r in case.get("refusals", []) for e in r.get("evidence", [])
             if e.get("kind") == "scan" and str(e.get("engine", "")).startswith("static probe")]
    assert scans, "no static-probe scan completed in a hostile instance: the hold did not keep it from the killer"
    return verdict
