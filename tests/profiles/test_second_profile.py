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

from acceptance import profiles
from acceptance.contract import LOCATIONS, Principal
from acceptance.targets import TargetOptions
from acceptance.targets.reference import create
from runtime import cleanup

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "support" / "tiny_agent.toml"
# Cases whose refusals and controls need the core (provision, exec, identity, turn, plant, read back,
# artifacts, platform secrets) and the broker (its endpoint, the MCP filter, the model path through it) only,
# plus broken arrangements of their X controls that do not run the reference agent. (The catalogue's facets
# list replaces this at merge.)
CORE_AND_BROKER = ("FS-1", "FS-2", "FS-3", "PR-1", "PR-2", "RS-1", "RS-2", "NT-1", "NT-2", "NT-3", "NT-4", "TL-1",
                   "TL-2", "MD-1")


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
    cases = [arg for case in CORE_AND_BROKER for arg in ("--case", case)]
    done = subprocess.run(
        [sys.executable, "-m", "acceptance.cli", "qualify", "--profile", str(TINY), "--state-dir", str(state_dir),
         "--reports-dir", str(tmp_path), *cases],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    verdict = json.loads((tmp_path / "verdict.json").read_text())
    status = {case["id"]: case["status"] for case in verdict["cases"]}
    assert {case: status.get(case) for case in CORE_AND_BROKER} == dict.fromkeys(CORE_AND_BROKER, "passed"), \
        done.stdout[-4000:]
