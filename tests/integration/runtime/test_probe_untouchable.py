"""Issue 28 item 4: the agent could read and rewrite the platform's probe while it ran.

The static probe runs where the agent lives: its uid, its pid namespace. Beside it, a process of the agent's
found it in /proc, read its environment (the sentinel tokens) and opened its memory read-write: free to change
what the probe would report, the harness would have read the agent's report as the probe's. The
controller now runs a host file by descriptor with every process of the instance frozen from before it starts
until it has ended (``Controller.run_binary_inside``); the engine's own call, without that hold, is the old
behaviour, and is shown here to be open to exactly that.
"""

from __future__ import annotations

import pytest
from support.probe_watcher import show_the_hold


@pytest.mark.slow
def test_the_agent_cannot_read_or_write_a_probe_run_by_the_platform(controller, monkeypatch):
    rec = controller.provision("org1", "alice")
    controller.wake(rec.id)
    show_the_hold(controller, rec.id, monkeypatch)
