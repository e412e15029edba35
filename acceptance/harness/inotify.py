"""An inotify(7) watch, by ctypes: the kernel's own record of every open or read of a path, the host-side audit
that root read nothing outside an instance's data (issue 28)."""

from __future__ import annotations

import ctypes
import os
import select
import struct
from pathlib import Path

# What counts as root touching the outside folder or anything in it.
IN_ACCESS, IN_OPEN = 0x1, 0x20


class Watch:
    """An inotify watch on ``paths`` (a folder watches its entries too); ``events()`` drains what happened."""

    def __init__(self, *paths: Path) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.names = {}
        for path in paths:
            wd = libc.inotify_add_watch(self.fd, str(path).encode(), IN_ACCESS | IN_OPEN)
            if wd < 0:
                raise OSError(ctypes.get_errno(), f"inotify_add_watch {path}")
            self.names[wd] = str(path)

    def events(self) -> list[str]:
        seen = []
        while select.select([self.fd], [], [], 0)[0]:
            data = os.read(self.fd, 65536)
            offset = 0
            while offset < len(data):
                wd, mask, _cookie, length = struct.unpack_from("iIII", data, offset)
                name = data[offset + 16: offset + 16 + length].rstrip(b"\0").decode(errors="replace")
                seen.append(f"{self.names.get(wd, wd)}/{name} mask={mask:#x}")
                offset += 16 + length
        return seen

    def close(self) -> None:
        os.close(self.fd)


