"""The sandbox rules: what the core cases assume of a sandbox that no method signature says, each a check-driver
check with a stable id (``docs/writing-a-driver.md``, "What the sandbox must look like", cites them).

A sandbox that breaks one of these leaves core cases *broken* (not judged) or *failed* for a reason that says
little about its isolation, so check-driver tries each by behaviour, on the checker's own instance, against
what the host sees of it:

- **SBX-1** the volume is ``/data``, writable by the instance's uid, and ``/tmp`` is the sandbox's own: a
  file written inside both is found through the host's ``/proc/<host_pid>/root`` (as FS-1 looks), owned by
  the instance's uid, and is not in the host's ``/tmp``.
- **SBX-2** a small visible filesystem: the sandbox's root is not the host's, and what it sees outside
  ``/usr``, ``/sys``, ``/proc`` and ``/dev`` (FS-1's scan) is at most ``VISIBLE_FILES`` files, none over the
  scan's 8 MiB.
- **SBX-3** a resident agent process: a process of the instance's own pid namespace whose command line holds
  the profile's ``[start]`` process (PR-1's P control).
- **SBX-4** its own user namespace: the host's ``/proc/<host_pid>/uid_map`` (which ``identity().uid_map``
  must repeat) maps the instance's uid alone; or, with none of its own (a container engine without
  remapping), the process holds no capability in any set and runs under no_new_privs (as PR-2 accepts); and
  that uid has a name inside (``id -nu``, PR-2's P control).
- **SBX-5** no other uid in its namespaces: every host process in the sandbox's pid, net or mount namespace is
  owned by ``identity().uid`` (every probe's proof checks it).
- **SBX-6** limits in its own cgroups: a memory limit of at most 256 MiB by default and exactly the one
  ``provision(memory_limit_mb=1024)`` asks, a pids limit under 1000, and ``exec``'s processes in the same
  memory and pids cgroups as the rest of the instance (RS-1, RS-2).
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path

from acceptance.contract.checking import Checker, check
from acceptance.contract.core import Identity, Principal

MAX_FILE_BYTES = 8 << 20  # canaries/detect.py DEFAULT_MAX_FILE_BYTES: a larger file leaves FS-1's scan unproven
VISIBLE_FILES = 20_000  # more than this outside /usr and FS-1's scan takes minutes: the host's root, most likely
UNSCANNED = ("usr", "sys", "proc", "dev")  # what FS-1's scan leaves out
DEFAULT_MEMORY_MB = 256
ROOMY_MEMORY_MB = 1024
PIDS_BELOW = 1000
CONTROLLERS = ("memory", "pids")
CAPABILITY_SETS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")
ROOMY = Principal("M", "org3", "max")


def _members(namespace: str, link: str) -> dict[int, int]:
    """Every host process whose ``ns/<namespace>`` is ``link``: host pid -> its real uid."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{name}/ns/{namespace}") != link:
                continue
            with open(f"/proc/{name}/status", "rb") as status:
                found[int(name)] = next(int(line.split()[1]) for line in status if line.startswith(b"Uid:"))
        except (OSError, StopIteration, ValueError):
            continue  # it ended while we looked
    return found


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def volume(c: Checker) -> str:
    """SBX-1: /data writable by the instance's uid, seen by the host where FS-1 looks; /tmp its own."""
    t, ref = c.target, c.ref
    ident: Identity = t.identity(ref)
    name, mark = f".ppsbx1-{secrets.token_hex(4)}", secrets.token_hex(8)
    out = t.exec(ref, ["/bin/sh", "-c", f'printf %s {mark} > /data/{name} && printf %s {mark} > /tmp/{name}'],
                 timeout=30)
    try:
        check(out.rc == 0, f"the instance's uid could not write /data/{name} and /tmp/{name} (rc {out.rc}, "
                           f"{out.stderr[:160]!r}): the volume must be /data, writable, with a /tmp of its own")
        root = Path(f"/proc/{ident.host_pid}/root")
        for folder in ("data", "tmp"):
            seen = root / folder / name
            check(seen.is_file() and seen.read_text() == mark,
                  f"the host does not find what exec wrote in /{folder} at {seen}: exec and identity disagree "
                  "on the sandbox")
            owner = seen.stat().st_uid
            check(owner == ident.uid, f"/{folder}/{name} written inside is owned on the host by uid {owner}, not "
                                      f"the instance's {ident.uid}")
        check(not Path("/tmp", name).exists(), "what the instance wrote in its /tmp is in the host's /tmp: the "
                                               "sandbox has no /tmp of its own")
    finally:
        t.exec(ref, ["/bin/rm", "-f", f"/data/{name}", f"/tmp/{name}"], timeout=30)
    return f"exec wrote /data and /tmp; the host finds both under /proc/{ident.host_pid}/root as uid {ident.uid}"


def visible(c: Checker) -> str:
    """SBX-2: the root is not the host's; outside /usr, /sys, /proc, /dev few files, none over 8 MiB."""
    pid = c.target.identity(c.ref).host_pid
    root = f"/proc/{pid}/root"
    mine, theirs = os.stat("/"), os.stat(root)
    check((mine.st_dev, mine.st_ino) != (theirs.st_dev, theirs.st_ino),
          "the sandbox's root is the host's root: FS-1 would scan the whole host; give it a root of its own "
          "with the host's /usr bound read-only")
    files, big = 0, []
    for top in sorted(os.listdir(root)):
        if top in UNSCANNED or os.path.islink(f"{root}/{top}"):
            continue  # a link (/lib -> usr/lib) leads where the scan does not go; os.walk follows none below
        for folder, _, names in os.walk(f"{root}/{top}"):
            for name in names:
                files += 1
                try:
                    info = os.lstat(os.path.join(folder, name))
                except OSError:
                    continue  # gone while we looked
                if info.st_size > MAX_FILE_BYTES and not os.path.islink(os.path.join(folder, name)):
                    big.append(os.path.join(folder, name)[len(root):])
            check(files <= VISIBLE_FILES, f"the sandbox sees more than {VISIBLE_FILES} files outside "
                                          f"/{', /'.join(UNSCANNED)} (at {folder[len(root):]}): FS-1 cannot scan "
                                          "it; give it a small root of its own")
    check(not big, f"files over {MAX_FILE_BYTES >> 20} MiB visible in the sandbox ({', '.join(big[:5])}): FS-1's "
                   "scan cannot prove it read them")
    return f"a root of its own; {files} files outside /{', /'.join(UNSCANNED)}, none over {MAX_FILE_BYTES >> 20} MiB"


def agent(c: Checker, start_command: str | None) -> str:
    """SBX-3: a resident process of the instance's pid namespace runs the profile's start process."""
    check(start_command, "no profile start process given to look for (check-driver passes the profile's)")
    ident = c.target.identity(c.ref)
    members = _members("pid", ident.namespaces["pid"])
    lines = {pid: _cmdline(pid).replace(b"\0", b" ").decode(errors="replace").strip() for pid in members}
    found = [pid for pid, line in lines.items() if start_command in line and not line.startswith("bwrap")]
    check(found, f"no process in the instance's pid namespace runs the profile's {start_command!r} (there: "
                 f"{sorted(v[:50] for v in lines.values())[:6]}): PR-1 needs the agent resident in the sandbox")
    return f"{start_command!r} runs as host pid {found[0]} in the instance's pid namespace"


def user_namespace(c: Checker) -> str:
    """SBX-4: a user namespace mapping the instance's uid alone (or, in the host's, no capability and
    no_new_privs), as the host's /proc shows it and identity repeats it; the uid has a name inside."""
    t, ref = c.target, c.ref
    ident = t.identity(ref)
    on_host = Path(f"/proc/{ident.host_pid}/uid_map").read_text()
    rows = [line.split() for line in on_host.splitlines() if line.strip()]
    check(ident.uid_map.split() == on_host.split(), f"identity().uid_map {ident.uid_map!r} is not the host's "
                                                    f"/proc/{ident.host_pid}/uid_map {on_host.strip()!r}")
    if rows == [[str(ident.uid), str(ident.uid), "1"]]:
        how = f"its own user namespace maps uid {ident.uid} alone"
    else:
        check(os.readlink(f"/proc/{ident.host_pid}/ns/user") == os.readlink("/proc/self/ns/user"),
              f"the sandbox's user namespace maps more than the instance's uid {ident.uid}: {on_host.strip()!r}")
        # No user namespace of its own (a container engine without remapping): PR-2 accepts it only while the
        # process holds no capability, the bounding set included, and can gain none.
        status = Path(f"/proc/{ident.host_pid}/status").read_text(errors="replace")
        fields = {k: v.strip() for k, v in (line.split(":", 1) for line in status.splitlines() if ":" in line)}
        held = [k for k in CAPABILITY_SETS if int(fields.get(k, "0"), 16)]
        check(not held and fields.get("NoNewPrivs") == "1",
              f"the sandbox shares the host's user namespace holding capabilities in {held or 'no set'} and "
              f"NoNewPrivs {fields.get('NoNewPrivs')}: give it a user namespace mapping its uid alone, or drop "
              "every capability (the bounding set too) and set no_new_privs")
        how = "the host's user namespace, no capability in any set, no_new_privs"
    out = t.exec(ref, ["id", "-nu"], timeout=30)
    name = out.stdout.decode(errors="replace").strip()
    check(out.rc == 0 and name, f"the instance's uid has no name inside (id -nu: rc {out.rc}, {out.stderr[:120]!r})")
    return f"{how}; uid {ident.uid} is {name!r} inside"


def uids(c: Checker) -> str:
    """SBX-5: every host process in the sandbox's pid, net or mount namespace is the instance's uid."""
    ident = c.target.identity(c.ref)
    members: dict[int, int] = {}
    for namespace in ("pid", "net", "mnt"):
        members.update(_members(namespace, ident.namespaces[namespace]))
    check(ident.host_pid in members, f"the host finds no process {ident.host_pid} in the namespaces identity names")
    foreign = {pid: uid for pid, uid in members.items() if uid != ident.uid}
    check(not foreign, f"processes of another uid than the instance's {ident.uid} in its namespaces (host pid: "
                       f"uid {dict(sorted(foreign.items())[:6])}): every probe's proof would fail")
    return f"{len(members)} process{'es' if len(members) != 1 else ''} in its pid, net and mount namespaces, all uid " \
           f"{ident.uid}"


def _cgroups(pid: int) -> dict[str, str]:
    """The host's view of ``pid``'s cgroup per controller (v1: a line each; v2: the unified path)."""
    found = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else ["unified"]:
            found[controller] = path
    return {c: found[c] if c in found else found.get("unified", "") for c in CONTROLLERS}


def _mounts() -> dict[str, str]:
    """controller (or ``unified``) -> where its hierarchy's root is mounted on the host."""
    found = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        kind = fields[fields.index("-") + 1]
        if fields[3] != "/":
            continue  # a subtree mounted elsewhere; the host's own mount of the root is what we walk
        if kind == "cgroup2":
            found.setdefault("unified", fields[4])
        elif kind == "cgroup":
            for option in fields[-1].split(","):
                found.setdefault(option, fields[4])
    return found


def _limit(pid: int, controller: str) -> float:
    """The tightest limit on ``pid`` of ``controller`` (memory in bytes, pids), over its cgroup's ancestors."""
    mounts, path = _mounts(), _cgroups(pid)[controller]
    v1 = controller in mounts
    base = mounts.get(controller) or mounts.get("unified")
    check(base, f"no {controller} cgroup hierarchy is mounted on the host")
    name = {"memory": "memory.limit_in_bytes" if v1 else "memory.max", "pids": "pids.max"}[controller]
    tightest, folder = float("inf"), Path(base) / path.lstrip("/")
    while True:
        try:
            text = (folder / name).read_text().strip()
            tightest = min(tightest, float("inf") if text == "max" else int(text))
        except FileNotFoundError:
            pass  # the hierarchy's root has no limit file
        if folder == Path(base):
            return tightest
        folder = folder.parent


def _sleeper_cgroups(t: object, ref: object) -> tuple[dict[str, str], dict[int, dict[str, str]]]:
    """While ``exec`` runs a sleep marked by its argument, its cgroups and every other process's of the pid
    namespace (host pid -> cgroups) as the host sees them."""
    marker = f"{1 + secrets.randbelow(10**6) / 10**7:.7f}"
    pid_ns = t.identity(ref).namespaces["pid"]
    sleeper = threading.Thread(target=t.exec, args=(ref, ["sleep", marker]), kwargs={"timeout": 30}, daemon=True)
    sleeper.start()
    try:
        end = time.monotonic() + 10
        while True:
            members = _members("pid", pid_ns)
            probe = [p for p in members if _cmdline(p) == b"sleep\0" + marker.encode() + b"\0"]
            if probe:
                break
            check(time.monotonic() < end, f"exec's 'sleep {marker}' never showed up in the instance's pid namespace")
            time.sleep(0.01)
        others = {}
        for pid in members:
            try:
                others[pid] = _cgroups(pid)
            except OSError:
                continue  # ended while we looked
        return others.pop(probe[0]), others
    finally:
        sleeper.join(timeout=30)


def limits(c: Checker) -> str:
    """SBX-6: at most 256 MiB by default, 1024 MiB when asked, pids under 1000, exec in the same cgroups."""
    t, ref = c.target, c.ref
    pid = t.identity(ref).host_pid
    memory, pids = _limit(pid, "memory"), _limit(pid, "pids")
    check(memory <= DEFAULT_MEMORY_MB << 20, f"the instance's memory limit is {memory / (1 << 20):.0f} MiB: by "
                                             f"default at most {DEFAULT_MEMORY_MB} MiB (RS-1 allocates 400 MB)")
    check(pids < PIDS_BELOW, f"the instance's pids limit is {pids}: it must be well under {PIDS_BELOW} (RS-2)")
    own, others = _sleeper_cgroups(t, ref)
    outside = {p: seen for p, seen in others.items() if seen != own}
    check(not outside, f"exec's process is in cgroups {own}, other processes of the instance are not "
                       f"({dict(sorted(outside.items())[:4])}): its limits do not hold the whole instance")
    roomy = t.provision(ROOMY, memory_limit_mb=ROOMY_MEMORY_MB)
    try:
        asked = _limit(t.identity(roomy).host_pid, "memory")
        check(asked == ROOMY_MEMORY_MB << 20, f"provision(memory_limit_mb={ROOMY_MEMORY_MB}) gave a memory limit "
                                              f"of {asked / (1 << 20):.0f} MiB")
    finally:
        t.destroy(roomy)
    return (f"memory {memory / (1 << 20):.0f} MiB (and {ROOMY_MEMORY_MB} MiB when asked), pids {pids:.0f}; exec "
            f"in the instance's cgroups with its {len(others)} other process{'es' if len(others) != 1 else ''}")


# id -> (what the rule is, its check): check-driver runs them in this order after the core.
RULES: dict[str, tuple[str, Callable[..., str]]] = {
    "SBX-1": ("the volume at /data, writable, with its own /tmp", volume),
    "SBX-2": ("a small visible filesystem", visible),
    "SBX-3": ("a resident agent process", agent),
    "SBX-4": ("its own user namespace (or no privilege)", user_namespace),
    "SBX-5": ("no other uid in its namespaces", uids),
    "SBX-6": ("limits in its own cgroups", limits),
}
