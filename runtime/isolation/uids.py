"""Host uids for instances: each instance runs as its own unprivileged host uid and gid.

A run claims a block of uids by creating ``<claims>/<block>`` exclusively, so concurrent runs (pytest-xdist
workers, two CI jobs) never hand out the same uid, and an escape from one sandbox lands as a stranger to
every other volume. Blocks start far above the range distributions give to real accounts; a block that
overlaps an existing account is skipped.
"""

from __future__ import annotations

import grp
import os
import pwd
from pathlib import Path

from runtime.errors import ConfigError

BASE_UID = 1_500_000_000
BLOCK = 1000
MAX_BLOCKS = 10_000


class UidBlock:
    """The uids one run may give to its instances."""

    def __init__(self, claims_dir: Path, run: str) -> None:
        self.claims_dir, self.run = claims_dir, run
        self.claims_dir.mkdir(parents=True, exist_ok=True)
        self.index, self.claim = self._claim()

    def _claim(self) -> tuple[int, Path]:
        # A controller re-opened on the same run keeps that run's block: its registry holds those uids.
        for claim in self.claims_dir.iterdir():
            try:
                if claim.read_text() == self.run:
                    return int(claim.name), claim
            except (FileNotFoundError, ValueError):
                continue
        for index in range(MAX_BLOCKS):
            claim = self.claims_dir / str(index)
            try:
                fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                continue
            with os.fdopen(fd, "w") as f:
                f.write(self.run)
            first = BASE_UID + index * BLOCK
            if not _overlaps_account(first, first + BLOCK):
                return index, claim
        raise ConfigError(f"no free uid block in {self.claims_dir}: run `pairproof clean` to release stale claims")

    def uid(self, slot: int) -> int:
        if not 0 <= slot < BLOCK:
            raise ConfigError(f"instance slot {slot} is outside 0..{BLOCK - 1}: a run holds at most {BLOCK} instances")
        return BASE_UID + self.index * BLOCK + slot

    def release(self) -> None:
        self.claim.unlink(missing_ok=True)


def _overlaps_account(first: int, last: int) -> bool:
    return any(first <= p.pw_uid < last for p in pwd.getpwall()) or any(
        first <= g.gr_gid < last for g in grp.getgrall()
    )


def release_run(claims_dir: Path, run: str) -> None:
    """Drop every claim a run made (used by cleanup after the run's process died)."""
    if not claims_dir.is_dir():
        return
    for claim in claims_dir.iterdir():
        try:
            if claim.read_text() == run:
                claim.unlink(missing_ok=True)
        except FileNotFoundError:
            pass
