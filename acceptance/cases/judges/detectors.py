"""Detectors shared by a refusal and its controls: the broken control proves the very function the
refusal relies on can see a violation, so both must call the same one."""

from __future__ import annotations

import grp
import pwd
from collections.abc import Iterable, Mapping
from pathlib import Path

from acceptance.contract import Identity
from acceptance.harness import hostscan
from acceptance.harness.probes import ProbeLog


def tokens_in(data: bytes, what: str = "bytes carried out of a sandbox", log: ProbeLog | None = None) -> set[str]:
    """Every canary-shaped token in ``data``, by the suite's engine on the host (``hostscan``: the static probe
    when built, else detect.py), judged complete with its sentinels; the evidence names the engine."""
    return hostscan.tokens_in(data, what, log=log)


def volume_identity(host) -> str:
    """``dev:inode`` of the sandbox's /data, as the sandbox sees it."""
    return host.run("stat -c %d:%i /data").stdout.strip()


def mount_identities(host) -> dict[str, str]:
    """``mount point -> dev:inode`` for every mount visible in the sandbox (testinfra's MountPoint)."""
    found = {}
    for mp in host.mount_point.get_mountpoints():
        out = host.run("stat -c %%d:%%i %s", mp.path)
        if out.rc == 0:
            found[mp.path] = out.stdout.strip()
    return found


def supplementary_groups(host_pid: int) -> set[int]:
    """The host gids of a process's supplementary groups (``Groups:`` of the host's /proc/<pid>/status: host
    gids whatever its user namespace, as file access on the host goes by them); empty when unreadable (the
    privilege check names that)."""
    try:
        status = Path(f"/proc/{host_pid}/status").read_text(errors="replace")  # its Name: is the process's own
    except OSError:
        return set()
    for line in status.splitlines():
        if line.startswith("Groups:"):
            return {int(g) for g in line.split(":", 1)[1].split()}
    return set()


def groups_of(ident: Identity) -> set[int]:
    """Every host group the instance's process acts with: its gid and its supplementary groups."""
    return {ident.gid} | supplementary_groups(ident.host_pid)


def shared_identities(identities: Mapping[str, Identity]) -> list[tuple[str, str]]:
    """Pairs of instances that run under the same host uid or share a host group, primary or supplementary (a
    group shared by instances makes every group-accessible file of one reachable by an escape from another:
    not strangers)."""
    names = sorted(identities)
    groups = {name: groups_of(identities[name]) for name in names}
    return [(a, b) for i, a in enumerate(names) for b in names[i + 1:]
            if identities[a].uid == identities[b].uid or groups[a] & groups[b]]


def identity_problems(name: str, ident: Identity) -> list[str]:
    """What is wrong with one instance's identity: root, an existing host account or group (its gid or a
    supplementary one), a user namespace that maps more than its own uid, or, in the host's user namespace, a
    capability it holds or could gain."""
    problems = []
    if ident.uid == 0 or ident.gid == 0:
        problems.append(f"{name} runs as host root (uid {ident.uid}, gid {ident.gid})")
    try:
        account = pwd.getpwuid(ident.uid).pw_name
        problems.append(f"{name} runs as host account {account!r} (uid {ident.uid})")
    except KeyError:
        pass
    try:
        group = grp.getgrgid(ident.gid).gr_name
        problems.append(f"{name} runs in host group {group!r} (gid {ident.gid})")
    except KeyError:
        pass
    for gid in sorted(supplementary_groups(ident.host_pid) - {ident.gid}):
        try:
            problems.append(f"{name} holds host group {grp.getgrgid(gid).gr_name!r} (gid {gid}) as a supplementary group")
        except KeyError:
            if gid == 0:
                problems.append(f"{name} holds gid 0 as a supplementary group")
    lines = [line.split() for line in ident.uid_map.splitlines()]
    if lines == [[str(ident.uid), str(ident.uid), "1"]]:
        return problems  # a user namespace that holds its uid only: no other host identity can be taken in it
    if lines != INITIAL_UID_MAP:
        problems.append(f"{name}'s uid_map maps more than its own uid: {ident.uid_map!r}")
        return problems
    # No user namespace of its own (a container engine without remapping): the uid is the host's, and it stays
    # the only identity only while the process holds no capability and can gain none.
    problems.extend(privilege_problems(name, ident.host_pid))
    return problems


INITIAL_UID_MAP = [["0", "0", "4294967295"]]
CAPABILITY_SETS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")


def privilege_problems(name: str, host_pid: int) -> list[str]:
    """What could let a process in the host's user namespace act as another host identity, read from the
    host's /proc: any capability in any of its sets (the bounding set included: what is there can be gained
    by an exec), or no ``no_new_privs`` (a setuid or file-capability binary would raise it)."""
    try:
        status = Path(f"/proc/{host_pid}/status").read_text(errors="replace")  # its Name: is the process's own
    except OSError as exc:
        return [f"{name}'s process {host_pid} could not be read on the host ({exc.strerror}): its privileges are unknown"]
    fields = {k: v.strip() for k, v in (line.split(":", 1) for line in status.splitlines() if ":" in line)}
    problems = [f"{name} runs in the host's user namespace with capabilities in {key} ({fields[key]})"
                for key in CAPABILITY_SETS if int(fields.get(key, "0"), 16) != 0]
    if fields.get("NoNewPrivs") != "1":
        problems.append(f"{name} runs in the host's user namespace without no_new_privs: a setuid binary raises it")
    return problems


def union(sets: Iterable[set[str]]) -> set[str]:
    out: set[str] = set()
    for s in sets:
        out |= s
    return out
