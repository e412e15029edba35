"""Authority: signed capabilities and the controller's record of which one is current.

Two kinds of capability leave the controller, and neither ever enters a sandbox (the broker holds them):
the *product grant* (presented to the product server) and the short-lived *model capability* (presented
to the model proxy). Both are HMAC-signed claims (instance, org, user, generation, lease, expiry), so a
server can check them without calling back; both are also checked against ``Current``, the controller's
record of the instance's current generation and lease, so that recreating an instance or ending its
lease kills every capability of the old one even if its signature and expiry still hold. While an instance
is frozen its lease is *suspended*: kept (a revocation thrown meanwhile is recorded against it) but honouring
nothing until the thaw re-checks it and admits a new one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
import time
from dataclasses import dataclass

from runtime.errors import RuntimeFault


class AuthorityError(RuntimeFault):
    """A capability was refused; ``reason`` is the machine-readable code servers answer with."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class Claims:
    kind: str
    instance: str
    org: str
    user: str
    generation: int
    lease: str
    expires: float


class TokenAuthority:
    """Issues and verifies one kind of capability (``grant`` or ``model``) under one secret."""

    def __init__(self, kind: str, secret: bytes | None = None) -> None:
        self.kind = kind
        self._secret = secret or secrets.token_bytes(32)

    def issue(self, instance: str, org: str, user: str, generation: int, lease: str, ttl: float) -> str:
        claims = {"k": self.kind, "i": instance, "o": org, "u": user, "g": generation, "l": lease,
                  "x": round(time.time() + ttl, 3)}
        body = _b64(json.dumps(claims, separators=(",", ":"), sort_keys=True).encode())
        mac = hmac.new(self._secret, f"{self.kind}.{body}".encode(), hashlib.sha256).digest()
        return f"pp{self.kind}.{body}.{_b64(mac)}"

    def verify(self, token: str) -> Claims:
        try:
            prefix, body, mac = token.split(".")
        except (ValueError, AttributeError):
            raise AuthorityError("malformed", "capability is not of the form ppKIND.BODY.MAC") from None
        if prefix != f"pp{self.kind}":
            raise AuthorityError("wrong_kind", f"capability is not a {self.kind} capability")
        expected = hmac.new(self._secret, f"{self.kind}.{body}".encode(), hashlib.sha256).digest()
        try:
            good = hmac.compare_digest(_unb64(mac), expected)
            raw = json.loads(_unb64(body))
        except (ValueError, TypeError):
            raise AuthorityError("malformed", "capability body does not decode") from None
        if not good:
            raise AuthorityError("bad_signature", "capability signature does not verify")
        if raw["x"] < time.time():
            raise AuthorityError("expired", "capability expired")
        return Claims(raw["k"], raw["i"], raw["o"], raw["u"], raw["g"], raw["l"], raw["x"])


@dataclass(frozen=True)
class Standing:
    generation: int
    lease: str
    lease_expires: float
    revoked: bool = False
    suspended: bool = False


class Current:
    """The controller's word on what is current per instance; servers consult it on every call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_instance: dict[str, Standing] = {}

    def admit(self, instance: str, generation: int, lease: str, lease_expires: float) -> None:
        """A new current lease. A kill switch thrown on this generation stays thrown, and a frozen instance's
        lease stays suspended: a routine rotation must lift neither (only a new generation, the lease ending,
        or for a suspension the thaw's ``renew``, starts afresh)."""
        with self._lock:
            s = self._by_instance.get(instance)
            same = s is not None and s.generation == generation
            self._by_instance[instance] = Standing(generation, lease, lease_expires, same and s.revoked,
                                                   suspended=same and s.suspended)

    def end(self, instance: str) -> None:
        """The instance's lease ended (sleep, destroy, crash fenced): nothing of it is current."""
        with self._lock:
            self._by_instance.pop(instance, None)

    def revoke(self, instance: str) -> None:
        """Kill switch: the instance keeps its lease record but nothing it holds is honoured."""
        with self._lock:
            s = self._by_instance.get(instance)
            if s is not None:
                self._by_instance[instance] = Standing(s.generation, s.lease, s.lease_expires, revoked=True,
                                                       suspended=s.suspended)

    def renew(self, instance: str, generation: int, lease: str, lease_expires: float) -> bool:
        """The re-check a thaw makes before its instance runs again: a new lease only if the suspended one is
        still on record for ``generation`` and was not revoked meanwhile (False: nothing changed, the
        instance's authority stays dead). A new lease, so what was copied before the freeze dies with it."""
        with self._lock:
            s = self._by_instance.get(instance)
            if s is None or s.revoked or s.generation != generation:
                return False
            self._by_instance[instance] = Standing(generation, lease, lease_expires)
            return True

    def suspend(self, instance: str) -> None:
        """The instance is frozen: its lease stays on record (a revocation still lands on it) but nothing it
        holds is honoured until a thaw admits a lease again."""
        with self._lock:
            s = self._by_instance.get(instance)
            if s is not None:
                self._by_instance[instance] = Standing(s.generation, s.lease, s.lease_expires, s.revoked,
                                                       suspended=True)

    def standing(self, instance: str) -> Standing | None:
        """The instance's record as it stands (None: no current lease)."""
        with self._lock:
            return self._by_instance.get(instance)

    def check(self, claims: Claims) -> None:
        with self._lock:
            s = self._by_instance.get(claims.instance)
        if s is None:
            raise AuthorityError("no_current_lease", f"instance {claims.instance} has no current lease")
        if s.revoked:
            raise AuthorityError("revoked", f"instance {claims.instance}'s authority was revoked")
        if s.suspended:
            raise AuthorityError("suspended", f"instance {claims.instance} is frozen: its lease honours nothing until thawed")
        if claims.generation != s.generation:
            raise AuthorityError("generation_stale",
                                 f"capability is for generation {claims.generation}, current is {s.generation}")
        if claims.lease != s.lease:
            raise AuthorityError("lease_stale", "capability belongs to a lease that is no longer current")
        if s.lease_expires < time.time():
            raise AuthorityError("lease_expired", f"instance {claims.instance}'s lease expired")
