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
from support.probe_watcher import show_the_hold, show_the_shell


@pytest.mark.slow
def test_the_agent_cannot_read_or_write_a_probe_run_by_the_platform(controller, monkeypatch):
    rec = controller.provision("org1", "alice")
    controller.wake(rec.id)
    show_the_hold(controller, rec.id, monkeypatch)


@pytest.mark.slow
def test_the_agent_cannot_read_a_shell_probe_and_the_shell_is_the_suites(controller):
    """Items 4 and 5 for shell probes (``support/probe_watcher.show_the_shell``): run with the instance running, in
    the suite's busybox by descriptor, they are out of the agent's reach, and no file of the image's runs them."""
    rec = controller.provision("org1", "alice")
    controller.wake(rec.id)
    show_the_shell(controller, rec.id)


@pytest.mark.slow
def test_a_wake_or_a_second_hold_never_thaws_an_instance_under_a_held_probe(controller):
    """The holds' own bookkeeping (an attacker's review found it untested): a second, shorter hold ending, then a
    sleep at the frozen depth and a wake, all while a held probe still runs: the instance stays frozen until that
    probe ends, and runs again after (it was woken). The old code thawed it at the second hold's end or the wake."""
    import shutil
    import threading

    from acceptance.harness import observers as observe
    from runtime.wait import until

    rec = controller.provision("org1", "alice")
    controller.wake(rec.id)
    proc = controller.sandbox(rec.id)
    pids = proc.cgroup.pids()
    sleep = shutil.which("sleep")
    ended: list = []
    probe = threading.Thread(target=lambda: ended.append(controller.run_binary_inside(proc, sleep, ["12"], timeout=60)))
    probe.start()
    try:
        until(lambda: all(observe.frozen(pid) for pid in pids), 10, "the held probe did not freeze the instance")
        seen = {}
        controller.run_binary_inside(proc, sleep, ["0.1"], timeout=30)
        seen["after a second hold ended"] = {pid: observe.frozen(pid) for pid in pids}
        controller.sleep(rec.id, "frozen")
        controller.wake(rec.id)
        seen["after a sleep and a wake"] = {pid: observe.frozen(pid) for pid in pids}
        assert probe.is_alive(), "the probe ended before the checks: they show nothing"
    finally:
        probe.join(60)
    assert seen == dict.fromkeys(seen, dict.fromkeys(pids, True)), seen
    assert ended and ended[0].rc == 0, ended
    assert {pid: observe.frozen(pid) for pid in pids} == dict.fromkeys(pids, False)
