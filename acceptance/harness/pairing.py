"""The pairing rules of DESIGN §5, as plain functions over declarations and outcomes.

At collection (``validate``, ``controls_to_pull_in``): every test names a catalogued case and a role
(``refusal``, ``P`` or ``X``); every control the catalogue lists for a case with a refusal must be
implemented by some test, or the run stops with a usage error naming it; selecting a refusal alone
(``-k``/``-m``) pulls its controls back in.

At report time (``judge``): a refusal passes only if it passed, carried proof that its probes ran in the
intended sandbox, and every control of its case ran and passed; otherwise it is *broken* (or *failed*
if the refusal itself found a leak). A skipped case is not a pass, a run with no case is not a pass.

The plugin feeds these functions; they know nothing of pytest, so they can be tested as data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from acceptance.catalogue import ROLES, Case

SCHEMA = "pairproof.verdict/1"


@dataclass(frozen=True)
class Declared:
    """What a test says it is: a refusal or a control of one case, between which principals."""

    nodeid: str
    case: str
    role: str
    pair: str = ""


@dataclass
class Outcome:
    """How one test ended, merged over its setup, call and teardown phases."""

    declared: Declared
    outcome: str = "passed"  # passed | failed | skipped | error
    proofs: int = 0
    message: str = ""
    attachments: list[str] = field(default_factory=list)
    evidence: list[dict] = field(default_factory=list)
    platform_run: str = ""  # the platform run (worker) the test judged
    lacks: list[str] = field(default_factory=list)  # facets of its case the target lacks: the test did not run
    # A failed test's whole assertion message (``message`` is its first 500 characters): what ``pairproof
    # expect`` reads a finding's evidence words in, beside the structured evidence.
    assertion: str = ""


def validate(tests: Iterable[Declared], catalogue: Mapping[str, Case]) -> list[str]:
    """Every pairing problem in the collected tests, as messages that name the fix."""
    tests = list(tests)
    problems = []
    for t in tests:
        if t.case not in catalogue:
            problems.append(f"{t.nodeid} names case {t.case!r}, which is not in acceptance/catalogue.toml: "
                            "fix the id or add the case to the catalogue")
        elif t.role not in ROLES:
            problems.append(f"{t.nodeid} has role {t.role!r}: use one of {', '.join(ROLES)}")
        elif t.role != "refusal" and t.role not in catalogue[t.case].controls:
            problems.append(f"{t.nodeid} implements control {t.role} of {t.case}, which the catalogue does not "
                            f"declare: add it under [{t.case}] controls in acceptance/catalogue.toml")
    implemented = {(t.case, t.role) for t in tests}
    for case_id in sorted({t.case for t in tests if t.role == "refusal" and t.case in catalogue}):
        for role, what in catalogue[case_id].controls.items():
            if (case_id, role) not in implemented:
                problems.append(
                    f"case {case_id} declares control {role} ({what}) but no collected test implements it: "
                    f"add a test marked @pytest.mark.case({case_id!r}, {role!r}) or remove the control "
                    "from acceptance/catalogue.toml")
    return problems


def controls_to_pull_in(selected: Iterable[Declared], collected: Iterable[Declared]) -> list[Declared]:
    """Controls of the selected refusals that the selection (-k, -m) left out."""
    selected = list(selected)
    chosen = {t.nodeid for t in selected}
    refused_cases = {t.case for t in selected if t.role == "refusal"}
    return [t for t in collected if t.role != "refusal" and t.case in refused_cases and t.nodeid not in chosen]


def _refusal_status(o: Outcome, by_role: Mapping[str, list[Outcome]], case: Case) -> tuple[str, str]:
    if o.outcome == "failed":
        return "failed", o.message
    if o.outcome == "error":
        return "broken", o.message or "error outside the test body"
    if o.outcome == "skipped":
        return "skipped", o.message or "skipped"
    if o.proofs == 0:
        return "broken", "no proof of execution: no probe of this refusal proved it ran in the intended sandbox"
    for role in case.controls:
        ran = by_role.get(role, [])
        if not ran:
            return "broken", f"control {role} ({case.controls[role]}) did not run"
        for c in ran:
            status, _ = _control_status(c)
            if status != "passed":
                return "broken", f"control {role} ({case.controls[role]}) {status}: {c.declared.nodeid}" + \
                    (": no proof of execution" if c.outcome == "passed" else "")
    return "passed", ""


def _control_status(c: Outcome) -> tuple[str, str]:
    """A control passes only as a refusal does: it passed and proved what it observed. A control that saw the
    canary (P) or the leak of a broken setup (X) in text no probe of it proved to come from the sandbox or the
    platform supports nothing: an assertion over an empty set passes the same way."""
    if c.outcome == "error":
        return "broken", c.message
    if c.outcome == "passed" and c.proofs == 0:
        return "broken", ("no proof of execution: no probe of this control proved it ran in the intended sandbox "
                          "or was confirmed in the platform's record, so its pass supports nothing")
    return c.outcome, c.message


def judge(outcomes: Iterable[Outcome], catalogue: Mapping[str, Case],
          expected_refusals: Mapping[str, Iterable[str]] | None = None) -> dict:
    """The verdict: per case its refusals, controls and status; overall status and counts.

    ``expected_refusals`` maps a case to every refusal test the suite has for it (the whole collection,
    before any selection); a case of which some but not all ran is *not covered*, and a problem."""
    expected_refusals = expected_refusals or {}
    by_case: dict[str, list[Outcome]] = {}
    for o in outcomes:
        by_case.setdefault(o.declared.case, []).append(o)
    cases = []
    for case_id, case in catalogue.items():
        # A test whose case needs a facet the target lacks did not run: the case is not covered, naming it.
        lacks = sorted({f for o in by_case.get(case_id, []) for f in o.lacks})
        ran = [o for o in by_case.get(case_id, []) if not o.lacks]
        by_role: dict[str, list[Outcome]] = {}
        for o in ran:
            by_role.setdefault(o.declared.role, []).append(o)
        refusals = []
        for o in by_role.get("refusal", []):
            status, reason = _refusal_status(o, by_role, case)
            refusals.append({"test": o.declared.nodeid, "pair": o.declared.pair, "status": status,
                             "reason": reason, "proofs": o.proofs, "evidence": o.evidence,
                             "platform_run": o.platform_run,
                             **({"assertion": o.assertion} if status == "failed" and o.assertion else {})})
        controls = {
            role: {"description": what,
                   "tests": [{"test": c.declared.nodeid, **dict(zip(("status", "reason"), _control_status(c))),
                              "proofs": c.proofs, "platform_run": c.platform_run} for c in by_role.get(role, [])]}
            for role, what in case.controls.items()
        }
        for entry in controls.values():
            statuses = [t["status"] for t in entry["tests"]]
            entry["status"] = "not run" if not statuses else ("passed" if set(statuses) == {"passed"} else
                                                              next(s for s in statuses if s != "passed"))
        statuses = [r["status"] for r in refusals] + [c["status"] for c in controls.values() if ran]
        expected = sorted(expected_refusals.get(case_id, ()))
        not_run = [n for n in expected if n not in {r["test"] for r in refusals}]
        platform_runs = sorted({o.platform_run for o in ran if o.platform_run})
        reason = ""
        if lacks:
            status = "not covered"
            reason = f"target lacks {', '.join(lacks)}: the driver does not implement the facet{'s' if len(lacks) > 1 else ''} " \
                     "this case needs, so none of its tests ran"
        elif not ran:
            status = "not covered"
        elif not_run:
            status = "not covered"
            reason = (f"{len(not_run)} of its {len(expected)} refusals did not run ({not_run[0]}"
                      f"{' ...' if len(not_run) > 1 else ''}): a case is covered only when every refusal ran")
        elif len(platform_runs) > 1:
            status = "broken"
            reason = (f"its tests judged different platform runs {platform_runs}: a refusal and its controls must "
                      "judge one (under xdist, keep a case's tests in one module: --dist loadfile)")
        elif "failed" in [r["status"] for r in refusals]:
            status = "failed"
        elif any(s in ("broken", "failed", "not run") for s in statuses):
            status = "broken"
        elif "skipped" in statuses:
            status = "skipped"
        elif not refusals and case.controls:
            status = "broken"  # controls alone prove nothing about the boundary
        else:
            status = "passed"
        if status in ("failed", "broken") and not reason:
            # The first test that made it so, and why: the case's line then says what to look at.
            # (a refusal is broken when a control is: the control's own reason comes first then)
            own = [(r["test"], r["status"], r["reason"]) for r in refusals if r["status"] != "passed"]
            of_controls = [(t["test"], t["status"], t["reason"]) for c in controls.values() for t in c["tests"]
                           if t["status"] != "passed"]
            worst = (own + of_controls if status == "failed" else of_controls + own) + \
                    [(f"{role} control", "not run", "no test of it ran") for role, c in controls.items()
                     if c["status"] == "not run" and ran]
            if worst:
                test, why, message = next((w for w in worst if w[1] == status), worst[0])
                first_line = message.strip().splitlines()[0] if message and message.strip() else "no message"
                reason = f"{test.rsplit('::', 1)[-1]} {why}: {first_line}"[:300]
        cases.append({"id": case_id, "boundary": case.boundary, "channel": case.channel,
                      "refusal": case.refusal, "severity": case.severity, "status": status, "reason": reason,
                      "facets": list(case.facets), "lacks": lacks,
                      "refusals": refusals, "expected_refusals": expected, "controls": controls})
    counts: dict[str, int] = {}
    for c in cases:
        counts[c["status"]] = counts.get(c["status"], 0) + 1
    covered = [c for c in cases if c["status"] != "not covered"]
    problems = [f"{c['id']}: {c['status']}" + (f" ({c['reason']})" if c["reason"] else "")
                for c in cases if c["status"] != "passed" and (c in covered or c["reason"])]
    if not covered:
        problems.append("no case ran: a run that selects zero cases proves nothing")
    return {"schema": SCHEMA, "status": "passed" if not problems else "failed", "counts": counts,
            "problems": problems, "cases": cases}
