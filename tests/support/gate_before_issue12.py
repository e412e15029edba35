"""The release gate as it was before issue 12 (reports/gate.py at af61d09), kept verbatim but for its imports and schema path, so
the gate's tests can show each hollow pass it let through: the old gate passes the crafted input, the new one
refuses it. Not used by anything but tests."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import reports

SCHEMA_PATH = Path(reports.__file__).with_name("verdict.schema.json")  # the schema only grew since


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
          allure: bool = True) -> GateResult:
    from acceptance import catalogue

    ids = catalogue_ids if catalogue_ids is not None else list(catalogue.load())
    result = GateResult(passed=True)
    verdict_path = results / "verdict.json"
    if not verdict_path.exists():
        return GateResult(False, [f"no verdict at {verdict_path}: the run did not finish, or stopped before any "
                                  "case was judged (a usage error, say): run `pairproof qualify` first"])
    try:
        verdict = json.loads(verdict_path.read_text())
    except ValueError as exc:
        return GateResult(False, [f"{verdict_path} is not JSON ({exc}): the file is damaged"])
    problems = _schema_problems(verdict)
    if problems:
        return GateResult(False, problems)
    if verdict["pytest_exit"] not in (0, 1):
        result.reasons.append(f"pytest ended with exit status {verdict['pytest_exit']} (interrupted, internal or usage "
                              "error): nothing it reported can pass a gate")
    by_id = {c["id"]: c for c in verdict["cases"]}
    ran = [c for c in verdict["cases"] if c["status"] != "not covered"]
    if not ran:
        result.reasons.append("no case ran")
    for case_id in ids:
        case = by_id.get(case_id)
        if case is None or case["status"] == "not covered":
            result.reasons.append(f"{case_id}: not covered by this run (every catalogue case must run)")
            result.lines.append(f"{case_id:6} MISSING")
            continue
        line = f"{case_id:6} {case['status'].upper()}"
        if case["status"] != "passed":
            why = [r["reason"] or r["status"] for r in case["refusals"] if r["status"] != "passed"]
            why += [f"control {role} {ctl['status']}" for role, ctl in case["controls"].items() if ctl["status"] != "passed"]
            if not case["refusals"]:
                why.append("no refusal ran")
            result.reasons.append(f"{case_id}: {case['status']}: {'; '.join(why) or 'see the report'}")
            line += "  " + "; ".join(why)
        result.lines.append(line)
    if mutants is not None:
        if not mutants.exists():
            result.reasons.append(f"no mutant report at {mutants}: run `pairproof mutants` or drop --mutants")
        else:
            report = json.loads(mutants.read_text())
            if report.get("control", {}).get("exit") != 0:
                result.reasons.append("mutants: the unmodified control did not pass")
            for m in report.get("mutants", []):
                if m["status"] != "killed":
                    result.reasons.append(f"mutant {m['name']}: {m['status']} {m.get('detail', '')}".rstrip())
            result.lines.append(f"mutants: {report.get('summary', '?')}")
    if allure:
        from reports import allure_html

        allure_results = results / "allure-results"
        if not allure_results.is_dir():
            result.reasons.append(f"no Allure results in {allure_results}: Allure's quality gate has nothing to judge")
        else:
            ok, said = allure_html.quality_gate(allure_results, min_tests=len(ids))
            result.lines.append(f"allure quality gate (minTestsCount {len(ids)}, successRate 1): "
                                f"{'passed' if ok else 'FAILED'} {said}".rstrip())
            if not ok:
                result.reasons.append(f"Allure's quality gate failed: {said}")
    result.passed = not result.reasons
    return result
