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


def test_a_long_running_instance_keeps_the_model_while_its_lease_stands(platform_controller, monkeypatch):
    """The model capability is short-lived; an instance that runs longer than it keeps the model (its broker
    renews it, under the lease current then), until its authority is revoked: then nothing is renewed and the
    one held runs out."""
    import runtime.controller as controller
    from runtime.authority.capabilities import AuthorityError
    from runtime.wait import until

    monkeypatch.setattr(controller, "MODEL_TTL", 1.0)  # renewed past half of it
    c = platform_controller
    record = c.wake(c.provision("org1", "alice").id)
    broker = c.broker(record.id)
    first = broker.hand_out_capabilities("model renewal test")["model"]

    def expired(capability: str) -> bool:
        try:
            c.platform.models.verify(capability)
        except AuthorityError as exc:
            return exc.reason == "expired"
        return False

    until(lambda: expired(first), 5.0, "the first model capability ran out")
    renewed = broker._model_capability()
    assert renewed != first
    c.platform.current.check(c.platform.models.verify(renewed))
    c.revoke(record.id)
    until(lambda: expired(renewed), 5.0, "the renewed model capability ran out")
    assert broker._model_capability() == renewed  # revoked: nothing renewed
