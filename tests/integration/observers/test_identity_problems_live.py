"""PR-2's identity check on real processes: in the host's user namespace (a container engine without
remapping) an instance's uid is its only identity only while the process holds no capability, can gain
none (empty bounding set) and runs under no_new_privs. Each row starts a real process with setpriv and
reads it back from the host's /proc.

The part of tests/unit/test_identity_problems.py that the unit tier cannot hold: they start processes under setpriv."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from acceptance.cases.judges.detectors import identity_problems, shared_identities
from acceptance.contract import Identity

UID = 61_999_117  # no host account has it (checked below)


def _started(*setpriv: str) -> subprocess.Popen:
    groups = [] if any(a.startswith("--groups") for a in setpriv) else ["--clear-groups"]
    return subprocess.Popen(["setpriv", *setpriv, f"--reuid={UID}", f"--regid={UID}", *groups, "sleep", "60"])


def _identity(proc: subprocess.Popen) -> Identity:
    status = Path(f"/proc/{proc.pid}/status")
    # setpriv execs sleep after it changed identity: wait until the process is sleep under its uid
    end = time.monotonic() + 10
    while Path(f"/proc/{proc.pid}/comm").read_text().strip() != "sleep":
        assert time.monotonic() < end, "setpriv did not exec sleep"
        time.sleep(0.005)
    fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
    return Identity(host_pid=proc.pid, uid=int(fields["Uid"].split()[0]), gid=int(fields["Gid"].split()[0]),
                    uid_map=Path(f"/proc/{proc.pid}/uid_map").read_text().strip(), namespaces={})


@pytest.fixture
def started():
    procs = []

    def start(*setpriv):
        proc = _started(*setpriv)
        procs.append(proc)
        return _identity(proc)
    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="starting a process under another uid needs root")
def test_no_capability_and_no_new_privs_is_no_problem(started):
    import pwd
    with pytest.raises(KeyError):
        pwd.getpwuid(UID)
    ident = started("--no-new-privs", "--bounding-set=-all", "--inh-caps=-all")
    assert ident.uid_map.split() == ["0", "0", "4294967295"]
    assert identity_problems("A", ident) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="starting a process under another uid needs root")
def test_a_bounding_set_is_a_problem(started):
    """A non-root process holds no effective capability, but what its bounding set keeps an exec can give."""
    ident = started("--no-new-privs", "--inh-caps=-all")
    problems = identity_problems("A", ident)
    assert [p for p in problems if "CapBnd" in p], problems


@pytest.mark.skipif(os.geteuid() != 0, reason="starting a process under another uid needs root")
def test_no_new_privs_missing_is_a_problem(started):
    ident = started("--bounding-set=-all", "--inh-caps=-all")
    problems = identity_problems("A", ident)
    assert problems == ["A runs in the host's user namespace without no_new_privs: a setuid binary raises it"]


@pytest.mark.skipif(os.geteuid() != 0, reason="starting a process under another uid needs root")
def test_a_host_group_held_as_a_supplementary_group_is_a_problem(started):
    """Docker's ``group_add``: the gid is the instance's own, but a supplementary host group (adm, gid 4)
    reaches that group's host files."""
    import grp
    ident = started("--no-new-privs", "--bounding-set=-all", "--inh-caps=-all", "--groups=4")
    assert identity_problems("A", ident) == [
        f"A holds host group {grp.getgrgid(4).gr_name!r} (gid 4) as a supplementary group"]


@pytest.mark.skipif(os.geteuid() != 0, reason="starting a process under another uid needs root")
def test_instances_sharing_a_supplementary_group_are_not_strangers(started):
    """Two instances with their own uids and gids (here one uid, told apart below), one extra group shared."""
    shared = 61_999_200
    a = started("--no-new-privs", "--bounding-set=-all", "--inh-caps=-all", f"--groups={shared}")
    b = started("--no-new-privs", "--bounding-set=-all", "--inh-caps=-all", f"--groups={shared}")
    c = started("--no-new-privs", "--bounding-set=-all", "--inh-caps=-all")
    ids = {"A": a, "B": Identity(b.host_pid, b.uid + 1, b.gid + 1, b.uid_map, {}),
           "C": Identity(c.host_pid, c.uid + 2, c.gid + 2, c.uid_map, {})}
    assert shared_identities(ids) == [("A", "B")]
    assert identity_problems("A", a) == []
