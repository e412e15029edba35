"""Sockets inside another process's network namespace, from the host: the lab's own way in (an instance's
namespace for a capture, the sink's for a link), independent of the platform under test.

A socket belongs to the network namespace it was created in, whatever process later uses it. pyroute2's
``create_socket`` makes it in a short-lived child that enters the namespace and hands the descriptor back,
so the caller never moves.
"""

from __future__ import annotations

import os
import socket

from pyroute2.netns import create_socket


def socket_in(pid: int, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM, proto: int = 0) -> socket.socket:
    """A new socket in the network namespace of ``pid``."""
    return create_socket(f"/proc/{pid}/ns/net", family, kind, proto, flags=os.O_RDONLY)
