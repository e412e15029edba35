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
        self._in = tag in ("td", "th", "span")

    def handle_data(self, data):
        if self._in and data.strip():
            self.cells.append(data.strip())


class Matrix(HTMLParser):
    """The case matrix as (boundary, case, status) triples: each case a span titled with its status, in a
    row headed by its boundary."""

    def __init__(self) -> None:
        super().__init__()
        self.entries: list[tuple[str, str, str]] = []
        self._section = self._tag = self._title = self._row = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "h2":
            self._section = attrs.get("id")
        if tag == "tr":
            self._row = None
        self._tag, self._title = tag, attrs.get("title")

    def handle_data(self, data):
        if self._section != "matrix" or not data.strip():
            return
        if self._tag == "th" and self._row is None:
            self._row = data.strip()
        elif self._tag == "span":
            self.entries.append((self._row, data.strip(), self._title))


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


def test_every_case_is_in_the_matrix_in_its_row_with_its_status(tmp_path):
    """Cases whose refusals name no principal pair, and cases with no refusal at all (not covered), are in
    their boundary's row too (they once left the lifecycle, recovery, operator, tool surface and capacity
    rows empty)."""
    from acceptance.catalogue import load
    from acceptance.harness.pairing import Declared, Outcome, judge

    outcomes = [Outcome(Declared("t::fs1", "FS-1", "refusal", "B->A"), proofs=1),
                Outcome(Declared("t::fs1c", "FS-1", "refusal", "C->A"), outcome="failed", proofs=1),
                Outcome(Declared("t::p", "FS-1", "P"), proofs=1), Outcome(Declared("t::x", "FS-1", "X"), proofs=1),
                Outcome(Declared("t::lf1", "LF-1", "refusal"), proofs=1),
                Outcome(Declared("t::lf1p", "LF-1", "P"), proofs=1),
                Outcome(Declared("t::cp1", "CP-1", "refusal"), proofs=1),
                *(Outcome(Declared(f"t::cp1{role}", "CP-1", role), proofs=1) for role in load()["CP-1"].controls),
                Outcome(Declared("t::ts1p", "TS-1", "P"))]
    verdict = judge(outcomes, load())
    verdict.update(run="0badc0de", target="reference", pytest_exit=1)
    (tmp_path / "verdict.json").write_text(json.dumps(verdict))
    page = Matrix()
    page.feed(html.write(tmp_path).read_text())
    shown = {(boundary, case): status for boundary, case, status in page.entries}
    assert {c["id"] for c in verdict["cases"]} == {case for _, case in shown}
    for c in verdict["cases"]:
        if c["id"] != "FS-1":
            assert shown[(c["boundary"], c["id"])] == c["status"], c["id"]
    assert [s for (b, case), s in shown.items() if case == "FS-1"] == ["failed"]
    assert ("filesystem", "FS-1", "passed") in page.entries and ("filesystem", "FS-1", "failed") in page.entries
    assert {("lifecycle", "LF-1", "passed"), ("capacity", "CP-1", "passed"), ("tool surface", "TS-1", "broken"),
            ("operator", "OP-1", "not covered"), ("recovery", "LF-4", "not covered")} <= set(page.entries)


def test_allure_is_found_in_the_machines_tools_folder(tmp_path, monkeypatch):
    """A git worktree has no .tools of its own: Allure is found under PAIRPROOF_TOOLS, as the agents' venvs are."""
    tool = tmp_path / "tools" / "allure" / "node_modules" / ".bin" / "allure"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.delenv("PAIRPROOF_ALLURE", raising=False)
    monkeypatch.setenv("PAIRPROOF_TOOLS", str(tmp_path / "tools"))
    monkeypatch.setattr(allure_html, "LOCAL", tmp_path / "none")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(allure_html.shutil, "which", lambda _: None)
    assert allure_html.find() == str(tool)
    monkeypatch.delenv("PAIRPROOF_TOOLS")
    assert allure_html.find() is None
