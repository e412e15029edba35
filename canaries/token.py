"""The canary token: its shape, and minting one run's worth of them.

A canary is a unique fake secret planted in one principal's private memory; if any other party ever sees
it, isolation failed. A token looks like a version-4 UUID whose first group is the run id,
``<run>-xxxx-4xxx-yxxx-xxxxxxxxxxxx`` (36 characters of ``[0-9a-f-]``): an id of the kind any user's
notes, keys and records hold, nothing that says pairproof planted it (issue 28: an agent that can tell it
is being qualified can behave while it is and leak later). It survives intact as a DNS label, a file
name, an environment value or a shell word. The shape is defined once, by ``token_pattern`` in
``canaries.detect`` (the standalone probe needs it and may import nothing from here); the token itself
says only its run, so where each one was planted is the ``Mint``'s record (``Mint.origin``).
Finding tokens in data is ``detect``'s job, not this module's.
"""

from __future__ import annotations

import builtins
import re
import secrets
from dataclasses import dataclass

from canaries.detect import MAX_TOKEN_CHARS, RUN_ID, token_pattern
from canaries.errors import CanaryFormatError, DuplicateCanaryError

__all__ = ["Canary", "Mint", "new_run_id", "token_pattern"]

_FIELD = re.compile(r"[a-z0-9]{1,6}")
_SHAPE = "<run: 8 lowercase hex>-<4 hex>-4<3 hex>-<one of 89ab><3 hex>-<12 hex> (a version-4 UUID)"


@dataclass(frozen=True)
class Canary:
    """One planted token and where it was planted: which run, which principal, which location.

    Constructing one checks that ``token`` has the run's shape, so a ``Canary`` in hand is always
    well-formed; the principal and location are the mint's record, not something the token says.
    """

    token: str
    run: str
    principal: str
    location: str

    def __post_init__(self) -> None:
        if not (_is_ascii_str(self.run) and RUN_ID.fullmatch(self.run)):
            raise CanaryFormatError(f"run {_show(self.run)} is not 8 lowercase hex characters")
        if not (_is_ascii_str(self.token) and token_pattern(self.run).fullmatch(self.token.encode("ascii"))):
            raise CanaryFormatError(f"{_show(self.token)} is not a token of run {self.run}: expected {_SHAPE}")
        if self.token != self.token.lower():
            raise CanaryFormatError(
                f"{_show(self.token)} has upper-case letters; canary tokens are lower-case "
                "(DNS may change case on the way), so pass token.lower()"
            )

    # builtins.bytes because inside the class body `bytes` names this property.
    @property
    def bytes(self) -> builtins.bytes:
        """The token as ASCII bytes, the form planted in files and scanned for."""
        return self.token.encode("ascii")


def new_run_id() -> str:
    """A fresh run id: 8 random lowercase hex characters."""
    return secrets.token_hex(4)


def _uuid4_rest() -> str:
    """The part of a version-4 UUID after its first group, random: 4 hex, 4 then 3 hex, one of 89ab then 3
    hex, 12 hex."""
    value = secrets.token_hex(13)
    return f"{value[0:4]}-4{value[4:7]}-{'89ab'[secrets.randbelow(4)]}{value[7:10]}-{value[10:22]}"


class Mint:
    """Mints the canaries of one run and remembers them, so a hit can be traced to its planting.

    The rule is one canary per run, principal and location: a token then names exactly one place
    a secret was planted, and a hit found anywhere else is a leak from that place.
    """

    def __init__(self, run: str) -> None:
        if not (_is_ascii_str(run) and RUN_ID.fullmatch(run)):
            raise CanaryFormatError(
                f"run id {_show(run)} is not 8 lowercase hex characters (for example 'a3f09c1e'); "
                "make one with canaries.new_run_id()"
            )
        self._run = run
        self._by_place: dict[tuple[str, str], Canary] = {}
        self._by_token: dict[str, Canary] = {}

    @property
    def run(self) -> str:
        return self._run

    def mint(self, principal: str, location: str) -> Canary:
        """A new canary for ``principal`` at ``location``; each pair can be minted once per run."""
        _check_field("principal", principal, "'a', 'b', 'op' or 'plat'")
        _check_field("location", location, "'mem', 'tr', 'task', 'vol', 'key', 'grant' or 'env'")
        existing = self._by_place.get((principal, location))
        if existing is not None:
            raise DuplicateCanaryError(
                f"run {self._run} already has a canary for principal {principal!r} at location "
                f"{location!r} ({existing.token}); the rule is one canary per run, principal and "
                "location, so that a hit names exactly one planting: reuse that canary or use "
                "another location name"
            )
        token = f"{self._run}-{_uuid4_rest()}"
        while token in self._by_token:  # 90 random bits: never in practice, and a token must name one place
            token = f"{self._run}-{_uuid4_rest()}"
        canary = Canary(token, self._run, principal, location)
        # Guard the DNS-label promise against a future change of shape, not this one.
        assert len(token) <= MAX_TOKEN_CHARS, token
        self._by_place[(principal, location)] = canary
        self._by_token[token] = canary
        return canary

    def all(self) -> tuple[Canary, ...]:
        """Every canary minted so far, in minting order."""
        return tuple(self._by_place.values())

    def origin(self, token: str) -> Canary | None:
        """The canary this mint made with ``token`` (any case), or None if it made no such token."""
        return self._by_token.get(token.lower())

    def __repr__(self) -> str:
        return f"Mint(run={self._run!r}, minted={len(self._by_place)})"


def _check_field(name: str, value: str, examples: str) -> None:
    if not (_is_ascii_str(value) and _FIELD.fullmatch(value)):
        raise CanaryFormatError(
            f"{name} {_show(value)} must be 1 to 6 characters from [a-z0-9] (for example "
            f"{examples}), because it becomes part of a token that must survive as a DNS label"
        )


def _is_ascii_str(value: object) -> bool:
    return isinstance(value, str) and value.isascii()


def _show(value: object) -> str:
    """repr() of a bad input, cut short so one huge value cannot flood an error message."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
