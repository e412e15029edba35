"""Capturing inside another network namespace (an instance's) while actions run, into a pcap; and the
kernel's own per-namespace packet counters.

A capture is only evidence if it was listening the whole time. ``Capture`` proves it: when it starts and
when it stops it injects a marker frame (an experimental ethertype carrying a nonce, sent through a packet
socket, so it touches no IP counter and reaches no address) on the namespace's loopback, and waits until
its own reader has received it. The first marker shows the reader was live before the actions ran; the
last one, read after everything the actions caused, shows it still was and that nothing queued was left
unread. Markers are not part of what the capture reports as seen.
"""

from __future__ import annotations

import secrets
import select
import socket
import threading
import time
from pathlib import Path

from acceptance.errors import SetupError
from acceptance.harness.lab.bpf import ETH_P_ALL, MARKER_ETHERTYPE, attach, drain, dropped, enlarge
from acceptance.harness.lab.netns import socket_in

MARKER_DEADLINE = 10.0


class Capture:
    """Frames matching ``expression`` in the network namespace of ``pid``, from ``start`` until ``stop``.

        with Capture(pid, "ip or ip6", pcap) as cap:
            run_the_actions()
        cap.seen      # one dict per frame: iface, src, dst, kind (tcp/udp/other), dport, flags
    """

    def __init__(self, pid: int, expression: str, pcap: Path) -> None:
        self.pid, self.expression, self.pcap = pid, expression, pcap
        self.nonce = secrets.token_hex(8).encode()
        self.seen: list[dict] = []
        self.frames: list = []
        self.markers: list[bytes] = []
        self.started_at = self.stopped_at = 0.0
        self._stop = threading.Event()
        self._marked = threading.Condition()
        self._sock: socket.socket | None = None
        self._reader: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> Capture:
        import scapy.layers.inet  # noqa: F401  (imported before the window opens: parsing must keep up)
        import scapy.layers.inet6  # noqa: F401
        import scapy.layers.l2  # noqa: F401

        self._sock = socket_in(self.pid, socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        enlarge(self._sock)
        attach(self._sock, f"({self.expression}) or (ether proto {MARKER_ETHERTYPE:#x})")
        drain(self._sock)
        dropped(self._sock)  # reading the statistics resets them: count from here
        self._reader = threading.Thread(target=self._read, name=f"capture-{self.pid}", daemon=True)
        self._reader.start()
        try:
            self._mark(b"start")
        except BaseException:
            self._close()
            raise
        self.started_at = time.time()
        return self

    def stop(self) -> list[dict]:
        try:
            self._mark(b"stop")
            self.stopped_at = time.time()
            assert self._sock is not None
            lost = dropped(self._sock)
            if lost:
                raise SetupError(f"the capture in the namespace of pid {self.pid} dropped {lost} frames (its "
                                 "receive buffer was full): it cannot say what it did not see")
        finally:
            self._close()
        from scapy.utils import wrpcap

        wrpcap(str(self.pcap), self.frames, linktype=1)
        return self.seen

    def __enter__(self) -> Capture:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def summary(self) -> str:
        """What the capture looked at, for the report: its window, its filter, what it saw."""
        return (f"namespace of pid {self.pid}; filter: {self.expression}\n"
                f"live from {self.started_at:.3f} to {self.stopped_at:.3f} "
                f"({self.stopped_at - self.started_at:.2f}s), markers received: {len(self.markers)} of 2\n"
                f"frames matching the filter: {len(self.seen)}\n" + "\n".join(map(str, self.seen)))

    # -- inside ----------------------------------------------------------------------------------------

    def _close(self) -> None:
        # The socket holds the namespace: it must not outlive the capture, whatever went wrong.
        self._stop.set()
        if self._reader is not None:
            self._reader.join(5)
        if self._sock is not None:
            self._sock.close()

    def _mark(self, what: bytes) -> None:
        tag = b"pairproof-capture-" + self.nonce + b"-" + what
        sender = socket_in(self.pid, socket.AF_PACKET, socket.SOCK_RAW, socket.htons(MARKER_ETHERTYPE))
        try:
            frame = b"\x00" * 12 + MARKER_ETHERTYPE.to_bytes(2, "big") + tag
            sender.sendto(frame, ("lo", MARKER_ETHERTYPE))
        finally:
            sender.close()
        end = time.monotonic() + MARKER_DEADLINE
        with self._marked:
            while tag not in self.markers:
                left = end - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    raise SetupError(f"the capture in the namespace of pid {self.pid} never received its own "
                                     f"{what.decode()} marker within {MARKER_DEADLINE}s: it is not listening")
                self._marked.wait(left)

    def _read(self) -> None:
        from scapy.layers.inet import IP, TCP, UDP
        from scapy.layers.inet6 import IPv6
        from scapy.layers.l2 import Ether

        assert self._sock is not None
        while not self._stop.is_set():
            ready, _, _ = select.select([self._sock], [], [], 0.05)
            if not ready:
                continue
            try:
                frame, meta = self._sock.recvfrom(65535)
            except OSError:
                return
            if meta[2] == socket.PACKET_OUTGOING and meta[0] == "lo":
                continue  # loopback shows every frame twice; keep the incoming copy
            if frame[12:14] == MARKER_ETHERTYPE.to_bytes(2, "big"):
                if self.nonce in frame:
                    with self._marked:
                        self.markers.append(frame[14:])
                        self._marked.notify_all()
                continue
            packet = Ether(frame)
            self.frames.append(packet)
            ip = packet.getlayer(IP) or packet.getlayer(IPv6)
            entry = {"iface": meta[0], "src": ip.src if ip else "", "dst": ip.dst if ip else "", "kind": "other"}
            if packet.haslayer(TCP):
                entry.update(kind="tcp", dport=packet[TCP].dport, flags=str(packet[TCP].flags))
            elif packet.haslayer(UDP):
                entry.update(kind="udp", dport=packet[UDP].dport)
            self.seen.append(entry)


# The kernel's per-namespace counters that any datagram, or any attempt to reach an address there is no
# route to, moves: over the whole life of the namespace, not a window. (TCP's ActiveOpens is not among them:
# an instance's agent opens connections to its own broker.)
EGRESS_COUNTERS = ("Udp.OutDatagrams", "Udp.NoPorts", "UdpLite.OutDatagrams", "Ip.OutNoRoutes",
                   "Udp6OutDatagrams", "Udp6NoPorts", "UdpLite6OutDatagrams", "Ip6OutNoRoutes")


def netns_counters(pid: int) -> dict[str, int]:
    """The SNMP counters of the network namespace of ``pid`` (``/proc/<pid>/net/snmp`` and ``snmp6``),
    read from the host: ``{"Udp.OutDatagrams": n, ..., "Udp6OutDatagrams": n, ...}``."""
    counters: dict[str, int] = {}
    lines = Path(f"/proc/{pid}/net/snmp").read_text().splitlines()
    for names, values in zip(lines[::2], lines[1::2]):
        group, keys = names.split(":", 1)
        for key, value in zip(keys.split(), values.split(":", 1)[1].split()):
            counters[f"{group}.{key}"] = int(value)
    for line in Path(f"/proc/{pid}/net/snmp6").read_text().splitlines():
        if line.strip():
            key, value = line.split()[:2]
            counters[key] = int(value)
    return counters


def egress_counters(pid: int) -> dict[str, int]:
    counters = netns_counters(pid)
    return {key: counters.get(key, 0) for key in EGRESS_COUNTERS}
