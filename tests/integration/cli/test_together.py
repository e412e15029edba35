"""tools/together.py: commands side by side, each one's output printed whole after all ended, the largest exit
code; SIGTERM passed on to every command still running, exit 130."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

TOOL = Path(__file__).resolve().parents[3] / "tools" / "together.py"


def _run(*commands: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *commands], capture_output=True, text=True, timeout=60)


def test_outputs_come_whole_in_order_and_the_largest_exit_code_wins():
    done = _run("sh -c 'sleep 0.5; echo first; exit 3'", "sh -c 'echo second'")
    assert done.returncode == 3
    _, one, two = done.stdout.split("\n===== together: ")
    assert one.startswith("sh -c 'sleep 0.5") and ": exit 3 in " in one and one.endswith("=====\nfirst\n")
    assert two.startswith("sh -c 'echo second'") and ": exit 0 in " in two and two.endswith("=====\nsecond\n")


def test_bad_input_is_one_line_and_exit_2():
    done = _run()
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "each command as one argument" in done.stderr
    assert _run("nosuch-command-xyz").returncode == 2


def test_a_sigterm_reaches_every_command_and_the_run_exits_130(tmp_path):
    marks = [tmp_path / "a", tmp_path / "b"]
    script = "trap 'echo stopped > {0}; exit 143' TERM; : > {0}.up; while :; do sleep 0.05; done"
    proc = subprocess.Popen([sys.executable, str(TOOL), *(f"sh -c \"{script.format(m)}\"" for m in marks)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    end = time.monotonic() + 30
    while not all(Path(f"{m}.up").exists() for m in marks):
        assert time.monotonic() < end, "the commands did not start"
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert [m.read_text().strip() for m in marks] == ["stopped", "stopped"]
    assert out.count(": exit 143 in ") == 2
