"""Each instance's volume has a hard size limit: a btrfs subvolume under a quota group (issue 28 item 2).

An agent writes to its volume (/data), a host folder under the state root bound into its sandbox. Without a limit a
plain file there fills the host's disk: the capacity model's ``volume_mb`` was arithmetic only. Here the volume is a
btrfs *subvolume* of the state root's filesystem with a quota group limit (``btrfs qgroup limit``): a write past it
fails in the agent with EDQUOT ("Disk quota exceeded"), whoever wrote it, sparse files included (a file's blocks
count as they are written). A subvolume is a folder: it is bound, renamed (restore's swap) and removed (``rmdir``
once empty) like one. A subvolume made *inside* it would be a quota group of its own, outside the limit: the
sandbox's seccomp filter refuses the ioctls that make one (``seccomp.BTRFS_IOCTLS``).

Why btrfs: the kernels this runs on may lack the quota formats ext4 and XFS need (``CONFIG_QFMT_V2``,
``CONFIG_XFS_QUOTA``), while btrfs keeps its quota groups itself. One filesystem for the whole state root, made once
by ``tools/setup-machine`` (a loop-mounted image at /var/lib/pairproof, quotas on): no mount per instance, so
nothing a sandbox or a container engine sees changes, and a run leaves no mount behind. ``unsupported`` says why
a state root cannot have limits; the controller then makes plain folders and says so in its log, and RS-3 fails
the deployment (a volume that takes what the host has is what it finds).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from runtime.errors import ConfigError

QUOTA_TIMEOUT = 10.0
MIN_LIMIT = 1 << 20


def _mount_of(path: Path) -> tuple[str, str] | None:
    """(mount point, filesystem type) of the mount holding ``path``, from this process's mountinfo."""
    target = os.path.realpath(path)
    best = None
    with open("/proc/self/mountinfo", "rb") as info:
        for raw in info:
            fields = raw.decode(errors="replace").split()
            point = fields[4].encode().decode("unicode_escape")
            fstype = fields[fields.index("-") + 1]
            inside = target == point or target.startswith(point.rstrip("/") + "/")
            if inside and (best is None or len(point) >= len(best[0])):
                best = (point, fstype)
    return best


def _run(argv: list[str], what: str) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=QUOTA_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"{what}: {' '.join(argv)} did not run: {exc}") from exc
    if done.returncode != 0:
        raise ConfigError(f"{what}: {' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[:300]}")
    return done


def unsupported(path: Path) -> str | None:
    """None when folders under ``path`` can be size-limited volumes; else why not, with the fix."""
    mount = _mount_of(path)
    if mount is None:
        return f"no mount holds {path}"
    point, fstype = mount
    if fstype != "btrfs":
        return (f"{path} is on {point} ({fstype}), not a btrfs filesystem with quotas on: instance volumes there "
                f"have no size limit; run tools/setup-machine (it mounts one at /var/lib/pairproof) or choose a "
                f"state folder on such a filesystem")
    try:
        subprocess.run(["btrfs", "qgroup", "show", point], capture_output=True, check=True, timeout=QUOTA_TIMEOUT)
    except (OSError, subprocess.SubprocessError):
        return (f"{path} is on btrfs ({point}) without quotas: instance volumes there have no size limit; "
                f"`btrfs quota enable {point}` (tools/setup-machine does) or choose another state folder")
    return None


def make_volume(path: Path, uid: int, limit_bytes: int, mode: int = 0o700) -> None:
    """Create ``path`` as a subvolume held to ``limit_bytes``, owned by ``uid`` with ``mode``. An existing folder is
    left as it is (a volume made earlier, limited then)."""
    if limit_bytes < MIN_LIMIT:
        raise ConfigError(f"a volume limit of {limit_bytes} bytes is below {MIN_LIMIT}: no agent can start in it")
    if path.exists():
        return
    _run(["btrfs", "-q", "subvolume", "create", str(path)], f"volume {path}")
    try:
        _run(["btrfs", "qgroup", "limit", str(limit_bytes), str(path)], f"limit of volume {path}")
        os.chown(path, uid, uid)
        os.chmod(path, mode)
    except BaseException:
        remove_volume(path)
        raise


def remove_volume(path: Path) -> None:
    """Remove an empty volume (a subvolume goes by ``rmdir`` once empty, as a folder does)."""
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass
