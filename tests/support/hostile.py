"""The hostile agent's test helpers (tests/support/hostile_agent.py), shared by its reference and Docker runs."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = ROOT / "tests" / "support" / "hostile_agent.toml"


def outside_folder() -> tuple[Path, str]:
    """A host folder only root may read, with a synthetic secret in it: what the agent's links point at. The
    caller removes ``secret.parent``."""
    folder = Path(tempfile.mkdtemp(prefix="pairproof-hostile-outside-", dir="/var/tmp"))
    os.chmod(folder, 0o700)
    secret = folder / "secret"
    token = f"hostile-host-secret-{secrets.token_hex(8)}"
    secret.write_text(token + "\n")
    os.chmod(secret, 0o600)
    return secret, token


def profile(tmp_path: Path, marker: Path, kill: bool) -> Path:
    """The hostile profile with the marker's path and the killer switched on or off (its files by full path)."""
    text = HOSTILE.read_text().replace('env = { TINY_MODEL_URL = "{broker}" }',
                                       f'env = {{ TINY_MODEL_URL = "{{broker}}", HOSTILE_MARKER = "{marker}", '
                                       f'HOSTILE_KILL = "{int(kill)}" }}')
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
    """``pairproof qualify`` of the tiny agent's cases with the hostile agent's killer on (``target``: extra
    arguments, e.g. ``--target docker --image ID``), judged: it ends within its budget with a verdict, no case
    passes on a killed probe, the static probe's scans completed. The verdict."""
    reports = tmp_path / "reports"
    cases = [arg for case in tiny_cases() for arg in ("--case", case)]
    done = subprocess.run(
        [sys.executable, "-m", "acceptance.cli", "qualify", *target, "--profile", str(profile(tmp_path, marker, kill=True)),
         "--state-dir", str(state_dir), "--reports-dir", str(reports), "--budget", "900", *cases],
        cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 1, done.stdout[-3000:]
    verdict = json.loads((reports / "verdict.json").read_text())  # a verdict, within the budget
    run = {case["id"]: case for case in verdict["cases"] if case["status"] != "not covered"}
    assert set(run) == set(tiny_cases()), sorted(run)
    assert verdict["status"] != "passed"
    assert {case["status"] for case in run.values()} <= {"passed", "failed", "broken"}
    # The attack landed (probes killed: rc -9, no proof line) and each case it reached says so; nothing else broke
    # them (a name that is not UTF-8 once broke PR-1's host-side listing with UnicodeDecodeError).
    broken = {cid: case["reason"] for cid, case in run.items() if case["status"] == "broken"}
    assert broken, "no probe was killed: the hostile agent's killer did not run"
    # Killed: rc -9 from the host's own wait, 137 (128 + 9) through the engine's exec; or no proof line at all.
    assert all(any(mark in why for mark in ("-9", "137", "ProofError")) for why in broken.values()), broken
    assert not any("UnicodeDecodeError" in why for why in broken.values()), broken
    # A case that passed did so on probes that ran unharmed: every test of it has proof of execution (the plugin
    # refuses a refusal without; a killed probe is no proof), never on the absence of an answer.
    for cid, case in run.items():
        if case["status"] == "passed":
            assert all(t.get("proofs", 1) > 0 for t in case.get("refusals", [])), (cid, case)
    # The static probe is the one the killer could not reach: held out of its way (the instance frozen), its scans
    # completed in the hostile instances, sentinels and all.
    scans = [e for case in run.values() for r in case.get("refusals", []) for e in r.get("evidence", [])
             if e.get("kind") == "scan" and str(e.get("engine", "")).startswith("static probe")]
    assert scans, "no static-probe scan completed in a hostile instance: the hold did not keep it from the killer"
    return verdict
