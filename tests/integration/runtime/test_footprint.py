"""``footprint.measure`` reports what the kernel's own cgroup counters say of the instance it measured, and a
budget generated from it keeps every choice a single instance cannot make."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from runtime import capacity, footprint

MiB = 1 << 20


def _memory_cgroup(pid: int) -> Path:
    """The v1 memory cgroup (or the v2 cgroup) of ``pid``, found from the kernel's /proc/<pid>/cgroup."""
    lines = dict(line.split(":", 2)[1:] for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines())
    if "memory" in lines:
        return Path("/sys/fs/cgroup/memory") / lines["memory"].lstrip("/")
    return Path("/sys/fs/cgroup") / lines[""].lstrip("/")


def test_measure_agrees_with_the_cgroups_own_counters(platform_controller):
    c = platform_controller
    fp = footprint.measure(c, turns=2, keep=True)
    folder = _memory_cgroup(c.sandbox(fp.instance).host_pid)
    v1 = (folder / "memory.usage_in_bytes").exists()
    usage = int((folder / ("memory.usage_in_bytes" if v1 else "memory.current")).read_text())
    peak = int((folder / ("memory.max_usage_in_bytes" if v1 else "memory.peak")).read_text())
    # Nothing ran since the measurement: the charge is where it was, the peak where the turns left it.
    assert abs(usage - fp.idle_bytes) <= 2 * MiB
    assert 0 <= peak - fp.active_bytes <= 2 * MiB
    assert fp.active_bytes >= fp.idle_bytes > 4 * MiB  # a Python agent, not an empty cgroup
    volume = c.volume_path(fp.instance)
    du = int(subprocess.run(["du", "-s", "-B1", str(volume)], capture_output=True, text=True, check=True).stdout.split()[0])
    assert fp.disk_bytes == du - volume.lstat().st_blocks * 512  # du counts the folder itself too
    assert fp.disk_bytes > 0  # the turns wrote its transcript


def test_idle_is_the_charge_after_the_first_turn_and_active_the_peak_over_the_measured_turns(tmp_path):
    """Against a cgroup whose counters the test sets: the charge before the measured turns is idle, the peak
    the turns reached (after a reset) is active, whatever the charge is once they are over."""
    from types import SimpleNamespace

    events = []

    class Cgroup:
        current, peak = 10 * MiB, 12 * MiB

        def memory_current(self):
            return self.current

        def memory_peak(self):
            return self.peak

        def reset_peak(self):
            events.append("reset")
            self.peak = self.current

    cg = Cgroup()

    def turn(instance, message):
        events.append("turn")
        if events.count("turn") > 1:  # a measured turn: it peaks at 40 MiB and settles back to 11 MiB
            cg.peak, cg.current = max(cg.peak, 40 * MiB), 11 * MiB

    (tmp_path / "v").mkdir()
    controller = SimpleNamespace(provision=lambda org, user: SimpleNamespace(id="i"), wake=lambda i: None,
                                 sandbox=lambda i: SimpleNamespace(cgroup=cg), turn=turn,
                                 volume_path=lambda i: tmp_path / "v", destroy=lambda i: events.append("destroy"))
    fp = footprint.measure(controller, turns=2)
    assert (fp.idle_bytes, fp.active_bytes) == (10 * MiB, 40 * MiB)
    assert events == ["turn", "reset", "turn", "turn", "destroy"]


def test_a_measured_budget_replaces_only_what_an_instance_determines():
    fp = footprint.Footprint("i", idle_bytes=30 * MiB + 1, active_bytes=40 * MiB, broker_bytes=3 * MiB, disk_bytes=MiB,
                             turns=1)
    base = capacity.REFERENCE_BUDGET
    measured = footprint.budget_from(fp, base, margin=1.5)
    assert (measured.idle_instance_mb, measured.active_instance_mb, measured.broker_mb) == (47, 60, 5)
    assert (measured.shared_memory_mb, measured.memory_headroom_mb, measured.volume_mb, measured.disk_headroom_mb) == \
        (base.shared_memory_mb, base.memory_headroom_mb, base.volume_mb, base.disk_headroom_mb)
    with pytest.raises(ValueError, match="margin"):
        footprint.budget_from(fp, base, margin=0.9)


def test_pairproof_measure_prints_the_footprint_and_a_budget(root, capsys):
    from acceptance.cli import main

    assert main(["measure", "--state-dir", str(root), "--turns", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"footprint_mb", "budget_in_force", "measured_budget"}
    assert out["footprint_mb"]["idle_instance_mb"] > 0
    capacity.Budget.of(out["measured_budget"])  # usable as a budget as it is
