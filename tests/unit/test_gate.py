"""The release gate against crafted results folders and mutant reports: each gets the right exit code and
a message naming the reason.

Each hollow pass of issue 12 is shown twice: the gate as it was (``support.gate_before_issue12``) passes
the crafted input, the gate now refuses it and says why.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from support import gate_before_issue12 as old_gate

from acceptance import cli
from acceptance.catalogue import load
from acceptance.harness.pairing import Declared, Outcome, judge
from mutants import catalogue as mutant_catalogue
from mutants import runner
from reports import gate, identity
from reports import verdict as verdict_report

IDS = ["RS-1", "FS-3"]
RUN = "0badc0de"


def _judged(target: str = "reference") -> dict:
    """What a verdict of ``target`` made from this source names (``reports/identity.py``), as the gate recomputes it."""
    from acceptance import targets
    from acceptance.targets.profiles import load as load_profile

    return identity.of_run(target, targets.driver_module(target), load_profile(targets.default_profile(target)), None)




def _o(case, role, outcome="passed", proofs=1, n=""):
    return Outcome(Declared(f"t.py::{case}-{role}{n}", case, role), outcome=outcome, proofs=proofs)


ALL_PASSED = [_o("RS-1", "refusal"), _o("RS-1", "P"), _o("FS-3", "refusal"), _o("FS-3", "P"), _o("FS-3", "X")]


def _verdict(outcomes, *, pytest_exit=0, ids=IDS, collected=None) -> dict:
    """The verdict the plugin would write: judged by the pairing rules, each case listing the refusals the
    suite collected for it (by default, those that ran)."""
    v = judge(outcomes, {k: c for k, c in load().items() if k in ids})
    v.update(run=RUN, target="reference", pytest_exit=pytest_exit, judged=_judged())
    refusals = collected if collected is not None else [o.declared for o in outcomes if o.declared.role == "refusal"]
    for case in v["cases"]:
        case["expected_refusals"] = [d.nodeid for d in refusals if d.case == case["id"]]
    return v


def _write(folder, outcomes=ALL_PASSED, *, edit: Callable[[dict], object] | None = None, **kwargs):
    v = _verdict(outcomes, **kwargs)
    if edit is not None:
        edit(v)
    verdict_report.write(folder / "verdict.json", v)
    return folder


def _case(v: dict, case_id: str) -> dict:
    return next(c for c in v["cases"] if c["id"] == case_id)


def _gate(monkeypatch, capsys, folder, *extra):
    """``pairproof gate`` as a pipeline runs it, on the catalogue's cases IDS, without Allure."""
    original = gate.judge
    monkeypatch.setattr(gate, "judge", lambda results, mutants=None, judged=None: original(results, mutants, IDS,
                                                                                          allure=False, judged=judged))
    try:
        code = cli.main(["gate", "--target", "reference", "--results", str(folder), *extra])
    finally:
        monkeypatch.setattr(gate, "judge", original)
    return code, capsys.readouterr().out


def test_all_passed(tmp_path, monkeypatch, capsys):
    code, out = _gate(monkeypatch, capsys, _write(tmp_path))
    assert code == 0 and "gate: PASSED" in out


@pytest.mark.parametrize("change,expected", [
    (lambda o: [_o("RS-1", "refusal", "failed")] + o[1:], "RS-1: failed"),
    (lambda o: [o[0], _o("RS-1", "P", "failed")] + o[2:], "RS-1: broken: control P"),
    (lambda o: [_o("RS-1", "refusal", "skipped")] + o[1:], "RS-1: skipped"),
    (lambda o: o[2:], "RS-1: not covered"),
    (lambda o: [_o("RS-1", "refusal", proofs=0)] + o[1:], "RS-1: broken: refusal t.py::RS-1-refusal broken: no proof"),
], ids=["failed-case", "control-failed", "skipped-refusal", "missing-case", "no-proof"])
def test_bad_results_fail_with_the_reason(tmp_path, monkeypatch, capsys, change, expected):
    code, out = _gate(monkeypatch, capsys, _write(tmp_path, change(list(ALL_PASSED))))
    assert code == 1
    assert expected in out


def test_zero_tests(tmp_path, monkeypatch, capsys):
    code, out = _gate(monkeypatch, capsys, _write(tmp_path, []))
    assert code == 1 and "no case ran" in out


def test_a_run_stopped_by_a_usage_error_leaves_no_verdict_and_fails(tmp_path, monkeypatch, capsys):
    code, out = _gate(monkeypatch, capsys, tmp_path)
    assert code == 1 and "no verdict" in out


def test_an_interrupted_or_usage_error_exit_fails_even_if_cases_passed(tmp_path, monkeypatch, capsys):
    code, out = _gate(monkeypatch, capsys, _write(tmp_path, pytest_exit=4))
    assert code == 1 and "exit status 4" in out


def test_a_damaged_verdict_fails(tmp_path, monkeypatch, capsys):
    (tmp_path / "verdict.json").write_text('{"schema": "pairproof.verdict/1"}')
    code, out = _gate(monkeypatch, capsys, tmp_path)
    assert code == 1 and "does not follow the schema" in out


def test_a_folder_named_verdict_json_fails_without_a_traceback(tmp_path, monkeypatch, capsys):
    (tmp_path / "verdict.json").mkdir()
    code, out = _gate(monkeypatch, capsys, tmp_path)
    assert code == 1 and "cannot be read" in out


def test_junit_has_one_case_per_catalogue_case(tmp_path):
    import xml.etree.ElementTree as ET

    _write(tmp_path, [_o("RS-1", "refusal", "failed"), _o("RS-1", "P")])
    suite = ET.parse(tmp_path / "junit.xml").getroot()
    assert suite.get("tests") == "2" and suite.get("failures") == "1" and suite.get("skipped") == "1"


# -- finding 19: the gate recomputes each case from its evidence --------------------------------------


def _control_failed_but_case_says_passed(v):
    test = _case(v, "FS-3")["controls"]["X"]["tests"][0]
    test["status"] = "failed"


def _no_proof_but_refusal_says_passed(v):
    _case(v, "RS-1")["refusals"][0]["proofs"] = 0


def _control_with_no_proof_says_passed(v):
    """Issue 27 item 13: a control that passed over nothing it proved it observed (an empty set, say)."""
    _case(v, "FS-3")["controls"]["P"]["tests"][0]["proofs"] = 0


def _controls_only_case_says_passed(v):
    _case(v, "FS-3")["refusals"] = []


def _control_dropped_from_the_verdict(v):
    del _case(v, "FS-3")["controls"]["X"]


def _refusal_broken_but_case_says_passed(v):
    _case(v, "RS-1")["refusals"][0].update(status="broken", reason="control P (x) did not run")


def _verdict_says_failed(v):
    v.update(status="failed", problems=["RS-1: the plugin's own judgement failed"])


def _problems_listed(v):
    v["problems"] = ["no case ran: a run that selects zero cases proves nothing"]


def _expected_refusals_absent(v):
    del _case(v, "RS-1")["expected_refusals"]


def _a_case_from_another_catalogue(v):
    v["cases"].append(dict(_case(v, "RS-1"), id="ZZ-9"))


HOLLOW_VERDICTS = [
    (_control_failed_but_case_says_passed, "FS-3: broken: control X (", "failed: t.py::FS-3-X"),
    (_no_proof_but_refusal_says_passed, "RS-1: broken: refusal t.py::RS-1-refusal passed with no proof of execution", ""),
    (_control_with_no_proof_says_passed, "FS-3: broken: control P (", "t.py::FS-3-P passed with no proof of execution"),
    (_controls_only_case_says_passed, "FS-3: not covered: no refusal ran (its controls alone prove nothing", ""),
    (_control_dropped_from_the_verdict, "FS-3: broken: control X (", "is not in the verdict"),
    (_refusal_broken_but_case_says_passed, "RS-1: broken: refusal t.py::RS-1-refusal broken: control P (x) did not run", ""),
    (_verdict_says_failed, "verdict.json says the run failed", "the plugin's own judgement failed"),
    (_problems_listed, "verdict.json lists 1 problems: no case ran", ""),
    (_expected_refusals_absent, "RS-1: not covered: the verdict does not list the refusals the suite collected", ""),
    (_a_case_from_another_catalogue, "verdict.json judges ZZ-9, not in acceptance/catalogue.toml", ""),
]


@pytest.mark.parametrize("edit,reason,also", HOLLOW_VERDICTS, ids=[e[0].__name__.strip("_") for e in HOLLOW_VERDICTS])
def test_the_gate_judges_the_evidence_not_the_status_a_verdict_gives_itself(tmp_path, monkeypatch, capsys, edit,
                                                                            reason, also):
    """A verdict whose statuses say passed while its evidence does not: the old gate passed it."""
    folder = _write(tmp_path, edit=edit)
    assert old_gate.judge(folder, None, IDS, allure=False).passed
    code, out = _gate(monkeypatch, capsys, folder)
    assert code == 1 and reason in out and also in out, out


def test_a_refusal_the_suite_collected_but_did_not_run_leaves_its_case_not_covered(tmp_path, monkeypatch, capsys):
    """RS-1 has two refusal variants; a selection (-k) ran one. A verdict that passes the case on the one
    that ran (as the pairing rules did before they were told what the suite collected) passed the old gate;
    the gate fails it on the variant that did not run."""
    collected = [_o("RS-1", "refusal").declared, _o("RS-1", "refusal", n="-swap").declared, _o("FS-3", "refusal").declared]
    folder = _write(tmp_path, collected=collected)
    assert json.loads((folder / "verdict.json").read_text())["status"] == "passed"
    assert old_gate.judge(folder, None, IDS, allure=False).passed
    code, out = _gate(monkeypatch, capsys, folder)
    assert code == 1 and "RS-1: not covered: refusal t.py::RS-1-refusal-swap was not run" in out, out


def test_a_refusal_outside_the_collected_ones_contradicts_the_verdict(tmp_path, monkeypatch, capsys):
    collected = [_o("FS-3", "refusal").declared]
    code, out = _gate(monkeypatch, capsys, _write(tmp_path, collected=collected))
    assert code == 1 and "refusal t.py::RS-1-refusal is not among the refusals the suite collected" in out, out


def test_a_failed_case_recorded_passed_in_a_passing_run_is_caught_from_its_refusal(tmp_path):
    def edit(v):
        _case(v, "RS-1").update(status="passed")
        v.update(status="passed", problems=[], counts={"passed": 2})
    folder = _write(tmp_path, [_o("RS-1", "refusal", "failed")] + ALL_PASSED[1:], edit=edit)
    assert old_gate.judge(folder, None, IDS, allure=False).passed
    outcome = gate.judge(folder, None, IDS, allure=False, judged=_judged())
    assert not outcome.passed and any(r.startswith("RS-1: failed: refusal t.py::RS-1-refusal failed") for r in outcome.reasons)


def test_a_passing_case_recorded_failed_is_not_passed_either(tmp_path):
    """The other way round: evidence that passes under a status that does not is a verdict that
    contradicts itself, refused too."""
    folder = _write(tmp_path, edit=lambda v: _case(v, "RS-1").update(status="broken"))
    outcome = gate.judge(folder, None, IDS, allure=False, judged=_judged())
    assert not outcome.passed and any("RS-1: broken: the verdict records it broken" in r for r in outcome.reasons)


def test_a_case_judged_broken_on_the_whole_says_why(tmp_path):
    """A case-level judgement the verdict keeps no per-test evidence for (its tests judged two platform
    runs): the gate takes the negative on its word and gives the verdict's reason."""
    why = "its tests judged different platform runs ['1', '2']"
    folder = _write(tmp_path, edit=lambda v: _case(v, "RS-1").update(status="broken", reason=why))
    outcome = gate.judge(folder, None, IDS, allure=False, judged=_judged())
    assert f"RS-1: broken: the verdict records it broken: {why}" in outcome.reasons


def test_every_catalogue_case_must_be_present(tmp_path):
    folder = _write(tmp_path, edit=lambda v: v["cases"].remove(_case(v, "FS-3")))
    outcome = gate.judge(folder, None, IDS, allure=False, judged=_judged())
    assert "FS-3: not covered: not in the verdict (every catalogue case must run)" in outcome.reasons


def test_a_real_verdict_of_the_whole_catalogue_passes(tmp_path):
    """The gate is not simply harder to please: a whole, honest verdict of the catalogue passes."""
    cases = load()
    outcomes = [o for cid, case in cases.items()
                for o in [_o(cid, "refusal"), *(_o(cid, role) for role in case.controls)]]
    folder = tmp_path
    verdict_report.write(folder / "verdict.json", _verdict(outcomes, ids=list(cases)))
    outcome = gate.judge(folder, None, None, allure=False, judged=_judged())
    assert outcome.passed, outcome.reasons
    assert len(outcome.lines) == len(cases)


# -- finding 20: the mutant report is tied to the catalogue and the source ---------------------------


def _mutant_report(target: str = "reference", **changes) -> dict:
    """The report a whole, honest ``pairproof mutants [--target T]`` run on this source writes: every
    catalogued mutant of the target's catalogue killed by the first case it names."""
    path = mutant_catalogue.catalogue_path(target)
    catalogued = mutant_catalogue.load(path)
    report = {
        "schema": runner.SCHEMA, "status": "passed", "seconds": 1.0, "target": target,
        "catalogue": mutant_catalogue.display(path), "image": None, "source": runner.source_digest(catalogue=path),
        "partial": False, "suite": None, "catalogued": [m.name for m in catalogued],
        "summary": f"{len(catalogued)}/{len(catalogued)} killed by an expected case",
        "control": {"exit": 0, "seconds": 1.0, "statuses": {c: "passed" for c in load()}, "tail": ""},
        "mutants": [{"name": m.name, "expected": list(m.kills), "status": "killed", "phase": "expected",
                     "killed_by": [m.kills[0]], "seconds": 1.0, "detail": ""} for m in catalogued],
        "matrix": {m.name: {m.kills[0]: "failed"} for m in catalogued},
    }
    report.update(changes)
    return report


def _with_mutants(tmp_path, report: dict, target: str = "reference"):
    folder = _write(tmp_path, edit=lambda v: v.update(target=target))
    (folder / "mutants.json").write_text(json.dumps(report))
    return folder, folder / "mutants.json"


def test_a_whole_mutant_report_of_this_source_passes(tmp_path, monkeypatch, capsys):
    folder, path = _with_mutants(tmp_path, _mutant_report())
    code, out = _gate(monkeypatch, capsys, folder, "--mutants", str(path))
    assert code == 0, out


def _only_one(report):
    first = report["mutants"][0]
    report.update(partial=True, mutants=[first], matrix={first["name"]: report["matrix"][first["name"]]})


def _one_left_out(report):
    gone = report["mutants"].pop()
    del report["matrix"][gone["name"]]


def _killed_by_another_case(report):
    m = report["mutants"][0]
    m["killed_by"] = ["ZZ-1"]
    report["matrix"][m["name"]] = {"ZZ-1": "failed"}


def _killed_in_name_only(report):
    report["matrix"][report["mutants"][0]["name"]] = {}


def _other_runtime(report):
    report["source"] = dict(report["source"], runtime="0" * 64)


def _other_catalogue(report):
    report["source"] = dict(report["source"], mutant_catalogue="0" * 64)


def _other_suite(report):
    report["source"] = dict(report["source"], suite="0" * 64)


def _no_source(report):
    del report["source"]


def _judged_by_a_useless_suite(report):
    report["suite"] = "/tmp/useless"


def _control_exit_false(report):
    report["control"]["exit"] = False


def _control_left_a_case_unpassed(report):
    report["control"]["statuses"]["RS-1"] = "broken"


FIRST = mutant_catalogue.load()[0]
LAST = mutant_catalogue.load()[-1]
HOLLOW_MUTANTS = [
    (_only_one, "is a partial report (--only, or a chosen list of mutants)"),
    (_one_left_out, f"1 catalogued mutants not in the report: {LAST.name}: every catalogued mutant must be run"),
    (_killed_by_another_case, f"mutant {FIRST.name}: killed: not killed by one of its named cases "
                              f"({', '.join(FIRST.kills)}); failed: ZZ-1"),
    (_killed_in_name_only, f"mutant {FIRST.name}: killed: not killed by one of its named cases"),
    (_other_runtime, "judged another runtime (sha256 000000000000, this source is"),
    (_other_catalogue, "judged another mutant catalogue"),
    (_other_suite, "judged another suite"),
    (_no_source, "judged another runtime (sha256 None"),
    (_judged_by_a_useless_suite, "is a partial report (judged by the suite in /tmp/useless)"),
    (_control_exit_false, "mutants: the unmodified control did not pass (exit False)"),
    (_control_left_a_case_unpassed, "mutants: the unmodified control did not pass RS-1"),
]


@pytest.mark.parametrize("edit,reason", HOLLOW_MUTANTS, ids=[e[0].__name__.strip("_") for e in HOLLOW_MUTANTS])
def test_a_mutant_report_that_does_not_prove_this_source_fails(tmp_path, monkeypatch, capsys, edit, reason):
    """Each of these the old gate passed: it read the report's own statuses and nothing else."""
    report = _mutant_report()
    edit(report)
    folder, path = _with_mutants(tmp_path, report)
    assert old_gate.judge(folder, path, IDS, allure=False).passed
    code, out = _gate(monkeypatch, capsys, folder, "--mutants", str(path))
    assert code == 1 and reason in out, out


def test_a_surviving_mutant_or_failed_control_still_fails(tmp_path, monkeypatch, capsys):
    report = _mutant_report()
    report["mutants"][1].update(status="survived", killed_by=[])
    report["control"]["exit"] = 1
    folder, path = _with_mutants(tmp_path, report)
    code, out = _gate(monkeypatch, capsys, folder, "--mutants", str(path))
    second = mutant_catalogue.load()[1].name
    assert code == 1 and f"mutant {second}: survived" in out and "control did not pass (exit 1)" in out, out


def test_a_mutant_report_of_the_old_runner_is_refused(tmp_path, monkeypatch, capsys):
    folder, path = _with_mutants(tmp_path, {"control": {"exit": 0}, "summary": "x", "mutants": []})
    code, out = _gate(monkeypatch, capsys, folder, "--mutants", str(path))
    assert code == 1 and f"is not a {runner.SCHEMA} report (schema None)" in out, out


def test_a_damaged_or_missing_mutant_report_is_bad_input_named_first(tmp_path, capsys):
    """Issue 18: a --mutants file that is not there, or not JSON, is bad input: exit 2 and one line naming it,
    before anything is judged (the library's judge still refuses it, for callers that skip the CLI)."""
    folder = _write(tmp_path)
    (folder / "mutants.json").write_text("{")
    for path, says in ((folder / "mutants.json", "not JSON"), (folder / "nothing.json", "no such file")):
        code = cli.main(["gate", "--target", "reference", "--results", str(folder), "--mutants", str(path)])
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        assert (code, len(lines)) == (2, 1) and str(path) in lines[0] and says in lines[0], captured.err
        assert captured.out == ""
        assert any("is not JSON" in r or "no mutant report at" in r for r in gate.judge_mutants(path).reasons)


# -- review of issue 12: what the gate still took on the verdict's word -------------------------------


def _po(case, role, platform_run, n=""):
    o = _o(case, role, n=n)
    o.platform_run = platform_run
    return o


def test_a_case_judged_on_two_platform_runs_fails_the_gate_even_if_the_verdict_says_passed(tmp_path, monkeypatch, capsys):
    """The verdict called a case whose refusal and control judged two platform runs broken, but kept no
    evidence of it: the gate took 'passed' on its word. Now each test's platform run is in the verdict and
    the gate checks a case's tests judged one."""
    split = [_po("RS-1", "refusal", "aaaa0001"), _po("RS-1", "P", "bbbb0002"),
             _po("FS-3", "refusal", "aaaa0001"), _po("FS-3", "P", "aaaa0001"), _po("FS-3", "X", "aaaa0001")]

    def hide(v):  # what a verdict that judged it passed (or was edited to) says
        c = _case(v, "RS-1")
        c["status"], c["reason"] = "passed", ""
        v["problems"], v["status"] = [], "passed"
    code, out = _gate(monkeypatch, capsys, _write(tmp_path, split, edit=hide))
    assert code == 1 and "RS-1: broken" in out and "platform runs" in out
    one = [_po(o.declared.case, o.declared.role, "aaaa0001") for o in split]
    code, out = _gate(monkeypatch, capsys, _write(tmp_path, one))
    assert code == 0, out


@pytest.mark.parametrize("evidence", [
    pytest.param({"kind": "scan", "files": 10, "bytes": 100, "truncated": 0, "missing_own": ["tok (file /tmp/x)"]},
                 id="missed-own-canary"),
    pytest.param({"kind": "dump", "files": 10, "bytes": 100, "truncated": 3, "missing_own": []}, id="truncated"),
    pytest.param({"kind": "scan", "files": 0, "bytes": 0, "truncated": 0, "missing_own": []}, id="read-nothing"),
])
def test_a_refusal_whose_own_evidence_shows_a_scan_that_did_not_look_fails_the_gate(tmp_path, monkeypatch, capsys,
                                                                                     evidence):
    """The verdict keeps what each scan read; the gate took 'passed' and 'proofs' on their word even when
    that record shows a scan that did not prove it looked. It now judges the scan records too."""
    def blind(v):
        _case(v, "RS-1")["refusals"][0]["evidence"] = [evidence]
    code, out = _gate(monkeypatch, capsys, _write(tmp_path, edit=blind))
    assert code == 1 and "RS-1: broken" in out and "did not prove it looked" in out


# -- a target's mutant report is judged against that target's catalogue (issue 15) --------------------


def test_a_whole_docker_mutant_report_passes_beside_docker_results(tmp_path, monkeypatch, capsys):
    folder, path = _with_mutants(tmp_path, _mutant_report("docker"), target="docker")
    code, out = _gate(monkeypatch, capsys, folder, "--mutants", str(path))
    assert code == 0 and "mutants (docker, mutants/docker.toml)" in out, out


def _docker_report_naming_the_reference_catalogue(report):
    report["catalogue"] = "mutants/catalogue.toml"


def _docker_report_of_reference_mutants(report):
    reference = _mutant_report()
    report.update({k: reference[k] for k in ("catalogue", "source", "catalogued", "mutants", "matrix")})


def _docker_report_over_another_docker_catalogue(report):
    report["source"] = dict(report["source"], mutant_catalogue=runner.source_digest()["mutant_catalogue"])


def _unknown_target(report):
    report["target"] = "nosuch"


def _no_target(report):
    del report["target"]


MISMATCHED = [
    (_docker_report_naming_the_reference_catalogue, "docker", "judged the catalogue 'mutants/catalogue.toml', but "
                                                              "target docker's is mutants/docker.toml"),
    (_docker_report_of_reference_mutants, "docker", "but target docker's is mutants/docker.toml"),
    (_docker_report_over_another_docker_catalogue, "docker", "judged another mutant catalogue"),
    (_unknown_target, "docker", "names target 'nosuch', which has no mutant catalogue"),
    (_no_target, "reference", "names target None, which has no mutant catalogue"),
    (lambda report: None, "reference", "judged target docker, the results target reference"),
]


@pytest.mark.parametrize("edit,results_target,reason", MISMATCHED,
                         ids=["reference-catalogue", "reference-mutants", "catalogue-digest", "unknown-target",
                              "no-target", "other-target"])
def test_a_docker_mutant_report_is_judged_against_the_docker_catalogue(tmp_path, monkeypatch, capsys, edit,
                                                                        results_target, reason):
    """A docker report naming the reference catalogue, carrying its mutants, or hashing another catalogue, a
    report naming no target or one without a catalogue, and a docker report beside reference results: refused."""
    report = _mutant_report("docker")
    edit(report)
    folder, path = _with_mutants(tmp_path, report, target=results_target)
    code, out = _gate(monkeypatch, capsys, folder, "--mutants", str(path))
    assert code == 1 and reason in out, out


# -- issue 27 item 1: a verdict is tied to what it judged --------------------------------------------


@pytest.mark.parametrize("part", [p for p in identity.PARTS if p != "target"])
def test_a_verdict_of_another_source_profile_or_image_is_refused_part_by_part(tmp_path, monkeypatch, capsys, part):
    """Issue 27 item 1: a verdict whose hash of one part (runtime, suite, catalogue, driver, profile, image)
    differs from what the gate recomputes fails the gate naming that part; the gate as it was passed it."""
    def other(v: dict) -> None:
        v["judged"][part] = "0" * 64 if part != "image" else "sha256:" + "0" * 64

    folder = _write(tmp_path, edit=other)
    assert old_gate.judge(folder, None, IDS, allure=False).passed
    code, out = _gate(monkeypatch, capsys, folder)
    assert code == 1 and f"is not a verdict of what this gate judges (target reference): {part}: the verdict judged" in out, out
    assert out.count("is not a verdict of what this gate judges") == 1, out


def test_a_verdict_of_another_target_or_with_no_identity_is_refused(tmp_path, monkeypatch, capsys):
    """The gate requires --target and refuses a reference verdict gated as hermes (target and driver and profile
    differ), and a verdict that names nothing of what it judged (an older pairproof's, or edited)."""
    folder = _write(tmp_path)
    code, out = _gate(monkeypatch, capsys, folder)
    assert code == 0, out
    original = gate.judge
    monkeypatch.setattr(gate, "judge", lambda results, mutants=None, judged=None: original(results, mutants, IDS,
                                                                                          allure=False, judged=judged))
    assert cli.main(["gate", "--target", "hermes", "--results", str(folder)]) == 1
    out = capsys.readouterr().out
    for part in ("target", "driver", "profile"):
        assert f"(target hermes): {part}: the verdict judged" in out, out
    with pytest.raises(SystemExit) as stopped:
        cli.main(["gate", "--results", str(folder)])
    assert stopped.value.code == 2 and "--target" in capsys.readouterr().err
    monkeypatch.setattr(gate, "judge", original)
    code, out = _gate(monkeypatch, capsys, _write(tmp_path, edit=lambda v: v.pop("judged")))
    assert code == 1 and "it names nothing of what it judged" in out, out
    assert not gate.judge(folder, None, IDS, allure=False).passed  # no identity given: refused, not skipped


def test_a_change_to_a_case_changes_the_suite_hash_and_a_profile_file_its_profile_hash(tmp_path):
    """The shown false PASS: a refusal added to FS-1 after the verdict was made. The suite's hash is over every
    file, so the added test changes it; a profile's over its file and every file it names."""
    import shutil

    from acceptance.targets.profiles import load as load_profile

    tree = tmp_path / "acceptance"
    shutil.copytree(identity.package_dir("acceptance"), tree, ignore=shutil.ignore_patterns("__pycache__"))
    before = identity.tree_digest(tree)
    assert identity.tree_digest(tree) == before
    module = tree / "cases" / "test_filesystem.py"
    module.write_text(module.read_text() + "\n\n@pytest.mark.case(\"FS-1\", \"refusal\", pair=\"A\")\n"
                                            "def test_one_more_variant(target):\n    pass\n")
    assert identity.tree_digest(tree) != before
    profile = load_profile(str(tree / "targets" / "profiles" / "hermes.toml"))
    pinned = identity.profile_digest(profile)
    (tree / "targets" / "profiles" / "hermes" / "managed.schema.json").write_text("{}")
    assert identity.profile_digest(profile) != pinned
