"""Kernel BPF filters (compiled with libpcap through scapy) on raw AF_PACKET sockets."""

from __future__ import annotations

import socket

ETH_P_ALL = 0x0003
# What egress looks like: any DNS, any UDP datagram, any TCP SYN (a connection attempt).
EGRESS = "udp or (tcp port 53) or (tcp[tcpflags] & tcp-syn != 0 and tcp[tcpflags] & tcp-ack == 0)"


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
