"""The kill switch (``authority.Current.revoke``) lasts until the instance's generation changes: a routine
rotation of the lease does not lift it, a new generation or an ended lease starts afresh."""

from __future__ import annotations

import time

import pytest

from runtime.authority.capabilities import AuthorityError, Claims, Current


def claims(generation: int, lease: str) -> Claims:
    return Claims("model", "i-1", "org", "user", generation, lease, time.time() + 60)


def test_a_rotation_after_revocation_keeps_the_instance_revoked() -> None:
    current = Current()
    current.admit("i-1", 1, "lease-a", time.time() + 60)
    current.revoke("i-1")
    current.admit("i-1", 1, "lease-b", time.time() + 60)
    with pytest.raises(AuthorityError) as refused:
        current.check(claims(1, "lease-b"))
    assert refused.value.reason == "revoked"


def test_a_new_generation_or_an_ended_lease_starts_afresh() -> None:
    current = Current()
    current.admit("i-1", 1, "lease-a", time.time() + 60)
    current.revoke("i-1")
    current.admit("i-1", 2, "lease-b", time.time() + 60)
    current.check(claims(2, "lease-b"))
    current.revoke("i-1")
    current.end("i-1")
    current.admit("i-1", 2, "lease-c", time.time() + 60)
    current.check(claims(2, "lease-c"))
