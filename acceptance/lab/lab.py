"""The host side of the lab: start the sink in a new network namespace, link sandboxes to it on purpose,
read what it recorded, and tear it all down (see the package docstring for the safety argument)."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

from pyroute2 import IPRoute, NetNS

from ..errors import SetupError
from .sink import ADDRESSES

READY_DEADLINE = 20.0


class Lab:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.records_path = workdir / "sink.jsonl"
        self.pcap_path = workdir / "sink.pcap"
        self._links = 0
        # unshare gives the sink a fresh network namespace with nothing in it. setpriv arms a parent-death
        # signal on unshare itself (it execs into it), and --kill-child arms one on the sink: if this process
        # dies, even by SIGKILL, both go, and the namespace with them.
        self._proc = subprocess.Popen(
            ["setpriv", "--pdeathsig", "KILL", "--", "unshare", "--net", "--kill-child", "--",
             sys.executable, "-m", "acceptance.lab.sink", str(self.records_path), str(self.pcap_path)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
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
        """Link the network namespace of ``pid`` to the lab with a veth and (by default) a default route
        through it. Only a broken control does this. Returns the address given to that side."""
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
        with NetNS(self.netns()) as ns:
            idx = ns.link_lookup(ifname=lab_if)[0]
            ns.addr("add", index=idx, address=lab_ip, prefixlen=30)
            ns.link("set", index=idx, state="up")
        with NetNS(target) as ns:
            idx = ns.link_lookup(ifname=peer_if)[0]
            ns.addr("add", index=idx, address=peer_ip, prefixlen=30)
            ns.link("set", index=idx, state="up")
            if default_route:
                ns.route("add", dst="0.0.0.0/0", gateway=lab_ip)
        return peer_ip

    def records(self, since: float = 0.0) -> list[dict]:
        if not self.records_path.exists():
            return []
        lines = self.records_path.read_text().splitlines()
        return [r for r in (json.loads(line) for line in lines if line.strip()) if r["at"] >= since]

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        for stream in (self._proc.stdout, self._proc.stderr):
            if stream:
                stream.close()


__all__ = ["ADDRESSES", "Lab"]
