"""Issue 28 item 4 under Docker: the agent's process beside the static probe in its container (same uid, same pid
namespace) took its environment and opened its memory for writing; the controller now runs the probe with the
container's processes frozen (``tests/support/probe_watcher.py`` says how it is shown)."""

from __future__ import annotations

import secrets

import pytest
from support.probe_watcher import show_the_hold, show_the_shell

from acceptance.targets.docker import image as images
from runtime.controller import Controller
from runtime.isolation import containers


@pytest.mark.slow
def test_the_agent_cannot_read_or_write_a_probe_run_by_the_platform_in_a_container(root, monkeypatch):
    run = f"dt{secrets.token_hex(4)}"
    controller = Controller(root, run, engine=containers.DockerEngine(images.ensure("reference"), run))
    try:
        rec = controller.provision("org1", "alice")
        controller.wake(rec.id)
        show_the_hold(controller, rec.id, monkeypatch)
    finally:
        controller.close()


@pytest.mark.slow
def test_the_agent_cannot_read_a_shell_probe_in_a_container_and_the_shell_is_the_suites(root):
    run = f"dt{secrets.token_hex(4)}"
    controller = Controller(root, run, engine=containers.DockerEngine(images.ensure("reference"), run))
    try:
        rec = controller.provision("org1", "alice")
        controller.wake(rec.id)
        show_the_shell(controller, rec.id)
    finally:
        controller.close()
