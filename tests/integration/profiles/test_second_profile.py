"""A second agent, not the reference agent (tests/support/tiny_agent.py: a sync POST /chat on another port, its
own files, plant phrases and tool names, no ``metadata.purpose``), run through its profile: the reference
driver starts it, delivers turns to its own API through the broker, plants and reads back where the profile
says; and the qualification passes the cases that need no more than the core and the broker."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from acceptance import catalogue
from acceptance.contract import LOCATIONS, Principal
from acceptance.targets import TargetOptions, profiles
from acceptance.targets.reference import create
from runtime.isolation import cleanup

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "tests" / "support" / "tiny_agent.toml"
# The cases that need no more than the core and the broker, from the catalogue's facets: the broker, and the
# broken arrangements that are sandboxes the driver builds (their X controls run no agent). NT-5 is left out:
# its X control runs the reference agent's own model-catalog refresh, which the tiny agent does not have.
SANDBOX_ARRANGEMENTS = {"broken_shared_volume", "broken_shared_tmp", "broken_shared_pid_ns", "broken_nested_userns",
                        "broken_same_uid", "broken_host_account_uid", "broken_open_egress", "broken_secret_in_env"}
NOT_THE_TINY_AGENTS = {"NT-5"}
CORE_AND_BROKER = tuple(sorted(
    case.id for case in catalogue.load().values()
    if set(case.facets) <= {"broker"} | SANDBOX_ARRANGEMENTS and case.id not in NOT_THE_TINY_AGENTS))
# Cases that need the model path and credentials too, which the tiny agent passes as well.
ALSO = ("FS-3", "MD-1")


@pytest.fixture
def state_dir():
    # Instance uids must traverse the state root's parents, so not under pytest's 0700 tmp_path.
    path = Path(tempfile.mkdtemp(prefix="pairproof-tiny-", dir="/var/tmp"))
    yield path
    cleanup.clean(path, include_live=True)
    shutil.rmtree(path, ignore_errors=True)


def test_the_tiny_agent_runs_through_its_profile(state_dir):
    profile = profiles.load(str(TINY))
    target = create(TargetOptions(run=f"tiny-{os.getpid()}", state_dir=state_dir, secrets={}, profile=profile))
    try:
        ref = target.provision(Principal("T", "org1", "tina"))
        # Its image holds its own file and nothing of the reference agent's; its process is its command.
        listing = target.exec(ref, ["/bin/ls", "/opt/pairproof"])
        assert listing.stdout.decode().split() == ["tiny_agent.py"]
        tokens = {location: f"tiny-{location}-{secrets.token_hex(4)}" for location in LOCATIONS}
        for location, token in tokens.items():
            target.plant(ref, location, token)
        for location, token in tokens.items():
            assert token in target.read_back(ref, location), location
        # Its own file layout, not the reference agent's: the memory canary is in mem.txt, there is no memory.md.
        files = target.exec(ref, ["/bin/sh", "-c", "cd /data && find . -type f | sort"]).stdout.decode().split()
        assert {"./mem.txt", "./log.jsonl", "./todo.txt", "./box/notes.txt"} <= set(files), files
        assert "./memory.md" not in files
        # A turn with a product tool, scripted by the agent's own name for it: the note is made through the broker.
        marker = f"tiny-note-{secrets.token_hex(4)}"
        target.script_model(ref.principal, [{"tool": profile.tool("notes_create"), "arguments": {"body": marker}},
                                            {"reply": "noted"}])
        assert target.turn(ref, "make a note") == "noted"
        status, body = target.person(ref.principal).request("GET", "/api/records?kind=note")
        assert status == 200 and marker in json.dumps(body)
        # The model saw the agent's own tool names; the agent declared no purpose.
        [*_, last] = [r for r in target.provider_records() if r["user"] == "org1:tina"]
        assert "save_note" in last["tools"] and "notes_create" not in last["tools"]
        # it declared none: the proxy attributes it by its shape (a turn with tools is none of the background
        # kinds) and says so, never lumping it in silently
        assert last["purpose"] == "unattributed"
    finally:
        target.close()


def test_the_qualification_passes_the_core_and_broker_cases_with_the_tiny_agent(state_dir, tmp_path):
    assert len(CORE_AND_BROKER) >= 10, CORE_AND_BROKER  # the catalogue still names them
    wanted = CORE_AND_BROKER + ALSO
    cases = [arg for case in wanted for arg in ("--case", case)]
    done = subprocess.run(
        [sys.executable, "-m", "acceptance.cli", "qualify", "--profile", str(TINY), "--state-dir", str(state_dir),
         "--reports-dir", str(tmp_path), *cases],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    verdict = json.loads((tmp_path / "verdict.json").read_text())
    status = {case["id"]: case["status"] for case in verdict["cases"]}
    assert {case: status.get(case) for case in wanted} == dict.fromkeys(wanted, "passed"), \
        done.stdout[-4000:]
