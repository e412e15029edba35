"""Issue 28 item 2: an instance's volume had no size limit (the capacity model's 64 MB was arithmetic only), so a
plain or sparse file filled the host's disk. On a state root that is a btrfs filesystem with quotas
(``tools/setup-state`` makes /var/lib/pairproof one) each volume is a subvolume held to its size: shown here by
the agent's own writes stopping at it, through every lifecycle path that makes a volume (provision, a restore, the
snapshotted sleep and its wake), beside the old behaviour (a state root without quotas: the same write lands whole).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from runtime import controller as controller_module
from runtime.controller import Controller
from runtime.isolation import cleanup, quota

QUOTA_ROOT = controller_module.DEFAULT_ROOT  # tools/setup-state's filesystem
WRITE = "dd if=/dev/zero of=/data/fill bs=1048576 count=128 2>&1; s=$(du -sk /data/fill | cut -f1); rm -f /data/fill; echo kib=$s"


@pytest.fixture
def quota_root():
    """A state root of the test's own on the quota filesystem, cleaned after."""
    why = quota.unsupported(QUOTA_ROOT)
    assert why is None, f"the machine's state root has no quotas ({why}): run tools/setup-machine"
    path = Path(tempfile.mkdtemp(prefix="pairproof-quota-test-", dir=QUOTA_ROOT))
    os.chmod(path, 0o711)
    yield path
    cleanup.clean(path, include_live=True)
    shutil.rmtree(path, ignore_errors=True)


def _written_kib(c: Controller, instance_id: str) -> tuple[int, str]:
    out = c.exec(instance_id, ["/bin/sh", "-c", WRITE], timeout=60)
    text = out.stdout.decode(errors="replace")
    return int(text.rsplit("kib=", 1)[1].split()[0]), text


def test_a_write_past_the_volume_stops_at_its_limit_through_every_path(quota_root):
    c = Controller(quota_root, f"quota-{os.getpid()}")
    try:
        rec = c.provision("org1", "alice")
        c.wake(rec.id)
        limit_kib = c.budget.volume_mb * 1024
        kib, text = _written_kib(c, rec.id)
        assert kib <= limit_kib and "Disk quota exceeded" in text, text
        # A restore makes the volume anew (its staging is a subvolume held the same way).
        c.restore(c.snapshot(rec.id).id, into=rec.id)
        kib, text = _written_kib(c, rec.id)
        assert kib <= limit_kib and "Disk quota exceeded" in text, text
        # The snapshotted sleep removes the volume; its wake restores it.
        c.sleep(rec.id, "snapshotted")
        c.wake(rec.id)
        kib, text = _written_kib(c, rec.id)
        assert kib <= limit_kib and "Disk quota exceeded" in text, text
        # A sparse file costs nothing until filled, and filling it stops at the same limit.
        out = c.exec(rec.id, ["/bin/sh", "-c", "truncate -s 1T /data/sparse && dd if=/dev/zero of=/data/sparse "
                                               "bs=1048576 count=128 conv=notrunc 2>&1; du -sk /data/sparse; rm -f /data/sparse"])
        assert "Disk quota exceeded" in out.stdout.decode(), out
    finally:
        c.close()


def test_without_quotas_the_same_write_lands_whole():
    """The old behaviour, where it still is: a state root that is not such a filesystem (the log says so)."""
    root = Path(tempfile.mkdtemp(prefix="pairproof-noquota-test-", dir="/var/tmp"))
    os.chmod(root, 0o711)
    assert quota.unsupported(root) is not None
    c = Controller(root, f"noquota-{os.getpid()}")
    try:
        rec = c.provision("org1", "alice")
        c.wake(rec.id)
        kib, text = _written_kib(c, rec.id)
        assert kib == 128 * 1024, text
    finally:
        c.close()
        cleanup.clean(root, include_live=True)
        shutil.rmtree(root, ignore_errors=True)


def test_the_agent_cannot_make_a_subvolume_of_its_own(quota_root):
    """A subvolume made inside the volume would be a quota group with no limit: the seccomp filter refuses it."""
    c = Controller(quota_root, f"quota-{os.getpid()}")
    try:
        rec = c.provision("org1", "alice")
        c.wake(rec.id)
        script = ("import fcntl, os, struct\nfd = os.open('/data', os.O_RDONLY)\ntry:\n"
                  "    fcntl.ioctl(fd, 0x5000940E, bytearray(struct.pack('q4088s', 0, b'sub')))\n    print('created')\n"
                  "except OSError as exc:\n    print('refused', exc.errno)\n")
        out = c.exec(rec.id, ["python3", "-I", "-c", script])
        assert out.stdout.decode().split() == ["refused", "1"], out
    finally:
        c.close()
