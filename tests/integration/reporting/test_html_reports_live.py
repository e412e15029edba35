"""The summary page shows the case matrix, the pairing and the mutant matrix; the Allure HTML report is
one file (built by the npm package where it is installed, explained where it is not).

The part of tests/unit/test_html_reports.py that the unit tier cannot hold: it runs Allure's command line."""

from __future__ import annotations

import json

from reports import allure_html


def test_allure_report_is_one_file_or_says_why_not(tmp_path, monkeypatch):
    results = tmp_path / "allure-results"
    results.mkdir()
    (results / "x-result.json").write_text(json.dumps({"uuid": "x", "name": "t", "status": "passed", "start": 1, "stop": 2}))
    message = allure_html.build(results, tmp_path / "allure-report.html")
    if allure_html.find() is None:
        assert "skipped" in message and "npm install" in message
    else:
        assert message.startswith("Allure HTML report:"), message
        assert (tmp_path / "allure-report.html").stat().st_size > 10_000
    monkeypatch.setenv("PAIRPROOF_ALLURE", "/nonexistent")
    monkeypatch.setenv("PAIRPROOF_TOOLS", str(tmp_path / "no-tools"))
    monkeypatch.setattr(allure_html, "LOCAL", tmp_path / "none")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(allure_html.shutil, "which", lambda _: None)
    assert "skipped" in allure_html.build(results, tmp_path / "other.html")
