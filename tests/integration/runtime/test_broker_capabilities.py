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


def test_a_crashed_sandbox_takes_its_lease_with_it(platform_controller):
    """The broker outlives its sandbox's crash, but what it holds does not: once the sandbox is gone its lease
    is ended (no_current_lease), before any recovery; a recovery admits a successor whose capability works."""
    from runtime.authority.capabilities import AuthorityError
    from runtime.wait import until

    c = platform_controller
    record = c.wake(c.provision("org1", "alice").id)
    model = c.broker(record.id).hand_out_capabilities("crash fence test")["model"]
    c.platform.current.check(c.platform.models.verify(model))
    c.crash(record.id)
    until(lambda: c.platform.current.standing(record.id) is None, 5.0, "the crashed sandbox's lease ended")
    with pytest.raises(AuthorityError, match="no current lease"):
        c.platform.current.check(c.platform.models.verify(model))
    successor = c.recover(record.id)
    held = c.broker(successor.id).hand_out_capabilities("crash fence test")["model"]
    c.platform.current.check(c.platform.models.verify(held))
