"""The host side of the lab: start the sink in a new network namespace, link sandboxes to it on purpose,
read what it recorded, and tear it all down (see the package docstring for the safety argument)."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyroute2 import IPRoute

from acceptance.errors import SetupError
from acceptance.harness.lab.netns import socket_in
from acceptance.harness.lab.sink import ADDRESSES, ADDRESSES6, BARRIER_PORT

READY_DEADLINE = 20.0
BARRIER_DEADLINE = 30.0


class Lab:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.records_path = workdir / "sink.jsonl"
        self.pcap_path = workdir / "sink.pcap"
        self._links = 0
        # unshare gives the sink a fresh network namespace with nothing in it. setpriv arms a parent-death
        # signal on unshare itself (it execs into it), and --kill-child arms one on the sink: if this process
        # dies, even by SIGKILL, both go, and the namespace with them. A session of its own: a terminal's Ctrl-C
        # reaches the run alone, whose teardown (close) kills the sink by pid.
        self._proc = subprocess.Popen(
            ["setpriv", "--pdeathsig", "KILL", "--", "unshare", "--net", "--kill-child", "--",
             sys.executable, "-m", "acceptance.harness.lab.sink", str(self.records_path), str(self.pcap_path)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True)
        end = time.monotonic() + READY_DEADLINE
        while time.monotonic() < end:
            ready, _, _ = select.select([self._proc.stdout], [], [], 0.1)
            if ready and self._proc.stdout.readline().strip() == b"ready":
                break
            if self._proc.poll() is not None:
                raise SetupError(f"the lab's sink failed to start: {self._proc.stderr.read().decode()[-500:]}")
        else:
            self.close()
            raise SetupError(f"the lab's sink was not ready within {READY_DEADLINE}s")

    @property
    def sink_pid(self) -> int:
        # unshare forks the sink (because of --kill-child); its only child is setpriv exec'd as python
        children = Path(f"/proc/{self._proc.pid}/task/{self._proc.pid}/children").read_text().split()
        return int(children[0]) if children else self._proc.pid

    def netns(self) -> str:
        return f"/proc/{self.sink_pid}/ns/net"

    def connect(self, pid: int, *, default_route: bool = True) -> str:
        """Link the network namespace of ``pid`` to the lab with a veth, IPv4 and IPv6 addresses on it and
        (by default) default routes of both families through it. Only a broken control does this. Returns
        the IPv4 address given to that side."""
        n = self._links = self._links + 1
        if n > 60:
            raise SetupError("the lab links at most 60 namespaces in one run")
        lab_ip, peer_ip = f"100.65.{n}.1", f"100.65.{n}.2"
        lab_if, peer_if = f"pplab{n}", f"ppnet{n}"
        target = f"/proc/{pid}/ns/net"
        with IPRoute() as ip:
            # Created directly inside the two namespaces: nothing of it ever exists in the host's.
            ip.link("add", ifname=peer_if, kind="veth", peer={"ifname": lab_if, "net_ns_fd": self.netns()},
                    net_ns_fd=target)
        # Addresses and routes are set with `nsenter ip` (util-linux, iproute2), not pyroute2's NetNS: NetNS
        # forks a Python child to enter the namespace, and a fork of this multi-threaded process (brokers,
        # servers) deadlocked on a lock another thread held, hanging the run. IPv6 goes without duplicate
        # address detection, so the addresses are usable at once.
        lab6, peer6 = f"fd00:65:{n:x}::1", f"fd00:65:{n:x}::2"
        steps = [(self.netns(), ["addr", "add", f"{lab_ip}/30", "dev", lab_if]),
                 (self.netns(), ["-6", "addr", "add", f"{lab6}/64", "dev", lab_if, "nodad"]),
                 (self.netns(), ["link", "set", lab_if, "up"]),
                 (target, ["addr", "add", f"{peer_ip}/30", "dev", peer_if]),
                 (target, ["-6", "addr", "add", f"{peer6}/64", "dev", peer_if, "nodad"]),
                 (target, ["link", "set", peer_if, "up"])]
        if default_route:
            steps += [(target, ["route", "add", "default", "via", lab_ip, "dev", peer_if]),
                      (target, ["-6", "route", "add", "default", "via", lab6, "dev", peer_if])]
        for where, command in steps:
            done = subprocess.run(["nsenter", f"--net={where}", "ip", *command], capture_output=True, text=True,
                                  start_new_session=True)
            if done.returncode != 0:
                raise SetupError(f"the lab could not link namespace {where}: ip {' '.join(command)}: "
                                 f"{done.stderr.strip()}")
        return peer_ip

    def records(self, since: float = 0.0) -> list[dict]:
        """What the sink recorded since ``since``: every frame that reached it before this call, because
        the capture is first drained up to a barrier (the capture parses frames one by one and may lag
        the probe that sent them; reading the file at once could miss the last SYN)."""
        return [r for r in self._drained() if r["at"] >= since and r["kind"] != "barrier"]

    def _read(self) -> list[dict]:
        if not self.records_path.exists():
            return []
        return [json.loads(line) for line in self.records_path.read_text().splitlines() if line.strip()]

    def _drained(self) -> list[dict]:
        nonce = os.urandom(8).hex()
        end, sent = time.monotonic() + BARRIER_DEADLINE, 0.0
        while True:
            if time.monotonic() - sent > 1.0:  # again each second: a barrier can be dropped like any frame
                sock = socket_in(self.sink_pid, socket.AF_INET, socket.SOCK_DGRAM)
                try:
                    sock.sendto(nonce.encode(), ("127.0.0.1", BARRIER_PORT))
                finally:
                    sock.close()
                sent = time.monotonic()
            records = self._read()
            barrier = next((r for r in records if r["kind"] == "barrier"
                            and bytes.fromhex(r["payload"]).decode() == nonce), None)
            if barrier is not None:
                if barrier["dropped"]:
                    raise SetupError(f"the lab's capture dropped {barrier['dropped']} frames (its receive buffer "
                                     "was full): its records cannot be trusted to be complete")
                return records
            if self._proc.poll() is not None or time.monotonic() > end:
                raise SetupError(f"the lab's capture did not record its barrier within {BARRIER_DEADLINE}s "
                                 f"(sink {'exited' if self._proc.poll() is not None else 'running'}): "
                                 "its records cannot be trusted to be complete")
            time.sleep(0.02)

    def records_carrying(self, label: str, since: float = 0.0) -> list[dict]:
        """The records since ``since`` whose query name or payload carries ``label``."""
        hits = []
        for record in self.records(since):
            data = record.get("name", "") + bytes.fromhex(record.get("payload", "")).decode("latin-1")
            if label in data:
                hits.append(record)
        return hits

    @contextmanager
    def stub_resolver(self, pid: int) -> Iterator[list[str]]:
        """A DNS stub listening at 127.0.0.1:53 and [::1]:53 *inside* the network namespace of ``pid`` (the
        way the broker listens there), forwarding every query to the lab's resolver: a resolver the sandbox
        reaches with no route at all. Only a broken control does this. Yields the addresses it listens on."""
        listeners = []
        for family, address in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
            sock = socket_in(pid, family, socket.SOCK_DGRAM)
            sock.bind((address, 53))
            listeners.append(sock)
        upstream = socket_in(self.sink_pid, socket.AF_INET, socket.SOCK_DGRAM)
        upstream.settimeout(2.0)
        done = threading.Event()

        def serve() -> None:
            while not done.is_set():
                ready, _, _ = select.select(listeners, [], [], 0.05)
                for sock in ready:
                    query, peer = sock.recvfrom(4096)
                    upstream.sendto(query, (ADDRESSES["resolver"], 53))
                    try:
                        sock.sendto(upstream.recv(4096), peer)
                    except OSError:
                        pass

        worker = threading.Thread(target=serve, name=f"stub-resolver-{pid}", daemon=True)
        worker.start()
        try:
            yield ["127.0.0.1:53", "[::1]:53"]
        finally:
            done.set()
            worker.join(5)
            for sock in (*listeners, upstream):
                sock.close()

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        for stream in (self._proc.stdout, self._proc.stderr):
            if stream:
                stream.close()


def stale_workdirs(tmp: Path | None = None) -> list[Path]:
    """Lab folders (``pairproof-lab-*`` in the temporary folder) whose sink no longer runs: what a SIGKILLed
    run leaves (its finalizer never ran; the sink and its namespace died with it). A folder named on a live
    sink's command line is in use and is not listed."""
    import tempfile

    base = Path(tmp or tempfile.gettempdir())
    live = b""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            data = cmdline.read_bytes()
        except OSError:
            continue
        if b"acceptance.harness.lab.sink" in data:
            live += data
    return [d for d in sorted(base.glob("pairproof-lab-*")) if d.is_dir() and str(d).encode() not in live]


__all__ = ["ADDRESSES", "ADDRESSES6", "Lab", "stale_workdirs"]
