"""A qualification's report set, replaced whole or not at all.

A run writes its reports (``verdict.json``, ``junit.xml``, ``summary.html``, ``allure-report.html``,
``allure-results/``) into a new folder of its own, ``<reports>/.pairproof-sets/<set>/``, and only a run that
ends with a verdict publishes it: one ``rename(2)`` of the symlink ``.pairproof-sets/current``. The names a
user and the gate read (``<reports>/verdict.json`` ...) are fixed symlinks into ``current``, so at every
instant they show one set: the previous complete one, or the new complete one. An interrupted run, a
usage error or a crash discards its folder (or leaves it for the next publish to sweep) and never touches
the published set.

A reports folder written before sets existed holds the members as plain files; the first publish adopts
them as a set (copied, then each name swapped for its link atomically) before it swaps in the new one.
``mutants.json`` and ``mutants.txt`` are not members: ``pairproof mutants`` writes them beside the set.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

SETS = ".pairproof-sets"
CURRENT = "current"
MEMBERS = ("verdict.json", "junit.xml", "summary.html", "allure-report.html", "allure-results")


def current(reports: Path) -> Path | None:
    """The published set's folder, or None when there is none (a fresh or a pre-sets reports folder)."""
    link = reports / SETS / CURRENT
    return link.resolve() if link.is_dir() else None


def stage(reports: Path) -> Path:
    """A new, empty folder for one run's reports, beside the published set (same filesystem: one rename)."""
    sets = reports / SETS
    for attempt in range(5):
        sets.mkdir(parents=True, exist_ok=True)
        try:
            staged = Path(tempfile.mkdtemp(prefix=f"set-{os.getpid()}-", dir=sets))
            break
        except FileNotFoundError:  # another run's discard removed the (then empty) sets folder in between
            if attempt == 4:
                raise
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staged, 0o777 & ~umask)  # readable as a plain reports folder is (mkdtemp makes it 0700)
    return staged


def stage_copy(reports: Path, source: Path | None = None) -> Path:
    """A new folder holding a copy of the published set ``source`` (given by a caller inside ``reading``;
    by default the one published now, or a pre-sets folder's members when there is none), to rebuild parts
    of it and publish the result whole (``pairproof report``, with ``publish(..., over=source)``)."""
    staged = stage(reports)
    if source is None:
        with reading(reports) as published:
            _copy_members(published or reports, staged)
    else:  # (the caller holds ``reading``, so that it stays published)
        _copy_members(source, staged)
    return staged


def _copy_members(source: Path, staged: Path) -> None:
    for name in MEMBERS:
        _copy(source / name, staged / name)


def discard(staged: Path) -> None:
    """Remove a run's unpublished folder, and the sets folder too if that leaves it empty (a first run).
    A folder already published is kept: an interrupt after the swap (while old sets are swept) reaches the
    caller as a failure, and removing the set the names now show would leave them showing nothing."""
    link = staged.parent / CURRENT
    if link.is_symlink() and os.readlink(link) == staged.name:
        return
    shutil.rmtree(staged, ignore_errors=True)
    try:
        staged.parent.rmdir()
    except OSError:
        pass  # not empty: the published set, or another run's folder


class Busy(Exception):
    """Another live run is writing into this reports folder (``hold``)."""


def hold(reports: Path) -> int:
    """Claim ``reports`` for one run until the returned descriptor is closed (an exclusive flock on the folder
    itself, released by the kernel when the run ends, however it ends). A second run into the same folder gets
    Busy at once instead of publishing over the first, each saying "verdict written" (issue 27 item 12). The
    folder is made if needed; the caller removes what it made when it gets Busy."""
    reports.mkdir(parents=True, exist_ok=True)
    fd = os.open(reports, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise Busy(f"--reports-dir {reports}: another qualification is writing into it now: wait for it to end, "
                   "or give this run a --reports-dir of its own") from None
    return fd


def still_held(reports: Path, claim: int) -> bool:
    """Whether ``reports`` is still the folder ``claim`` (``hold``'s descriptor) locked: a folder removed or
    renamed under a run and made again is another inode, which a second run may hold (issue 27 item 12)."""
    try:
        now, held = os.stat(reports), os.fstat(claim)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)


class Superseded(Exception):
    """``publish(..., over=set)`` found another set published since ``set`` was copied: publishing the
    rebuilt copy would put an older run back in place of a newer one."""


def publish(reports: Path, staged: Path, *, over: Path | None = None) -> None:
    """Make ``staged`` the report set with one rename; then remove sets nobody is writing any more.
    ``over``: the set ``staged`` was copied from; Superseded (nothing changed) if it is no longer the one
    published. Publishers hold a lock on the sets folder from that check to the swap."""
    sets = reports / SETS
    with _locked(sets):
        if over is not None and current(reports) != over:
            raise Superseded(f"{reports}: another run published its reports while {over.name} was rebuilt")
        _adopt_plain_members(reports)
        _link_members(reports)
        link = sets / f".current-{os.getpid()}"
        link.unlink(missing_ok=True)
        os.symlink(staged.name, link)
        os.replace(link, sets / CURRENT)  # the swap: every member name now shows the new set
    _sweep(sets, keep=staged.name)


@contextlib.contextmanager
def reading(reports: Path) -> Iterator[Path | None]:
    """The published set's folder (None when there is none), kept published while the caller reads it: a
    publish waits to swap until the reader is done, so the sweep after it never removes a set being read
    (the gate, or ``stage_copy``)."""
    sets = reports / SETS
    if not sets.is_dir():
        yield current(reports)
        return
    with _locked(sets, shared=True):
        yield current(reports)


@contextlib.contextmanager
def _locked(sets: Path, *, shared: bool = False) -> Iterator[None]:
    """A flock on the sets folder itself (no lock file: the folder holds only sets): exclusive for a
    publisher's check and swap, shared for a reader of the published set."""
    fd = os.open(sets, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # (closing releases the lock)


def _copy(source: Path, dest: Path) -> None:
    if source.is_dir():
        shutil.copytree(source, dest, symlinks=False)
    elif source.is_file():
        shutil.copy2(source, dest)


def _adopt_plain_members(reports: Path) -> None:
    """Members written as plain files (before sets, or by hand) become the published set first, so that
    replacing each name by its link never shows a mix: each name shows the same bytes before and after."""
    plain = [n for n in MEMBERS if os.path.lexists(reports / n) and not (reports / n).is_symlink()]
    if not plain or current(reports) is not None:
        return
    adopted = stage(reports)
    for name in plain:
        _copy(reports / name, adopted / name)
    link = reports / SETS / f".current-{os.getpid()}"
    link.unlink(missing_ok=True)
    os.symlink(adopted.name, link)
    os.replace(link, reports / SETS / CURRENT)


def _link_members(reports: Path) -> None:
    """Each member name -> ``.pairproof-sets/current/<name>``, each replaced atomically (idempotent)."""
    for name in MEMBERS:
        path = reports / name
        target = f"{SETS}/{CURRENT}/{name}"
        if path.is_symlink() and os.readlink(path) == target:
            continue
        tmp = reports / f".{name}.link-{os.getpid()}"
        tmp.unlink(missing_ok=True)
        os.symlink(target, tmp)
        if path.is_dir() and not path.is_symlink():
            _exchange(tmp, path)  # a folder cannot be renamed over: swap the two names in one step
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            os.replace(tmp, path)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> None:
    """Swap two names atomically (renameat2 RENAME_EXCHANGE); where the kernel or filesystem lacks it, move
    ``b`` aside and rename ``a`` over it (a moment where ``b`` is absent, never a mix)."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is not None and renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return
    err = ctypes.get_errno() if renameat2 is not None else errno.ENOSYS
    if err not in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        raise OSError(err, os.strerror(err), str(b))
    aside = b.with_name(b.name + f".old-{os.getpid()}")
    os.rename(b, aside)
    os.rename(a, b)
    os.rename(aside, a)


def _sweep(sets: Path, *, keep: str) -> None:
    """Remove every set but the published one, except folders of runs still writing (their pid lives)."""
    for entry in sets.iterdir():
        if entry.name in (CURRENT, keep):
            continue
        pid = _owner(entry.name)
        if entry.name.startswith(".current-") and pid is not None and not _alive(pid):
            entry.unlink(missing_ok=True)
        elif entry.name.startswith("set-") and (pid is None or pid == os.getpid() or not _alive(pid)):
            shutil.rmtree(entry, ignore_errors=True)


def _owner(name: str) -> int | None:
    part = name.split("-")[1] if name.count("-") >= 1 else ""
    return int(part) if part.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
