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
import os
from collections.abc import Callable, Iterator
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

Walked = tuple[str, list[str], list[str], int]


def walk(top: str | Path, onerror: Callable[[OSError], None] | None = None) -> Iterator[Walked]:
    """``(path, dirs, files, dir_fd)`` for ``top`` and every folder under it, top-down; see the module's text.
    ``top`` itself must be a folder, not a link to one (OSError otherwise)."""
    top_fd = os.open(top, _DIR_FLAGS)
    try:
        yield from _walk(top_fd, str(top), onerror)
    finally:
        os.close(top_fd)


def _walk(dir_fd: int, path: str, onerror: Callable[[OSError], None] | None) -> Iterator[Walked]:
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
        return
    yield path, dirs, files, dir_fd
    for name in list(dirs):
        if name not in dirs:
            continue  # pruned by the caller
        sub = os.path.join(path, name)
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            exc.filename = sub
            if onerror is not None:
                onerror(exc)
            continue
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != listed.get(name):
                if onerror is not None:
                    onerror(OSError(errno.ESTALE, "a different folder than the one listed", sub))
                continue
            yield from _walk(fd, sub, onerror)
        finally:
            os.close(fd)
