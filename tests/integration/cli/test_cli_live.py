"""Bad input gets one line naming the problem and the fix, exit code 2, no traceback, no change.

The part of tests/unit/test_cli.py that the unit tier cannot hold: it runs the console script as a process."""

from __future__ import annotations

import subprocess
import sys


def test_console_script_exit_code_is_2_without_traceback(tmp_path):
    result = subprocess.run([sys.executable, "-m", "acceptance.cli", "qualify", "--target", "nosuch"],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
