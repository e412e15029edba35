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
    attach(sock, expression)
    drain(sock)
    return sock


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
