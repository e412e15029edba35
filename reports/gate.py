"""``pairproof gate``: the release gate. It reads what a run wrote and exits 0 only if that proves the case
catalogue, so a pipeline can trust its exit code.

The gate trusts no status a report gives itself: it judges again, from the evidence, against the catalogue
and the source it is run from (DESIGN §5 rule 7).

- **The verdict** (``verdict.json``) exists and follows the schema; pytest ended cleanly (exit 0); the
  verdict's own ``status`` is passed and its ``problems`` are empty; it names a run id and no case the
  catalogue does not hold.
- **Each case of the catalogue** (``acceptance/catalogue.toml``) is in the verdict, and passes only if: at
  least one refusal ran; every refusal passed with proof of execution (proofs > 0) and no scan or dump in
  its evidence that did not prove it looked (read nothing, cut short, an own canary missed); every control the
  catalogue declares for the case ran, and each of its tests passed; all of them judged one platform run
  (each test's ``platform_run``); every refusal the suite collected for the case (``expected_refusals``;
  absent = coverage not proven) is among the refusals, and no other. A case the verdict says the target
  lacks a facet for (``lacks``) is not covered, naming the facet.
  A case whose recorded status disagrees with its evidence fails (the verdict contradicts itself).
- **What it judged** (``judged``, ``reports/identity.py``): the sha256 of the runtime, the suite, the case
  catalogue, the driver, the agent profile and the image id the verdict names equal those recomputed here from
  this source and the gate's ``--target``, ``--profile`` and ``--image``: a verdict of another suite, catalogue,
  target, profile or image (last week's, another image's) is refused.
- **Allure results** (``allure-results/``) belong to this run: each carries the label ``pairproof_run``
  equal to the verdict's run and ``pairproof_nodeid``; there is exactly one per test the verdict judged,
  none missing, none extra, each passed; and Allure's own quality gate passes over them.
- **The mutant report**, when given, judged this source (the sha256 of the runtime, the suite and the
  mutant catalogue it names equal those recomputed here), ran the whole catalogue (not ``--only``, not
  another suite), its unmodified control exited 0 with every case passed, and every catalogued mutant was
  killed by one of the cases the catalogue names for it (its kill-matrix entry shows that case failed).
  The catalogue is the one of the target the report names (``reference``: ``mutants/catalogue.toml``,
  ``docker``: ``mutants/docker.toml``); a report naming another catalogue than its target's, or another
  target than the verdict's, is refused.

Every reason names the input it refuses and what to do about it; it prints them case by case.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

SCHEMA_PATH = Path(__file__).with_name("verdict.schema.json")
# How a case falls short, worst first; the first one found names the case's state in the gate's lines.
_SEVERITY = ("failed", "broken", "not covered", "skipped")


@dataclass
class GateResult:
    passed: bool
    reasons: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


def _schema_problems(verdict: dict) -> list[str]:
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(json.loads(SCHEMA_PATH.read_text()))
    return [f"verdict.json does not follow the schema at {'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
            for e in sorted(validator.iter_errors(verdict), key=str)[:5]]


def judge(results: Path, mutants: Path | None = None, catalogue_ids: list[str] | None = None,
          allure: bool = True, *, judged: Mapping[str, object] | None = None) -> GateResult:
    """Judge a results folder (and a mutant report) against ``judged``, what this source and the target, profile
    and image given to the gate hash to (``reports/identity.py``; none given: refused, never skipped);
    ``catalogue_ids`` narrows the catalogue (for tests)."""
    from acceptance import catalogue as case_catalogue

    full = case_catalogue.load()
    cases = _cases(catalogue_ids)
    verdict_path = results / "verdict.json"
    if not verdict_path.exists():
        return GateResult(False, [f"no verdict at {verdict_path}: the run did not finish, or stopped before any "
                                  "case was judged (a usage error, say): run `pairproof qualify` first"])
    try:
        verdict = json.loads(verdict_path.read_text())
    except ValueError as exc:
        return GateResult(False, [f"{verdict_path} is not JSON ({exc}): the file is damaged; rerun `pairproof qualify`"])
    except OSError as exc:  # a folder by that name, or unreadable: no verdict to judge, never a traceback
        return GateResult(False, [f"{verdict_path} cannot be read ({exc.strerror}); rerun `pairproof qualify`"])
    problems = _schema_problems(verdict)
    if problems:
        return GateResult(False, problems)
    result = GateResult(passed=True)
    result.reasons += _verdict_reasons(verdict, full)
    result.reasons += _identity_reasons(verdict, judged, verdict_path)
    by_id: dict[str, dict] = {}
    for entry in verdict["cases"]:
        by_id.setdefault(entry["id"], entry)
    for case_id, case in cases.items():
        state, why = judge_case(by_id.get(case_id), case)
        if state is None:
            result.lines.append(f"{case_id:6} PASSED")
        else:
            result.lines.append(f"{case_id:6} {state.upper()}  " + "; ".join(why))
            result.reasons.append(f"{case_id}: {state}: " + "; ".join(why))
    if mutants is not None:
        judged = judge_mutants(mutants, catalogue_ids, target=verdict.get("target"))
        result.reasons += judged.reasons
        result.lines += judged.lines
    if allure:
        result.reasons += _allure_reasons(results / "allure-results", verdict, result.lines)
    result.passed = not result.reasons
    return result


def judge_mutants(report: Path, catalogue_ids: list[str] | None = None, target: str | None = None) -> GateResult:
    """Judge a mutant report alone (``judge`` does it when given one, with its verdict's ``target``: the
    report must have judged the same target)."""
    lines: list[str] = []
    reasons = _mutant_reasons(report, _cases(catalogue_ids), lines, target)
    return GateResult(not reasons, reasons, lines)


def _cases(catalogue_ids: list[str] | None) -> dict:
    from acceptance import catalogue as case_catalogue

    full = case_catalogue.load()
    unknown = set(catalogue_ids or ()) - set(full)
    if unknown:
        raise ValueError(f"not in acceptance/catalogue.toml: {', '.join(sorted(unknown))}")
    return {i: full[i] for i in catalogue_ids} if catalogue_ids is not None else dict(full)


# -- the verdict --------------------------------------------------------------------------------------


def _verdict_reasons(verdict: dict, catalogue: Mapping[str, object]) -> list[str]:
    reasons = []
    code = verdict["pytest_exit"]
    if code == 1:
        reasons.append("pytest ended with exit status 1 (a test failed): nothing it reported can pass a gate")
    elif code != 0:
        reasons.append(f"pytest ended with exit status {code} (interrupted, internal or usage error): nothing it "
                       "reported can pass a gate")
    if verdict["status"] != "passed":
        reasons.append(f"verdict.json says the run {verdict['status']}")
    if verdict["problems"]:
        shown = "; ".join(verdict["problems"][:5]) + ("; ..." if len(verdict["problems"]) > 5 else "")
        reasons.append(f"verdict.json lists {len(verdict['problems'])} problems: {shown}")
    if not verdict["run"].strip():
        reasons.append("verdict.json names no run id: its Allure results cannot be tied to it; rerun `pairproof qualify`")
    ids = [c["id"] for c in verdict["cases"]]
    strangers = sorted(set(ids) - set(catalogue))
    if strangers:
        reasons.append(f"verdict.json judges {', '.join(strangers)}, not in acceptance/catalogue.toml: it was made "
                       "from another catalogue; rerun `pairproof qualify` from this source")
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        reasons.append(f"verdict.json lists {', '.join(twice)} more than once: the file was edited or damaged")
    if not any(c["refusals"] for c in verdict["cases"]):
        reasons.append("no case ran: no refusal of any case is in the verdict")
    return reasons


def _identity_reasons(verdict: dict, judged: Mapping[str, object] | None, path: Path) -> list[str]:
    """The verdict judged what the gate was told to judge: this runtime, suite and catalogue, the ``--target``'s
    driver, its profile and its image, hash for hash."""
    from reports import identity

    if judged is None:
        return ["the gate was given nothing to tie the verdict to (no target, profile or image): run `pairproof "
                "gate --target NAME`"]
    lines = identity.mismatches(verdict.get("judged"), judged)
    target = judged.get("target")
    return [f"{path} is not a verdict of what this gate judges (target {target}): {line}; rerun `pairproof qualify "
            f"--target {target}` from this source (with the same --profile and --image as given here)"
            for line in lines]


def judge_case(entry: dict | None, case) -> tuple[str | None, list[str]]:
    """(None, []) if the evidence proves the case; else the worst state found and every reason."""
    if entry is None:
        return "not covered", ["not in the verdict (every catalogue case must run)"]
    refusals = entry["refusals"]
    lacks = [f for f in entry.get("lacks") or [] if isinstance(f, str)]
    if lacks:
        # A negative is safe to take on the verdict's word; the facets are named from the catalogue's entry.
        return "not covered", [f"target lacks {', '.join(lacks)} (the case needs {', '.join(case.facets)}): none of "
                               "its tests ran; implement the facet in the driver (docs/writing-a-driver.md) or "
                               "qualify a target that has it"]
    if not refusals and not any(c["tests"] for c in entry["controls"].values()):
        return "not covered", ["nothing of it ran (every catalogue case must run)"]
    found: list[tuple[str, str]] = []
    found += control_problems(entry, case)
    for r in refusals:
        if r["status"] != "passed":
            state = r["status"] if r["status"] in ("failed", "skipped") else "broken"
            found.append((state, f"refusal {r['test']} {r['status']}" + (f": {r['reason']}" if r["reason"] else "")))
        elif r["proofs"] <= 0:
            found.append(("broken", f"refusal {r['test']} passed with no proof of execution (proofs 0): no probe "
                                    "showed it ran in the intended sandbox"))
        else:
            found += [("broken", f"refusal {r['test']} passed, but its own record shows a {why}")
                      for why in _blind_scans(r.get("evidence") or [])]
    # A refusal and its controls judge one platform run (rule 1): recomputed from each test's own record.
    runs = sorted({t.get("platform_run") or "" for t in [*refusals, *(t for c in entry["controls"].values()
                                                                       for t in c["tests"])]} - {""})
    if len(runs) > 1:
        found.append(("broken", f"its tests judged different platform runs {runs}: a refusal and its controls "
                                "must judge one"))
    if not refusals:
        found.append(("not covered", "no refusal ran" + (" (its controls alone prove nothing about the boundary)"
                                                         if case.controls else "")))
    expected = entry.get("expected_refusals")
    if expected is None:
        found.append(("not covered", "the verdict does not list the refusals the suite collected for the case "
                                     "(expected_refusals), so whether all of them ran is not proven: rerun "
                                     "`pairproof qualify` with this version of pairproof"))
    else:
        ran = {r["test"] for r in refusals}
        found += [("not covered", f"refusal {test} was not run") for test in expected if test not in ran]
        found += [("broken", f"refusal {test} is not among the refusals the suite collected for the case: the "
                             "verdict contradicts itself") for test in sorted(ran - set(expected))]
    if not found and entry["status"] != "passed":
        # A case-level judgement the verdict keeps no evidence for (two platform runs, say): a negative is
        # safe to take on its word.
        found.append(("broken", f"the verdict records it {entry['status']}: {entry['reason']}" if entry.get("reason")
                      else f"the verdict records it {entry['status']} though its refusals and controls passed: the "
                           "verdict contradicts itself"))
    if not found:
        return None, []
    worst = min((state for state, _ in found), key=_SEVERITY.index)
    return worst, [why for _, why in found]


def _blind_scans(evidence: list) -> list[str]:
    """Scans and dumps in a refusal's evidence that did not prove they looked (DESIGN §5 rule 5), judged
    again from what each recorded: something read, nothing cut short, every own canary found."""
    blind = []
    for e in evidence:
        if not isinstance(e, dict) or e.get("kind") not in ("scan", "dump"):
            continue
        if e.get("missing_own") or e.get("truncated") or not e.get("files") or not e.get("bytes"):
            blind.append(f"{e['kind']} of {e.get('instance', '?')} that did not prove it looked (files {e.get('files')}, "
                         f"bytes {e.get('bytes')}, truncated {e.get('truncated')}, missing own canaries "
                         f"{str(e.get('missing_own'))[:120]})")
    return blind


def control_problems(entry: dict, case) -> list[tuple[str, str]]:
    """Every control the catalogue declares for the case ran, and each of its tests passed with proof."""
    found = []
    for role, what in case.controls.items():
        control = entry["controls"].get(role)
        if control is None:
            found.append(("broken", f"control {role} ({what}) is not in the verdict"))
        elif not control["tests"]:
            found.append(("broken", f"control {role} ({what}) did not run"))
        elif bad := [t for t in control["tests"] if t.get("status") != "passed"]:
            state = "skipped" if bad[0].get("status") == "skipped" else "broken"
            found.append((state, f"control {role} ({what}) {bad[0].get('status')}: {bad[0].get('test')}"))
        elif unproved := [t for t in control["tests"] if not isinstance(t.get("proofs"), int) or t["proofs"] <= 0]:
            found.append(("broken", f"control {role} ({what}) test {unproved[0].get('test')} passed with no proof of "
                                    "execution: a control proves what it observed, as a refusal does (rule 2)"))
        elif control["status"] != "passed":
            found.append(("broken", f"control {role} is recorded {control['status']} though its tests passed: "
                                    "the verdict contradicts itself"))
    return found


# -- Allure results -----------------------------------------------------------------------------------


def _labels(result: dict, name: str) -> list[str]:
    return [str(label.get("value")) for label in result.get("labels", []) if label.get("name") == name]


def _allure_reasons(folder: Path, verdict: dict, lines: list[str]) -> list[str]:
    from . import allure_html

    if not folder.is_dir():
        return [f"no Allure results in {folder}: Allure's quality gate has nothing to judge; run `pairproof qualify`"]
    run = verdict["run"]
    judged = {t["test"] for c in verdict["cases"] for t in c["refusals"]}
    judged |= {t["test"] for c in verdict["cases"] for ctl in c["controls"].values() for t in ctl["tests"]}
    refused: dict[str, list[str]] = {}  # what is wrong -> the results it is wrong with

    def refuse(kind: str, what: str) -> None:
        refused.setdefault(kind, []).append(what)

    # Tests of a case whose facet the target lacks did not run (pytest reports them skipped): the case's own
    # line fails the gate naming the facet; their results are not refused a second time here.
    lacking = {c["id"] for c in verdict["cases"] if c.get("lacks")}
    seen: set[str] = set()
    for path in sorted(folder.glob("*-result.json")):
        try:
            result = json.loads(path.read_text())
        except ValueError:
            refuse("are not JSON (damaged files)", path.name)
            continue
        nodeids, runs = _labels(result, "pairproof_nodeid"), _labels(result, "pairproof_run")
        name = nodeids[0] if len(nodeids) == 1 else f"{path.name} ({result.get('fullName', result.get('name', '?'))})"
        if not runs:
            refuse("carry no pairproof_run label, so nothing ties them to this run", name)
        elif set(runs) != {run}:
            refuse(f"belong to another run than this verdict's {run}", f"{name} (run {', '.join(sorted(set(runs)))})")
        if len(nodeids) != 1:
            refuse("carry no single pairproof_nodeid label, so they are not a case this verdict judged", path.name)
            continue
        nodeid = nodeids[0]
        if nodeid not in judged and result.get("status") == "skipped" and set(_labels(result, "story")) & lacking:
            continue
        if nodeid not in judged:
            refuse("are for a test this verdict did not judge", nodeid)
        elif nodeid in seen:
            refuse("are a second result for one test", nodeid)
        seen.add(nodeid)
        if result.get("status") != "passed":
            refuse("did not pass", f"{nodeid} ({result.get('status')})")
    for nodeid in sorted(judged - seen):
        refuse("are missing: the verdict judged these tests but no Allure result shows them", nodeid)
    reasons = [f"Allure results in {folder}: {len(names)} {kind}: {', '.join(names[:3])}"
               + (f" and {len(names) - 3} more" if len(names) > 3 else "")
               + "; rerun `pairproof qualify` into an empty reports folder" for kind, names in refused.items()]
    ok, said = allure_html.quality_gate(folder, min_tests=len(judged))
    lines.append(f"allure results: {len(seen)} for {len(judged)} judged tests of run {run}"
                 f"{'' if not refused else ' (' + str(sum(map(len, refused.values()))) + ' refused)'}; "
                 f"allure quality gate (minTestsCount {len(judged)}, successRate 1): "
                 f"{'passed' if ok else 'FAILED'} {said}".rstrip())
    if not ok:
        reasons.append(f"Allure's quality gate failed on {folder}: {said}")
    return reasons


# -- the mutant report --------------------------------------------------------------------------------


def _mutant_reasons(path: Path, cases: Mapping[str, object], lines: list[str], verdict_target: str | None = None) -> list[str]:
    from mutants import catalogue as mutant_catalogue
    from mutants import runner

    if not path.exists():
        return [f"no mutant report at {path}: run `pairproof mutants` or drop --mutants"]
    try:
        report = json.loads(path.read_text())
    except ValueError as exc:
        return [f"{path} is not JSON ({exc}): the file is damaged; rerun `pairproof mutants`"]
    if not isinstance(report, dict) or report.get("schema") != runner.SCHEMA:
        got = report.get("schema") if isinstance(report, dict) else None
        return [f"{path} is not a {runner.SCHEMA} report (schema {got!r}): it was written by another version of "
                "the runner, or by hand; rerun `pairproof mutants`"]
    target = report.get("target")
    command = "pairproof mutants" + ("" if target == "reference" else f" --target {target}")
    rerun = f"rerun `{command}` (the whole catalogue) on this source"
    if not isinstance(target, str) or target not in mutant_catalogue.CATALOGUES:
        return [f"{path} names target {target!r}, which has no mutant catalogue (targets with one: "
                f"{', '.join(mutant_catalogue.CATALOGUES)}): it was edited or damaged; rerun `pairproof mutants`"]
    catalogue_path = mutant_catalogue.catalogue_path(target)
    expected = mutant_catalogue.display(catalogue_path)
    if report.get("catalogue") != expected:
        return [f"{path} judged the catalogue {report.get('catalogue')!r}, but target {target}'s is {expected}: "
                f"the report was edited or made by another runner; {rerun}"]
    if verdict_target is not None and verdict_target != target:
        return [f"{path} judged target {target}, the results target {verdict_target}: give the mutant report of "
                f"the same target (`pairproof mutants --target {verdict_target}`)"]
    lines.append(f"mutants ({target}, {expected}): {report.get('summary', '?')}")
    reasons = []
    source = report.get("source") if isinstance(report.get("source"), dict) else {}
    for part, digest in runner.source_digest(catalogue=catalogue_path).items():
        if source.get(part) != digest:
            reasons.append(f"{path} judged another {part.replace('_', ' ')} (sha256 {str(source.get(part))[:12]}, "
                           f"this source is {digest[:12]}): {rerun}")
    if report.get("partial") is not False or report.get("suite") is not None:
        how = f"judged by the suite in {report['suite']}" if report.get("suite") else "--only, or a chosen list of mutants"
        reasons.append(f"{path} is a partial report ({how}): {rerun}")
    control = report.get("control") if isinstance(report.get("control"), dict) else {}
    code = control.get("exit")
    if type(code) is not int or code != 0:
        reasons.append(f"mutants: the unmodified control did not pass (exit {code}), so no kill means anything: "
                       f"fix the suite on the unmodified runtime, then {rerun}")
    statuses = control.get("statuses") if isinstance(control.get("statuses"), dict) else {}
    not_passed = [c for c in cases if statuses.get(c) != "passed"]
    if not_passed and code == 0:
        reasons.append(f"mutants: the unmodified control did not pass {', '.join(not_passed[:5])}"
                       f"{' and more' if len(not_passed) > 5 else ''}: {rerun}")
    entries = [m for m in report.get("mutants", []) if isinstance(m, dict)]
    by_name: dict[str, dict] = {}
    for m in entries:
        if m.get("name") in by_name:
            reasons.append(f"mutant {m.get('name')}: listed twice in {path}: the file was edited or damaged")
        by_name.setdefault(str(m.get("name")), m)
    catalogued = mutant_catalogue.load(catalogue_path)
    names = {m.name for m in catalogued}
    for name in sorted(set(by_name) - names):
        reasons.append(f"mutant {name}: not in {expected}: the report judged another catalogue; {rerun}")
    matrix = report.get("matrix") if isinstance(report.get("matrix"), dict) else {}
    missing = [m.name for m in catalogued if m.name not in by_name]
    if missing:
        reasons.append(f"{len(missing)} catalogued mutants not in the report: {', '.join(missing[:5])}"
                       f"{f' and {len(missing) - 5} more' if len(missing) > 5 else ''}: every catalogued mutant "
                       f"must be run; {rerun}")
    for mutant in catalogued:
        m = by_name.get(mutant.name)
        if m is None:
            continue
        killed_by = [c for c in m.get("killed_by", []) if isinstance(c, str)]
        row = matrix.get(mutant.name) if isinstance(matrix.get(mutant.name), dict) else {}
        kills = [c for c in mutant.kills if c in killed_by and row.get(c) == "failed"]
        if m.get("status") != "killed" or not kills:
            detail = f" {m['detail']}" if m.get("detail") else ""
            reasons.append(f"mutant {mutant.name}: {m.get('status')}: not killed by one of its named cases "
                           f"({', '.join(mutant.kills)}); failed: {', '.join(killed_by) or 'none'}.{detail}".rstrip())
    if report.get("status") != "passed" and not reasons:
        reasons.append(f"{path} says the mutant run {report.get('status')}: {rerun}")
    return reasons
