"""``pairproof findings`` on made-up runs: the document says what the verdicts and their attachments say (run
ids, each case's outcome per target, the evidence lines), names the command that regenerates it, and refuses
runs it cannot use with one line (exit 2)."""

from __future__ import annotations

import functools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acceptance import cli
from acceptance.catalogue import load as load_catalogue
from acceptance.harness.pairing import Declared, Outcome, judge
from reports import findings, identity
from reports import verdict as verdict_report

CASES = ["LF-4", "TS-1", "TS-2", "TS-3", "MD-1", "MD-3", "MD-4", "NT-5"]


def _run(tmp_path, target: str, run: str, failing: dict[str, str], attachments: dict[str, tuple[str, str]] = None):
    """A results folder: every case of CASES with its refusal and controls, the refusals of ``failing`` failed
    with that message; ``attachments`` gives a refusal's attachment (name, text)."""
    catalogue = {k: c for k, c in load_catalogue().items() if k in CASES}
    outcomes = []
    for case_id, case in catalogue.items():
        message = failing.get(case_id, "")
        outcomes.append(Outcome(Declared(f"t.py::test_{case_id}", case_id, "refusal"),
                                outcome="failed" if message else "passed", proofs=1, message=message))
        outcomes += [Outcome(Declared(f"t.py::test_{case_id}_{role}", case_id, role), proofs=1) for role in case.controls]
    v = judge(outcomes, catalogue)
    v.update(run=run, target=target, pytest_exit=1 if failing else 0, judged=RECOMPUTE(target))
    for case in v["cases"]:  # (the suite's collection: every refusal of the case, as the plugin records it)
        case["expected_refusals"] = [r["test"] for r in case["refusals"]]
    folder = tmp_path / target
    verdict_report.write(folder / "verdict.json", v)
    allure = folder / "allure-results"
    allure.mkdir()
    for i, (case_id, (name, text)) in enumerate((attachments or {}).items()):
        (allure / f"{i}-attachment.txt").write_text(text)
        (allure / f"{i}-result.json").write_text(json.dumps({
            "start": 1796150000000, "labels": [{"name": "pairproof_nodeid", "value": f"t.py::test_{case_id}"}],
            "attachments": [{"name": name, "source": f"{i}-attachment.txt", "type": "text/plain"}]}))
    return folder


# What a verdict of this source names, per target: hermes's is a hash of its whole venv (a second or two), so
# taken once per module here, by the made-up verdicts and by findings/expect alike.
RECOMPUTE = functools.cache(identity.recompute)


@pytest.fixture(autouse=True)
def _recompute_once(monkeypatch):
    monkeypatch.setattr(identity, "recompute", RECOMPUTE)

@pytest.fixture
def runs(tmp_path):
    unguarded = _run(tmp_path, "hermes-unguarded", "u0000001",
                     {"TS-2": "assert {'add-mcp-server': [\"offered but not intended: ['mcp__mirror__notes_get']\"]} == {}",
                      "TS-3": "assert {'not-utf8': 'started'} == {}"},
                     {"TS-3": ("hermes on its managed file (org3-mona-0)",
                               "WARNING managed scope: failed to parse /data/managed/config.yaml: IGNORING this managed file")})
    guarded = _run(tmp_path, "hermes", "g0000002", {"MD-3": "assert 0 in [1, 1, 1]: the cap stopped none"})
    return unguarded, guarded


def _findings(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main(["findings", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_document_says_what_the_runs_say(tmp_path, capsys, runs):
    unguarded, guarded = runs
    out_file = tmp_path / "findings.md"
    code, out, _ = _findings(capsys, "--results", str(guarded), "--results", str(unguarded), "--out", str(out_file))
    assert code == 0, out
    text = out_file.read_text()
    assert f"pairproof findings --results {guarded} --results {unguarded} --out {out_file}" in text
    assert "run `u0000001`" in text and "run `g0000002`" in text and "2026-" in text
    # each finding: its case's outcome on each target, from the verdict
    assert "### TS-2 on `hermes-unguarded`: failed" in text and "### TS-2 on `hermes`: passed" in text
    assert "### MD-3 on `hermes`: failed" in text
    # the evidence: the failure message and hermes's own line, attached to the refusal
    assert "mcp__mirror__notes_get" in text
    assert "[hermes on its managed file (org3-mona-0)] WARNING managed scope: failed to parse" in text
    row = next(line for line in text.splitlines() if line.startswith("| A malformed managed file"))
    assert "yes: TS-3 failed" in row and "yes: TS-3 passed" in row
    row = next(line for line in text.splitlines() if line.startswith("| Background model calls"))
    assert "answered below: MD-3 passed, MD-4 passed" in row and "not yet: MD-3 failed" in row
    assert "**Not reproduced**" in text
    # compared with the shipped expectation (a stale path skipped this line silently after the re-layout)
    assert "`hermes-unguarded` against its expectation (`acceptance/targets/expectations/" in text
    assert "reproduced on hermes-unguarded: LF-4 yes, TS-1/TS-2 yes, TS-3 yes" in out


def test_regenerating_from_the_same_runs_gives_the_same_document(tmp_path, capsys, runs):
    out_file = tmp_path / "findings.md"
    argv = ["--results", str(runs[0]), "--results", str(runs[1]), "--out", str(out_file)]
    _findings(capsys, *argv)
    first = out_file.read_text()
    _findings(capsys, *argv)
    assert out_file.read_text() == first


def test_the_approval_prompt_is_reported_when_the_evidence_shows_it(tmp_path, capsys):
    unguarded = _run(tmp_path, "hermes-unguarded", "u1", {}, {"TS-1": ("run events", "event: approval.request cmd=rm")})
    out_file = tmp_path / "f.md"
    assert _findings(capsys, "--results", str(unguarded), "--out", str(out_file))[0] == 0
    assert "approval.request cmd=rm" in out_file.read_text() and "**Not reproduced**" not in out_file.read_text()


@pytest.mark.parametrize("problem", ["same-target", "other-target", "no-verdict", "no-folder", "out-folder-missing"])
def test_runs_it_cannot_use_are_bad_input(tmp_path, capsys, runs, problem):
    unguarded, guarded = runs
    out_file = tmp_path / "findings.md"
    argv = {"same-target": ["--results", str(unguarded), "--results", str(unguarded)],
            "other-target": ["--results", str(_run(tmp_path, "reference", "r1", {}))],
            "no-verdict": ["--results", str(tmp_path)],
            "no-folder": ["--results", str(tmp_path / "nope")],
            "out-folder-missing": ["--results", str(unguarded)]}[problem]
    out = tmp_path / "missing" / "f.md" if problem == "out-folder-missing" else out_file
    code, _, err = _findings(capsys, *argv, "--out", str(out))
    assert code == 2 and err.count("\n") == 1
    assert not out_file.exists()


def test_the_product_s_own_approvals_are_not_hermes_s_prompt(tmp_path, capsys):
    unguarded = _run(tmp_path, "hermes-unguarded", "u1", {}, {"TS-1": ("probe", "operator token on GET /api/approvals")})
    out_file = tmp_path / "f.md"
    assert _findings(capsys, "--results", str(unguarded), "--out", str(out_file))[0] == 0
    assert "**Not reproduced**" in out_file.read_text()


def test_background_calls_are_counted_from_md4_s_attachment(tmp_path, capsys):
    table = {"provider": {"org1/alice/turn": {"calls": 2}, "org1/bob/turn": {"calls": 3},
                          "org1/alice/memory_review": {"calls": 1}}}
    unguarded = _run(tmp_path, "hermes-unguarded", "u1", {}, {"MD-4": ("MD-4 records compared", json.dumps(table))})
    out_file = tmp_path / "f.md"
    assert _findings(capsys, "--results", str(unguarded), "--out", str(out_file))[0] == 0
    text = out_file.read_text()
    assert "`memory_review` 1, `turn` 5; a title call on the API path: none seen; a memory review: yes" in text


def test_ts2_settings_are_shown_beyond_hermes_s_own_surface(tmp_path, capsys):
    problems = {"add-mcp-server": ["offered but not intended: ['terminal', 'mcp__mirror__a', 'mcp__mirror__b']",
                                   "routes differ: [('terminal', 'builtin')]"],
                "drop-product-tool": ["intended but not offered: ['mcp__product__notes_list']"],
                "override-model": ["no model call of this turn reached the platform's provider: the model was changed"]}
    unguarded = _run(tmp_path, "hermes-unguarded", "u1", {"TS-2": "assert {...} == {}"},
                     {"TS-1": ("TS-1 tools offered and intended", json.dumps({"offered": ["terminal", "memory"]})),
                      "TS-2": ("TS-2 problems per adversarial setting", json.dumps(problems))})
    out_file = tmp_path / "f.md"
    assert _findings(capsys, "--results", str(unguarded), "--out", str(out_file))[0] == 0
    text = out_file.read_text()
    assert "add-mcp-server: added mcp__mirror__* (2)\n" in text
    assert "drop-product-tool: took away mcp__product__notes_list\n" in text
    assert "override-model: no model call of this turn reached the platform's provider" in text


def test_every_finding_names_catalogue_cases():
    catalogue = load_catalogue()
    assert all(set(f.cases) <= set(catalogue) for f in findings.FINDINGS)
    assert [f.key for f in findings.FINDINGS] == ["LF-4", "TS-1/TS-2", "TS-3", "MD-3/MD-4", "NT-5", "MD-1", "TS-4"]


def test_a_memory_review_metered_unattributed_is_answered_from_md4_s_background_calls(tmp_path, capsys):
    """hermes declares no purpose for its memory review: the proxy meters it unattributed, and MD-4 attaches the
    background calls it waited for (its profile's purposes); the answer says a review was seen, and how many."""
    table = {"provider": {"org3/ann/turn": {"calls": 2}, "org3/ann/unattributed": {"calls": 1},
                          "org4/cid/turn": {"calls": 2}, "org4/cid/unattributed": {"calls": 1}},
             "background calls at the provider, per user": {"ann": {"unattributed": 1}, "cid": {"unattributed": 1}}}
    unguarded = _run(tmp_path, "hermes-unguarded", "u1", {}, {"MD-4": ("MD-4 records compared", json.dumps(table))})
    out_file = tmp_path / "f.md"
    assert _findings(capsys, "--results", str(unguarded), "--out", str(out_file))[0] == 0
    assert "a memory review: yes, as MD-4's background calls: `unattributed` 2 at the provider" in out_file.read_text()
    table.pop("background calls at the provider, per user")
    again = _run(tmp_path / "again", "hermes-unguarded", "u2", {}, {"MD-4": ("MD-4 records compared", json.dumps(table))})
    assert _findings(capsys, "--results", str(again), "--out", str(out_file))[0] == 0
    assert "a memory review: none seen" in out_file.read_text()


def test_a_finding_is_closed_only_where_the_gate_passes_its_case(tmp_path, capsys):
    """Issue 27 item 5: TS-3 recorded passed on hermes, but its refusal carried no proof: the gate does not pass
    it, so the finding is not closed (it used to be read off the status string)."""
    unguarded = _run(tmp_path, "hermes-unguarded", "u0000001", {"TS-3": "assert {'not-utf8': 'started'} == {}"})
    guarded = _run(tmp_path, "hermes", "g0000002", {})
    path = guarded / "verdict.json"
    v = json.loads(path.read_text())
    next(c for c in v["cases"] if c["id"] == "TS-3")["refusals"][0]["proofs"] = 0
    path.write_text(json.dumps(v))
    out = tmp_path / "findings.md"
    code, _, err = _findings(capsys, "--results", str(unguarded), "--results", str(guarded), "--out", str(out))
    assert code == 0, err
    row = next(line for line in out.read_text().splitlines() if line.startswith("| A malformed managed file"))
    assert "not yet: TS-3 broken" in row, row


def test_a_finding_is_not_closed_on_a_run_of_another_source(tmp_path, capsys):
    """A hermes run whose verdict names another suite closes nothing (its cases passed on code that is not this)."""
    unguarded = _run(tmp_path, "hermes-unguarded", "u0000001", {"TS-3": "assert {'not-utf8': 'started'} == {}"})
    guarded = _run(tmp_path, "hermes", "g0000002", {})
    path = guarded / "verdict.json"
    v = json.loads(path.read_text())
    v["judged"]["suite"] = "0" * 64
    path.write_text(json.dumps(v))
    out = tmp_path / "findings.md"
    code, _, err = _findings(capsys, "--results", str(unguarded), "--results", str(guarded), "--out", str(out))
    assert code == 0, err
    row = next(line for line in out.read_text().splitlines() if line.startswith("| A malformed managed file"))
    assert "not known: the hermes run is not of this source (suite:" in row, row


def _outside_code(markdown: str) -> list[str]:
    """The lines of ``markdown`` outside fenced code blocks, by CommonMark's rule: a fence of N backticks is closed
    only by a line of at least N backticks and nothing else."""
    out, fence = [], 0
    for line in markdown.splitlines():
        ticks = len(line) - len(line.lstrip("`"))
        if fence == 0 and ticks >= 3:
            fence = ticks
        elif fence and ticks >= fence and not line.strip("`").strip():
            fence = 0
        elif fence == 0:
            out.append(line)
    return out


HOSTILE = "x\u2028## injected by a separator\n```\n# injected heading\n<script>alert(1)</script>\n````\n## injected too"


def test_agent_text_reaches_the_document_only_as_fenced_escaped_data(tmp_path, capsys):
    """Issue 28 item 9: a failure message and an attachment carrying backticks, newlines and HTML (a tool name, a
    reply): none of it opens a heading or raw HTML outside a code block or span, however many backticks it holds."""
    unguarded = _run(tmp_path, "hermes-unguarded", "u1",
                     {"TS-2": f"assert ['{HOSTILE}'] == []", "TS-3": f"reply: {HOSTILE}"},
                     {"TS-3": ("hermes on its managed file (org3-mona-0)", f"managed scope: IGNORING {HOSTILE}")})
    out_file = tmp_path / "f.md"
    assert _findings(capsys, "--results", str(unguarded), "--out", str(out_file))[0] == 0
    text = out_file.read_text()
    assert "injected" in text  # it is in the document, as data
    loose = [line for line in _outside_code(text) if "injected" in line or "<script>" in line]
    # Outside blocks, agent text appears only inside a one-line code span (the outcome in a heading).
    assert all(line.count("`" * 5) >= 2 and "\\n" in line for line in loose), loose
    assert not [line for line in _outside_code(text) if line.startswith(("# injected", "## injected"))]
    # (str.splitlines, which the document's last step uses, ends a line at U+2028 too: escaped, not passed on)
    assert "\u2028" not in text


@given(st.text())
def test_agent_text_can_neither_end_a_code_span_nor_close_a_fence(text):
    """Any text: as a code span it stays one line (str.splitlines, which the document's last step uses, ends a
    line at U+2028, U+0085 and more, not only at newlines), and as a fenced block no line inside closes it."""
    assert len(findings.inline(text).splitlines()) == 1
    lines = findings.fenced(text).splitlines()
    fence = lines[0]
    assert lines[-1] == fence and set(fence) == {"`"}
    assert not [line for line in lines[1:-1] if line.strip() and set(line.strip()) == {"`"} and len(line.strip()) >= len(fence)]
