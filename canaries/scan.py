"""Host-side scanning: find canary-shaped tokens and say whose canary each one is.

``detect`` finds anything canary-shaped and knows nothing about which canaries exist; a ``Mint``
knows what it planted and nothing about where tokens turn up. This module joins the two on the
host, where the mint lives: every hit is paired with the canary it came from, or with None when
the token was not minted by this run (another run's canary, or a mangled one). Deciding whether a
given hit is a leak belongs to the caller, who knows who was allowed to see what.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from canaries.detect import DEFAULT_MAX_FILE_BYTES, Hit, find, scan_tree
from canaries.errors import IncompleteScanError
from canaries.token import Canary, Mint

__all__ = ["Attributed", "attribute", "scan_bytes", "scan_dir"]


@dataclass(frozen=True)
class Attributed:
    """A hit, and the canary it is (None if this run's mint never made that token)."""

    hit: Hit
    canary: Canary | None

    @property
    def foreign(self) -> bool:
        """True when the token is canary-shaped but was not minted by this run."""
        return self.canary is None


def attribute(hits: Iterable[Hit], mint: Mint) -> list[Attributed]:
    """Pair each hit with the canary ``mint`` made with its token, in the order given."""
    return [Attributed(hit, mint.origin(hit.token)) for hit in hits]


def scan_bytes(data: bytes, mint: Mint, where: str = "") -> list[Attributed]:
    """Attributed hits in ``data``, raw or encoded."""
    return attribute(find(data, where), mint)


def scan_dir(path: str | os.PathLike[str], mint: Mint, *, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> list[Attributed]:
    """Attributed hits in the regular files (and names) under ``path``; symlinks not followed.

    Raises ``IncompleteScanError`` if any file could not be read or was cut short at
    ``max_file_bytes``: an empty result must mean "nothing there", never "could not look". The
    error keeps the hits that were found in ``found``.
    """
    root = os.fspath(path)
    hits, problems = scan_tree([root], max_file_bytes=max_file_bytes)
    found = attribute(hits, mint)
    if problems:
        raise IncompleteScanError(root, tuple(problems), tuple(found))
    return found
