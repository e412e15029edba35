"""Sockets inside another process's network namespace, from the host.

A socket belongs to the network namespace it was created in, whatever thread later binds or connects it.
So a short-lived thread enters the target namespace (``setns``; Python 3.11 has no ``os.setns``),
creates the socket, and returns to its own namespace before ending. This is how a broker listens on
127.0.0.1 *inside* an instance's otherwise empty network namespace (the instance reaches nothing else),
and how it reaches the agent's own API there.
"""

from __future__ import annotations

import ctypes
import os
import socket
import threading

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns(CLONE_NEWNET): {os.strerror(err)}")


def socket_in(pid: int, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM, proto: int = 0) -> socket.socket:
    """A new socket in the network namespace of ``pid``."""
    result: dict[str, object] = {}

    def work() -> None:
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
            try:
                _setns(target)
                try:
                    result["socket"] = socket.socket(family, kind, proto)
                finally:
                    _setns(own)  # if this failed the thread would end in the wrong namespace; it raises
            finally:
                os.close(target)
        except BaseException as exc:  # handed to the caller's thread
            result["error"] = exc
        finally:
            os.close(own)

    thread = threading.Thread(target=work, name=f"netns-{pid}")
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    return result["socket"]  # type: ignore[return-value]
