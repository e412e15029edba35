"""Walking a folder an instance controls, as root, by descriptor, opening no name through a link.

``walk(top)`` is ``os.fwalk(top, follow_symlinks=False)`` top-down (the same ``(path, dirs, files, dir_fd)``
tuples, ``dirs`` pruned in place to skip a folder) with one difference that matters on hostile ground:
``os.fwalk`` opens each listed folder by name and only then checks that the folder it opened is the one it
listed, so a folder the instance swaps for a link in between is *opened* by root (a folder outside the volume,
a device node: opening some has effects of its own) before the walk turns away from it, and the turning away
is silent. Here every folder is opened relative to its parent's descriptor with ``O_DIRECTORY | O_NOFOLLOW``:
a link in its place is refused by the kernel (ELOOP or ENOTDIR) without its target being touched, and so is
a folder swapped for another one (its device and inode are the listing's, or it is not entered). Either is
reported to ``onerror`` (with the folder's path as the error's ``filename``), never skipped in silence.
Entries are classified from the listing without following anything (``DirEntry.is_dir(follow_symlinks=False)``).
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

Walked = tuple[str, list[str], list[str], int]


# Deeper than this, a folder is reported to ``onerror`` (ELOOP) and not entered: the walk holds a descriptor per
# level, and an instance can nest folders as deep as its quota allows. Real data is nowhere near it.
MAX_DEPTH = 256


class TooDeep(OSError):
    """A folder deeper than ``MAX_DEPTH``, reported to ``onerror`` and not entered (errno ELOOP)."""


def walk(top: str | Path, onerror: Callable[[OSError], None] | None = None) -> Iterator[Walked]:
    """``(path, dirs, files, dir_fd)`` for ``top`` and every folder under it, top-down; see the module's text.
    ``top`` itself must be a folder, not a link to one (OSError otherwise). Iterative (no recursion limit to
    hit) and at most ``MAX_DEPTH`` folders deep: a deeper one is an ``onerror`` (ELOOP), never a crash."""
    top_fd = os.open(top, _DIR_FLAGS)
    # Each level: its descriptor, its path, its sub-folders as the caller left them (pruned in place), each one's
    # identity as listed, and how many of them have been taken.
    stack: list[tuple[int, str, list[str], dict[str, tuple[int, int]], list[int]]] = []
    try:
        listing = _list(top_fd, str(top), onerror)
        if listing is None:
            return
        dirs, files, listed = listing
        yield str(top), dirs, files, top_fd
        stack.append((top_fd, str(top), dirs, listed, [0]))
        while stack:
            dir_fd, path, pending, listed, taken = stack[-1]
            if taken[0] >= len(pending):
                stack.pop()
                if dir_fd != top_fd:
                    os.close(dir_fd)
                continue
            name = pending[taken[0]]
            taken[0] += 1
            sub = os.path.join(path, name)
            if len(stack) >= MAX_DEPTH:
                if onerror is not None:
                    onerror(TooDeep(errno.ELOOP, f"nests deeper than {MAX_DEPTH} folders; not entered", sub))
                continue
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError as exc:
                exc.filename = sub
                if onerror is not None:
                    onerror(exc)
                continue
            # The stack owns the descriptor from here: closed by the ``finally`` however the walk ends (a caller
            # that stops at this folder, an ``onerror`` that raises).
            stack.append((fd, sub, [], {}, [0]))
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != listed.get(name):
                stack.pop()
                os.close(fd)
                if onerror is not None:
                    onerror(OSError(errno.ESTALE, "a different folder than the one listed", sub))
                continue
            listing = _list(fd, sub, onerror)
            if listing is None:
                stack.pop()
                os.close(fd)
                continue
            dirs, files, sub_listed = listing
            stack[-1] = (fd, sub, dirs, sub_listed, [0])
            yield sub, dirs, files, fd
    finally:
        for dir_fd, *_ in stack:
            if dir_fd != top_fd:
                os.close(dir_fd)
        os.close(top_fd)


def _list(dir_fd: int, path: str, onerror: Callable[[OSError], None] | None
          ) -> tuple[list[str], list[str], dict[str, tuple[int, int]]] | None:
    """(folders, other names, each folder's (device, inode)) of an open folder, or None after ``onerror``."""
    dirs: list[str] = []
    files: list[str] = []
    listed: dict[str, tuple[int, int]] = {}
    try:
        with os.scandir(dir_fd) as entries:
            for entry in entries:
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                    if is_dir:
                        st = entry.stat(follow_symlinks=False)
                        listed[entry.name] = (st.st_dev, st.st_ino)
                except FileNotFoundError:
                    continue  # gone while it was listed
                (dirs if is_dir else files).append(entry.name)
    except OSError as exc:
        exc.filename = path
        if onerror is not None:
            onerror(exc)
        return None
    return dirs, files, listed


def remove_quietly(top: str | Path, log: logging.Logger) -> None:
    """``remove_tree(top)``, what cannot be removed logged to ``log`` rather than raised (for clean-up paths whose
    caller needs its own outcome, not the removal's; the run's clean-up names what is left)."""
    try:
        remove_tree(top)
    except OSError as exc:
        log.warning("could not remove %s: %s", top, exc)


def remove_tree(top: str | Path) -> None:
    """Remove ``top`` and everything under it, as root, on ground an instance controlled: no name is opened
    through a link (a link is removed as a link), no recursion (a tree of any depth), one descriptor open at a
    time. Each step up is checked: the parent reached by ``..`` must be the folder that was left (device and
    inode), else ``OSError`` (ESTALE) and nothing more is removed. A missing ``top`` is nothing to do; ``top``
    that is a link or a file is unlinked."""
    top = str(top)
    try:
        fd = os.open(top, _DIR_FLAGS)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            os.unlink(top)
            return
        raise
    # The way down: for each level entered below ``top``, (the parent's identity, the name entered).
    trail: list[tuple[tuple[int, int], str]] = []
    try:
        while True:
            entered = None
            with os.scandir(fd) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            entered = entry.name
                            break
                        os.unlink(entry.name, dir_fd=fd)
                    except FileNotFoundError:
                        continue
            if entered is not None:
                try:
                    sub = os.open(entered, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    os.unlink(entered, dir_fd=fd)  # swapped for a link or a file since it was listed
                    continue
                here = os.fstat(fd)
                trail.append(((here.st_dev, here.st_ino), entered))
                os.close(fd)
                fd = sub
                continue
            if not trail:
                break
            (parent_id, name) = trail.pop()
            parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
            st = os.fstat(parent)
            os.close(fd)
            fd = parent
            if (st.st_dev, st.st_ino) != parent_id:
                raise OSError(errno.ESTALE, "the folder above is not the one walked down from; stopped", top)
            try:
                os.rmdir(name, dir_fd=fd)
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno != errno.ENOTEMPTY:
                    raise
                # Something was made in it meanwhile: it is listed again on the next pass.
    finally:
        os.close(fd)
    os.rmdir(top)
