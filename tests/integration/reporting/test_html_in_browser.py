"""The reports as a person sees them: headless Chromium (Debian's ``chromium``) renders the summary page
and shows the case matrix and a known case; it loads the single-file Allure report too."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from support.verdicts import sample_verdict as _verdict

from reports import allure_html, html

pytestmark = pytest.mark.slow
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--disable-quic"]


def _dom(tmp_path, page, budget_ms=3000) -> str:
    browser = shutil.which("chromium")
    assert browser, "Debian's chromium is not installed: run tools/setup-machine"
    result = subprocess.run([browser, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                             f"--virtual-time-budget={budget_ms}", "--dump-dom", page.as_uri()],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-1000:]
    return result.stdout


def test_summary_page_shows_the_matrix_and_a_known_case(tmp_path):
    (tmp_path / "verdict.json").write_text(json.dumps(_verdict()))
    dom = _dom(tmp_path, html.write(tmp_path))
    assert 'id="matrix"' in dom and "Case matrix" in dom
    assert 'id="FS-1"' in dom and "B and C cannot read A" in dom
    assert 'title="failed">RS-1<' in dom


def test_allure_report_loads(tmp_path):
    results = tmp_path / "allure-results"
    results.mkdir()
    (results / "x-result.json").write_text(json.dumps(
        {"uuid": "x", "name": "test_fs1_owner_finds_all_four", "status": "passed", "start": 1, "stop": 2}))
    message = allure_html.build(results, tmp_path / "allure-report.html")
    assert message.startswith("Allure HTML report:"), message
    dom = _dom(tmp_path, tmp_path / "allure-report.html", budget_ms=8000)
    assert "<title> pairproof </title>" in dom and "styles_tree" in dom
