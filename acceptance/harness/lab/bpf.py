"""Kernel BPF filters (compiled with libpcap through scapy) on raw AF_PACKET sockets."""

from __future__ import annotations

import socket

ETH_P_ALL = 0x0003
# What egress looks like: any DNS, any UDP datagram, any TCP SYN (a connection attempt), over IPv4 or
# IPv6. libpcap cannot index the TCP header behind an IPv6 header (``tcp[...]`` is IPv4 only), so every
# IPv6 TCP segment passes the kernel filter and ``is_egress`` keeps its connection attempts.
EGRESS = ("udp or (tcp port 53) or (tcp[tcpflags] & tcp-syn != 0 and tcp[tcpflags] & tcp-ack == 0) "
          "or (ip6 and tcp)")
# The ethertype of the frames a capture injects to prove it is live (IEEE 802 local experimental).
MARKER_ETHERTYPE = 0x88B5


def is_egress(packet) -> bool:
    """Whether a parsed frame (scapy) is egress as ``EGRESS`` means it: DNS, UDP, or a TCP SYN."""
    from scapy.layers.inet import TCP, UDP

    if packet.haslayer(UDP):
        return True
    if packet.haslayer(TCP):
        tcp = packet[TCP]
        return 53 in (tcp.sport, tcp.dport) or bool(tcp.flags & 0x02 and not tcp.flags & 0x10)
    return False


def attach(sock: socket.socket, expression: str) -> None:
    # scapy compiles with libpcap for the link type of the interface named (the host's loopback
    # has Ethernet framing on Linux, like a veth) and attaches the program to the socket.
    from scapy.arch.linux import attach_filter

    attach_filter(sock, expression, "lo")


def raw_socket(expression: str) -> socket.socket:
    """An AF_PACKET socket on every interface of the current network namespace, BPF-filtered."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    enlarge(sock)
    attach(sock, expression)
    drain(sock)
    dropped(sock)  # reading the statistics resets them: count from here
    return sock


# A capture that parses in Python lags a burst; the kernel queues what it has not read, up to the socket's
# receive buffer, and drops the rest. 64 MiB holds tens of thousands of frames.
RECEIVE_BUFFER = 64 << 20
SOL_PACKET, PACKET_STATISTICS = 263, 6
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)  # <asm-generic/socket.h>; Python 3.11 lacks the name


def enlarge(sock: socket.socket) -> None:
    """Give a packet socket a receive buffer a burst fits in (SO_RCVBUFFORCE: root may exceed rmem_max)."""
    sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RECEIVE_BUFFER)


def dropped(sock: socket.socket) -> int:
    """Frames the kernel dropped on this packet socket since the last call (its buffer was full): a capture
    that dropped any cannot say what it did not see."""
    import struct

    _packets, drops = struct.unpack("II", sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
    return drops


def drain(sock: socket.socket) -> None:
    """Discard what the socket queued before its filter was attached: between socket() and the filter it
    took every frame, and those would read as matches (libpcap does the same)."""
    sock.setblocking(False)
    try:
        while True:
            sock.recv(65535)
    except BlockingIOError:
        pass
    finally:
        sock.setblocking(True)
