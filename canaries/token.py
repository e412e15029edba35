"""The canary token: its shape, parsing, and minting one run's worth of them.

A canary is a unique fake secret planted in one principal's private memory; if any other party
ever sees it, isolation failed. Tokens look like ``ppcanary-<run>-<principal>-<location>-<entropy>``
and use only ``[a-z0-9-]`` within 63 characters, so one survives intact as a DNS label, a file
name, an environment value or a shell word. The shape itself is defined once, as ``RAW_PATTERN``
in ``canaries.detect`` (the standalone probe needs it and may import nothing from here); this
module adds the record, the strict parser and the ``Mint`` that remembers where each token went.
Finding tokens in data is ``detect``'s job, not this module's.
"""

from __future__ import annotations

import builtins
import re
import secrets
from dataclasses import dataclass

from canaries.detect import MAX_TOKEN_CHARS, RAW_PATTERN
from canaries.errors import CanaryFormatError, DuplicateCanaryError

__all__ = ["RAW_PATTERN", "Canary", "Mint", "new_run_id", "parse"]

_RUN_ID = re.compile(r"[0-9a-f]{8}")
_FIELD = re.compile(r"[a-z0-9]{1,6}")
_SHAPE = "ppcanary-<run: 8 lowercase hex>-<principal: 1-6 of [a-z0-9]>-<location: 1-6 of [a-z0-9]>-<entropy: 16 lowercase hex>"


@dataclass(frozen=True)
class Canary:
    """One planted token and where it was planted: which run, which principal, which location.

    Constructing one checks that ``token`` has the canary shape and agrees with the other fields,
    so a ``Canary`` in hand is always well-formed.
    """

    token: str
    run: str
    principal: str
    location: str

    def __post_init__(self) -> None:
        said = _split(self.token)
        if (self.run, self.principal, self.location) != said:
            raise CanaryFormatError(
                f"Canary fields {(self.run, self.principal, self.location)!r} disagree with token "
                f"{self.token!r}, which says {said!r}; build a Canary with parse(token)"
            )

    # builtins.bytes because inside the class body `bytes` names this property.
    @property
    def bytes(self) -> builtins.bytes:
        """The token as ASCII bytes, the form planted in files and scanned for."""
        return self.token.encode("ascii")


def parse(token: str) -> Canary:
    """The canary a lower-case token describes; ``CanaryFormatError`` if it is not one."""
    return Canary(token, *_split(token))


def _split(token: str) -> tuple[str, str, str]:
    """(run, principal, location) of a canonical token, or ``CanaryFormatError`` naming it."""
    match = RAW_PATTERN.fullmatch(token.encode("ascii")) if _is_ascii_str(token) else None
    if match is None:
        raise CanaryFormatError(f"{_show(token)} is not a canary token: expected {_SHAPE}")
    if token != token.lower():
        raise CanaryFormatError(
            f"{_show(token)} has upper-case letters; canary tokens are lower-case "
            "(DNS may change case on the way), so pass token.lower()"
        )
    return match["run"].decode(), match["principal"].decode(), match["location"].decode()


def new_run_id() -> str:
    """A fresh run id: 8 random lowercase hex characters."""
    return secrets.token_hex(4)


class Mint:
    """Mints the canaries of one run and remembers them, so a hit can be traced to its planting.

    The rule is one canary per run, principal and location: a token then names exactly one place
    a secret was planted, and a hit found anywhere else is a leak from that place.
    """

    def __init__(self, run: str) -> None:
        if not (_is_ascii_str(run) and _RUN_ID.fullmatch(run)):
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
        token = f"ppcanary-{self._run}-{principal}-{location}-{secrets.token_hex(8)}"
        canary = parse(token)
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
