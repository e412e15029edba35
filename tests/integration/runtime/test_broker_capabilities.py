"""The broker hands out what it holds only with a reason, and says so in the platform's log."""

from __future__ import annotations

import pytest


def test_handing_out_capabilities_is_logged_with_its_reason_and_no_value(platform_controller):
    c = platform_controller
    record = c.wake(c.provision("org1", "alice").id)
    broker = c.broker(record.id)
    held = broker.hand_out_capabilities("incident 42: replay test")
    assert set(held) == {"grant", "model", "runctl"} and all(held.values())
    log = c.platform.log_path.read_text()
    assert f"broker {record.id} handed out its capabilities: incident 42: replay test" in log
    assert not [name for name, value in held.items() if value in log]
    with pytest.raises(ValueError, match="say why"):
        broker.hand_out_capabilities("  ")
