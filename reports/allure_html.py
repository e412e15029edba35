"""The Allure 3 HTML report as one file (``reports/allure-report.html``), built by the npm package
``allure`` on the machine's Node.js (no Java). ``tools/setup-machine`` installs it under ``.tools/``;
``PAIRPROOF_ALLURE`` may name another ``allure`` executable."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

LOCAL = Path(__file__).resolve().parent.parent / ".tools" / "allure" / "node_modules" / ".bin" / "allure"


def find() -> str | None:
    here = Path.cwd() / ".tools" / "allure" / "node_modules" / ".bin" / "allure"
    # PAIRPROOF_TOOLS: the machine's tools folder when it is not the checkout's .tools (a git worktree's runs)
    tools = os.environ.get("PAIRPROOF_TOOLS")
    shared = str(Path(tools) / "allure" / "node_modules" / ".bin" / "allure") if tools else None
    for candidate in (os.environ.get("PAIRPROOF_ALLURE"), str(LOCAL), str(here), shared, shutil.which("allure")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def build(results: Path, target: Path) -> str:
    """Build the single-file report; return a one-line account of what happened."""
    allure = find()
    if allure is None:
        return ("Allure HTML report skipped: the npm package `allure` is not installed "
                "(run tools/setup-machine, or `npm install --prefix .tools/allure allure@3`)")
    # Allure's scratch lives beside the page it builds (in a run's staged report set): a run killed while Allure
    # works leaves it in that staged set, which the next publish sweeps, never in /tmp.
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".allure-work-", dir=target.parent) as work:
        config = Path(work) / "allurerc.json"
        config.write_text(json.dumps({"name": "pairproof", "output": str(Path(work) / "out"),
                                      "plugins": {"awesome": {"options": {"singleFile": True, "reportName": "pairproof"}}}}))
        proc = subprocess.run([allure, "generate", "--config", str(config), str(results)], capture_output=True,
                              text=True, timeout=600, env={**os.environ, "NO_COLOR": "1"})
        built = Path(work) / "out" / "index.html"
        if proc.returncode != 0 or not built.exists():
            return f"Allure HTML report failed (exit {proc.returncode}): {(proc.stderr or proc.stdout)[-300:]}"
        shutil.copyfile(built, target)
    return f"Allure HTML report: {target}"


def quality_gate(results: Path, *, min_tests: int, success_rate: float = 1.0) -> tuple[bool, str]:
    """Allure's own quality gate over the results (minTestsCount, successRate): (passed, what it said)."""
    allure = find()
    if allure is None:
        return False, ("Allure's quality gate could not run: the npm package `allure` is not installed "
                       "(run tools/setup-machine)")
    # Allure's CLI refuses "1.0" ("can't be safely represented"): give it 1, or 0.95.
    rate = format(success_rate, "g")
    proc = subprocess.run([allure, "quality-gate", "--min-tests-count", str(min_tests), "--success-rate", rate,
                           str(results)], capture_output=True, text=True, timeout=600, env={**os.environ, "NO_COLOR": "1"})
    lines = [line.strip() for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    said = " ".join(line for line in lines if "⨯" in line or "failed" in line or "Error" in line)
    if proc.returncode == 0:
        return True, ""
    return False, said or f"exit {proc.returncode}: {' '.join(lines)[:300]}"
