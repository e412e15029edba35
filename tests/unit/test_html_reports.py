"""The summary page shows the case matrix, the pairing and the mutant matrix; the Allure HTML report is
one file (built by the npm package where it is installed, explained where it is not)."""

from __future__ import annotations

import json
from html.parser import HTMLParser

from support.verdicts import sample_verdict as _verdict

from reports import allure_html, html


class Tables(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids, self.cells, self._in = set(), [], False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        self._in = tag in ("td", "th")

    def handle_data(self, data):
        if self._in and data.strip():
            self.cells.append(data.strip())


def test_summary_page_has_the_matrix_pairing_and_mutants(tmp_path):
    (tmp_path / "verdict.json").write_text(json.dumps(_verdict()))
    (tmp_path / "mutants.json").write_text(json.dumps({
        "summary": "1/1", "mutants": [{"name": "shared-volume", "status": "killed"}],
        "matrix": {"shared-volume": {"FS-1": "failed", "RS-1": "passed"}}}))
    page = Tables()
    page.feed(html.write(tmp_path).read_text())
    assert {"matrix", "pairing", "mutants", "FS-1", "RS-1"} <= page.ids
    assert {"B->A", "filesystem", "FS-1", "shared-volume", "kill"} <= set(page.cells)
    assert "http" not in (tmp_path / "summary.html").read_text().replace("charset", "")


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
    monkeypatch.setattr(allure_html, "LOCAL", tmp_path / "none")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(allure_html.shutil, "which", lambda _: None)
    assert "skipped" in allure_html.build(results, tmp_path / "other.html")
