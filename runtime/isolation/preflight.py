"""What the reference runtime needs from the machine, checked before anything is created.

Each missing piece is reported as one ``Problem`` naming the piece and the command that provides it,
so ``pairproof qualify`` can print one clear line per problem and change nothing.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from runtime.errors import PreflightError
from runtime.isolation import cgroups

TOOLS = {
    "bwrap": "apt-get install -y bubblewrap",
    "setpriv": "apt-get install -y util-linux",
    "nsenter": "apt-get install -y util-linux",
}
SANDBOX_PYTHON = "/usr/bin/python3"


@dataclass(frozen=True)
class Problem:
    what: str
    fix: str

    def __str__(self) -> str:
        return f"{self.what}: {self.fix}"


def _read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None


def check() -> list[Problem]:
    problems: list[Problem] = []
    if os.geteuid() != 0:
        problems.append(Problem(
            "not running as root (needed to create cgroups and give each instance its own host uid)",
            "run again as root, e.g. `sudo pairproof qualify`"))
    for tool, fix in TOOLS.items():
        if shutil.which(tool) is None:
            problems.append(Problem(f"`{tool}` is not installed", fix))
    if not os.access(SANDBOX_PYTHON, os.X_OK):
        problems.append(Problem(f"{SANDBOX_PYTHON} (the agent's interpreter inside the sandbox) is missing",
                                "apt-get install -y python3"))
    if _read_int("/proc/sys/user/max_user_namespaces") == 0:
        problems.append(Problem("user namespaces are disabled (user.max_user_namespaces = 0)",
                                "sysctl -w user.max_user_namespaces=15000"))
    if _read_int("/proc/sys/kernel/unprivileged_userns_clone") == 0:
        problems.append(Problem("unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0)",
                                "sysctl -w kernel.unprivileged_userns_clone=1"))
    if _read_int("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == 1:
        problems.append(Problem("AppArmor forbids unprivileged user namespaces",
                                "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"))
    try:
        cgroups.detect()
    except PreflightError as exc:
        problems.append(Problem("cgroup memory and pids controllers are not available", str(exc)))
    return problems


def require() -> None:
    problems = check()
    if problems:
        raise PreflightError("; ".join(str(p) for p in problems))
