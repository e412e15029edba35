"""SIGKILL of the controller itself mid-effect: a new controller on the same state finds the instance
asleep, its journal intact, and recovery settles the unknown effect by asking the product: one effect."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from acceptance.harness.lab.provider import ProviderMock
from runtime.controller import Controller
from runtime.isolation import cleanup
from runtime.platform import Platform, PlatformConfig

pytestmark = pytest.mark.slow

FIRST_LIFE = textwrap.dedent("""
    import json, os, signal, sys
    from pathlib import Path
    from runtime.controller import Controller
    from runtime.platform import Platform, PlatformConfig
    from acceptance.harness.lab.provider import ProviderMock
    root, run = Path(sys.argv[1]), sys.argv[2]
    provider = ProviderMock("crash-provider-key").start()
    (root / "runs" / run).mkdir(parents=True, exist_ok=True)
    platform = Platform(root / "runs" / run, PlatformConfig(provider.url, "crash-provider-key")).start()
    controller = Controller(root, run, platform=platform)
    rec = controller.provision("org1", "kim")
    controller.wake(rec.id)
    provider.script("org1:kim", [{"tool": "notes_create", "arguments": {"body": "written once"}}, {"reply": "ok"}])
    controller.turn(rec.id, "note it")
    journal = controller.journal(rec.id)
    [op] = journal.ops()
    # The crash lands after the request reached the product and before the broker recorded the answer.
    journal.mark(op["op"], "dispatched")
    print(json.dumps({"instance": rec.id, "op": op["op"]}), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_controller_sigkill_then_recovery_keeps_one_effect():
    root = Path(tempfile.mkdtemp(prefix="pairproof-test-", dir="/var/tmp"))
    run = f"ctlcrash-{os.getpid()}"
    try:
        first = subprocess.run([sys.executable, "-c", FIRST_LIFE, str(root), run], capture_output=True, text=True,
                               timeout=120, cwd=Path(__file__).resolve().parents[3])
        assert first.returncode == -signal.SIGKILL, first.stderr[-2000:]
        died = json.loads(first.stdout.strip().splitlines()[-1])
        provider = ProviderMock("crash-provider-key").start()
        platform = Platform(root / "runs" / run, PlatformConfig(provider.url, "crash-provider-key")).start()
        controller = Controller(root, run, platform=platform)
        try:
            assert controller.get(died["instance"]).state == "sleeping"  # its sandbox died with the controller
            [op] = [o for o in controller.journal(died["instance"]).ops() if o["op"] == died["op"]]
            assert op["state"] == "dispatched"
            controller.recover(died["instance"])
            [op] = [o for o in controller.journal(died["instance"]).ops() if o["op"] == died["op"]]
            assert (op["state"], op["attempts"]) == ("completed", 1)
            notes = [r for r in platform.product.store._db.execute("SELECT body FROM records WHERE kind = 'note'")]
            assert [n[0] for n in notes] == ["written once"]
        finally:
            controller.close()
            platform.stop()
            provider.stop()
    finally:
        cleanup.clean(root, include_live=True)
        shutil.rmtree(root, ignore_errors=True)
