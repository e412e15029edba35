"""The hooks that carry state across a session: collection rules, outcomes, the verdict at the end."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from acceptance import catalogue
from acceptance.contract import view_violations
from acceptance.harness import interrupts, pairing
from acceptance.harness.keys import (
    BROKEN_KEY,
    CASE_KEY,
    EVIDENCE_KEY,
    INTERRUPTED_KEY,
    LACKS_KEY,
    PLATFORM_RUN_KEY,
    PROBE_LOG,
    PROOF_KEY,
    TARGET_VIEW,
)

# Frames of these packages are machinery, not the place an assertion was made.
_MACHINERY = ("/_pytest/", "/pluggy/", "/hypothesis/", "/allure_pytest/", "/allure_commons/")
# How much of a failed test's assertion the verdict keeps (``assertion``): enough for a finding's evidence words,
# bounded so one dict diff cannot swell the verdict. (qualify turns pytest's own truncation of it off.)
ASSERTION_CHARS = 65536
CASES_DIR = str(Path(__file__).resolve().parents[1] / "cases")


def _asserted_where(excinfo: pytest.ExceptionInfo, item: pytest.Item) -> str | None:
    """Where an assertion was raised, if that is outside the case code (the test's own module or the
    suite's case helpers under ``acceptance/cases``): a harness helper's assertion (a wait that timed
    out, a fixture's sanity check) is the harness failing, not the property (DESIGN §5 rule 6)."""
    own = str(getattr(item, "path", "") or "")
    for entry in reversed(excinfo.traceback):
        path = str(entry.path)
        if any(m in path for m in _MACHINERY):
            continue
        if path == own or path.startswith(CASES_DIR + "/"):
            return None
        return f"{path}:{entry.lineno + 1}"
    return None


def _declared(item: pytest.Item) -> pairing.Declared | None:
    mark = item.get_closest_marker("case")
    if mark is None:
        return None
    case_id = mark.args[0] if mark.args else mark.kwargs.get("id", "")
    role = mark.args[1] if len(mark.args) > 1 else mark.kwargs.get("role", "")
    return pairing.Declared(item.nodeid, case_id, role, mark.kwargs.get("pair", ""))


def _usage_message(problems: list[str]) -> str:
    return "pairproof pairing: " + "\n  ".join(["", *problems])


class PairproofSession:
    def __init__(self, config: pytest.Config, *, run: str, is_worker: bool) -> None:
        self.config, self.run, self.is_worker = config, run, is_worker
        # The secret the canaries' run ids are made from (``canary_run``): not the run id, which an instance can
        # read (its volume's host path names it), so nothing it sees tells its canaries from its other ids.
        workerinput = getattr(config, "workerinput", None) or {}
        self.canaries_key = (workerinput.get("pairproof_canaries") or config.getoption("pairproof_canaries", None)
                             or secrets.token_hex(16))
        self.canary_runs: set[str] = set()  # the canaries' run ids of every worker (the verdict's "canaries")
        self.active = config.getoption("pairproof_target") is not None
        self.outcomes: dict[str, pairing.Outcome] = {}
        self.verdict: dict | None = None
        self.usage_error = False
        self.usage_problems: list[str] = []
        self.unbuildable = ""  # why a worker could not build the target (fixtures.pairproof_target)
        self._full: list[pytest.Item] = []
        # case -> node ids of every refusal the suite has for it, selected or not (rule 4)
        self.expected_refusals: dict[str, set[str]] = {}
        self._interrupts = len(interrupts.RECEIVED)  # the interrupts before the session
        self.interrupted = False  # a KeyboardInterrupt reached pytest, or a worker's test ended after one
        self._sigint_before: object | None = None
        if self.active:
            self._record_interrupts()

    def _record_interrupts(self) -> None:
        """Record SIGINT where nothing does (a plain pytest run; pairproof qualify records its own), once the
        session is pairproof's, so that an interrupt a test swallowed is still known for one."""
        if self._sigint_before is None:
            self._sigint_before = interrupts.record_sigint()

    def pytest_unconfigure(self) -> None:
        if self._sigint_before is not None:
            import signal

            signal.signal(signal.SIGINT, self._sigint_before)
            self._sigint_before = None

    def interrupt_seen(self) -> bool:
        """Whether the run was interrupted (SIGINT or SIGTERM), here or on a worker, even if the KeyboardInterrupt
        was swallowed on its way up."""
        return self.interrupted or len(interrupts.RECEIVED) > self._interrupts

    # -- xdist: every worker gets the controller's run id ----------------------------------------------

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        node.workerinput["pairproof_run"] = self.run
        node.workerinput["pairproof_canaries"] = self.canaries_key

    # -- collection ----------------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        self._full = list(items)

    @pytest.hookimpl(trylast=True, specname="pytest_collection_modifyitems")
    def pytest_collection_modifyitems_pairing(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        # A second implementation of the same hook (pytest only looks at names starting "pytest_").

        declared = {i.nodeid: d for i in self._full if (d := _declared(i)) is not None}
        if declared:
            self.active = True
            self._record_interrupts()
        if not self.active:
            return
        problems = pairing.validate(declared.values(), catalogue.load())
        problems += [f"{i.nodeid} has no @pytest.mark.case(ID, ROLE): every test of the suite must name the "
                     "catalogue case and role it serves, or nobody judges it (mark it, or move it out of the suite)"
                     for i in self._full if i.nodeid not in declared]
        for d in declared.values():
            if d.role == "refusal":
                self.expected_refusals.setdefault(d.case, set()).add(d.nodeid)
        if self.is_worker:
            config.workeroutput["pairproof_expected"] = {c: sorted(n) for c, n in self.expected_refusals.items()}
        if problems:
            self.usage_error = True
            if self.is_worker:
                # A UsageError raised on an xdist worker becomes an INTERNALERROR and the message is
                # lost; instead run nothing here and hand the problems to the controller, which fails
                # the session with them (pytest_testnodedown / pytest_sessionfinish below).
                config.workeroutput["pairproof_usage"] = problems
                items.clear()
                return
            raise pytest.UsageError(_usage_message(problems))
        wanted = set(config.getoption("pairproof_cases"))
        if wanted:
            unknown = wanted - set(catalogue.load())
            if unknown:
                raise pytest.UsageError(f"--case {', '.join(sorted(unknown))}: not in acceptance/catalogue.toml")
            dropped = [i for i in items if i.nodeid not in declared or declared[i.nodeid].case not in wanted]
            items[:] = [i for i in items if i not in dropped]
            config.hook.pytest_deselected(items=dropped)
        selected = [declared[i.nodeid] for i in items if i.nodeid in declared]
        extra = {d.nodeid for d in pairing.controls_to_pull_in(selected, declared.values())}
        if extra:
            items.extend(i for i in self._full if i.nodeid in extra)
        for item in items:
            d = declared.get(item.nodeid)
            if d is not None:
                item.user_properties.append((CASE_KEY, {"case": d.case, "role": d.role, "pair": d.pair}))

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        output = getattr(node, "workeroutput", {})
        problems = output.get("pairproof_usage")
        if problems:
            self.usage_error = True
            self.usage_problems = problems
        if output.get("pairproof_unbuildable"):
            self.unbuildable = output["pairproof_unbuildable"]
        for case, nodeids in output.get("pairproof_expected", {}).items():
            self.expected_refusals.setdefault(case, set()).update(nodeids)
        if output.get("pairproof_canary_run"):
            self.canary_runs.add(output["pairproof_canary_run"])

    # -- outcomes (arrive here from every worker) ---------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        # Only an assertion is a finding (pytest's own "DID NOT RAISE" and pytest.fail included: the test's
        # verdict too). Any other exception (a probe without proof, a target that failed, a timeout) means
        # the test could not judge: broken, never "failed" (a leak).
        findings = (AssertionError, pytest.fail.Exception, pytest.skip.Exception)
        if self.interrupt_seen():
            # An interrupt's effects are no finding and no breakage: a sandbox it killed, a call it cut short,
            # come back as errors of their own ("instance ... is not running"). Nothing of this test is judged,
            # the run stops here, and no verdict is written (DESIGN §5 rule 6).
            item.session.shouldstop = "interrupted (SIGINT or SIGTERM)"
            report = yield
            report.user_properties.append((INTERRUPTED_KEY, True))
            return report
        if call.when == "call" and call.excinfo is not None:
            if not call.excinfo.errisinstance(findings):
                item.user_properties.append((BROKEN_KEY, f"{call.excinfo.typename}: {call.excinfo.value}"[:500]))
            elif not call.excinfo.errisinstance(pytest.skip.Exception) and (where := _asserted_where(call.excinfo, item)):
                item.user_properties.append((BROKEN_KEY, f"harness assertion at {where} (not a finding): "
                                                         f"{call.excinfo.typename}: {call.excinfo.value}"[:500]))
        report = yield
        view = item.stash.get(TARGET_VIEW, None)
        if call.when in ("call", "teardown") and view is not None and view_violations(view) \
                and BROKEN_KEY not in dict(item.user_properties):
            # The test (or its fixtures' teardown) reached a facet its case does not declare and caught the
            # error: still broken.
            why = f"UndeclaredFacetError: {view_violations(view)[0]}"[:500]
            item.user_properties.append((BROKEN_KEY, why))
            report.user_properties.append((BROKEN_KEY, why))
            report.outcome, report.longrepr = "failed", why
        log = item.stash.get(PROBE_LOG, None)
        if call.when == "call" and log is not None and BROKEN_KEY not in dict(item.user_properties):
            # A proof failure the test caught (``except Exception`` around a scan) still means a probe did
            # not look, whatever the test concluded; a platform probe never confirmed means the same when
            # the test passed (a finding made before confirming stays a finding).
            unproved = log.unproved() if report.passed else list(log.failures)
            if unproved:
                why = (f"ProofError: {len(unproved)} probes of this test did not prove they looked (caught or "
                       f"left unconfirmed): {unproved[0]}")[:500]
                item.user_properties.append((BROKEN_KEY, why))
                report.user_properties.append((BROKEN_KEY, why))
                report.outcome, report.longrepr = "failed", why
        return report

    # -- ----------------------------------------------------

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if any(k == INTERRUPTED_KEY for k, _ in report.user_properties):
            self.interrupted = True  # (a worker's test: the controller judges nothing more either)
            return
        props = dict((k, v) for k, v in report.user_properties
                     if k in (CASE_KEY, PROOF_KEY, BROKEN_KEY, EVIDENCE_KEY, PLATFORM_RUN_KEY, LACKS_KEY))
        if CASE_KEY not in props:
            return
        self.active = True  # under xdist the controller learns it from the workers' reports
        d = props[CASE_KEY]
        o = self.outcomes.setdefault(report.nodeid, pairing.Outcome(
            pairing.Declared(report.nodeid, d["case"], d["role"], d.get("pair", ""))))
        if PROOF_KEY in props:
            o.proofs = max(o.proofs, len(props[PROOF_KEY]))
        if EVIDENCE_KEY in props:
            o.evidence = props[EVIDENCE_KEY]
        if PLATFORM_RUN_KEY in props:
            o.platform_run = props[PLATFORM_RUN_KEY]
        if LACKS_KEY in props:
            o.lacks = list(props[LACKS_KEY])
        if report.skipped and o.outcome == "passed":
            o.outcome = "skipped"
            o.message = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else "skipped"
        elif report.failed and BROKEN_KEY in props and report.when == "call":
            o.outcome, o.message = "error", props[BROKEN_KEY]
        elif report.failed:
            o.outcome = "failed" if report.when == "call" else "error"
            crash = getattr(report.longrepr, "reprcrash", None)
            o.assertion = crash.message[:ASSERTION_CHARS] if crash is not None and report.when == "call" else ""
            o.message = (f"{report.when}: {crash.message}"[:500] if crash is not None else
                         (report.longreprtext or "").strip().splitlines()[-1:][0] if report.longreprtext else report.when)

    # -- the end -------------------------------------------------------------------------------------

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo) -> None:
        if isinstance(excinfo.value, KeyboardInterrupt):  # (not pytest.exit, which pytest reports here too)
            self.interrupted = True

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.usage_problems and not self.is_worker:
            import sys

            sys.stderr.write("ERROR: " + _usage_message(self.usage_problems) + "\n")
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
            return
        if self.unbuildable and not self.is_worker:
            # A worker's tests all errored on one cause, the target: the run judged part at most, so no verdict.
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
            return
        if self.is_worker or not self.active or self.usage_error or self.config.option.collectonly:
            return  # (--collect-only: nothing ran, so nothing is judged)
        if self.interrupt_seen():
            # An interrupted run judged part of the suite at most, and what it saw after the interrupt is the
            # interrupt's doing: no verdict (pairproof qualify exits 130 and publishes nothing).
            if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
                session.exitstatus = pytest.ExitCode.INTERRUPTED
            return
        if exitstatus in (pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.INTERNAL_ERROR) and not self.outcomes:
            return  # nothing was judged: a verdict would only restate the error
        self.verdict = pairing.judge(self.outcomes.values(), catalogue.load(), self.expected_refusals)
        # The refusals a case has are learnt from what was collected (rule 4); node ids on the command line
        # collect only themselves, so a variant left out that way is unknown to the verdict, not "not run".
        narrowed = [a for a in self.config.args if "::" in a]
        if narrowed:
            self.verdict["problems"].append(
                f"collection was narrowed to node ids ({', '.join(narrowed[:3])}{' ...' if len(narrowed) > 3 else ''}): "
                "which refusals a case has is not known, so no case of this run is proven covered; select with "
                "--case, -k or -m instead")
            self.verdict["status"] = "failed"
        self.verdict["run"] = self.run
        # What `pairproof scan --run` looks for to find this run's canaries (a worker's each).
        self.verdict["canaries"] = sorted(self.canary_runs)
        self.verdict["target"] = self.config.getoption("pairproof_target") or "reference"
        self.verdict["judged"] = self._judged(self.verdict["target"])
        self._judged_unchanged(self.verdict["judged"])
        self.verdict["pytest_exit"] = int(exitstatus)
        path = self.config.getoption("pairproof_verdict")
        if path:
            from reports import verdict as verdict_report

            verdict_report.write(Path(path), self.verdict)
        alluredir = self.config.getoption("allure_report_dir", None)
        if alluredir:
            from reports import allure_post

            allure_post.apply_pairing(Path(alluredir), self.verdict)
        if self.verdict["status"] != "passed" and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """What the run judges, taken as it starts: the end's must be the same (``_judged_unchanged``)."""
        if self.active and not self.is_worker:
            self._judged_at_start = self._identity(self.config.getoption("pairproof_target") or "reference")

    def _identity(self, target: str) -> dict | str:
        """``reports/identity.py``'s parts for this run, or why they cannot be named."""
        from acceptance import targets
        from acceptance.targets.profiles import load as load_profile
        from reports import identity

        given = self.config.getoption("pairproof_profile")
        try:
            return identity.of_run(target, targets.driver_module(target),
                                   load_profile(given or targets.default_profile(target)), targets.image_id(target))
        except Exception as exc:  # (an engine gone, a profile file removed under the run)
            return f"{type(exc).__name__}: {exc}"

    def _judged(self, target: str) -> dict:
        """What this run judged, by hash (``reports/identity.py``): the gate recomputes it and refuses a verdict of
        another runtime, suite, catalogue, driver, profile, probe or image. A part that cannot be named, or a
        target with images whose image cannot be, fails the run."""
        from acceptance import targets

        found = self._identity(target)
        if isinstance(found, str):
            self._judged_problem(f"what the run judged cannot be named ({found}): no gate can tie this verdict to a "
                                 "source")
            return {}
        if found.get("image") is None and targets.uses_images(target):
            self._judged_problem(f"target {target} makes its instances from an image, but the image's id cannot be "
                                 "read from the engine at the end of the run: no gate can tie this verdict to it")
        return found

    def _judged_unchanged(self, end: dict) -> None:
        """The runtime, suite, catalogue, driver, profile and probe at the end are those at the start (a file
        edited under a run would otherwise be named by a verdict it never ran); the image too, when the start
        could name one (a default image is built by the run's first instance)."""
        from reports import identity

        start = getattr(self, "_judged_at_start", None)
        if not end or start is None:
            return
        if isinstance(start, str):
            self._judged_problem(f"what the run judges could not be named as it started ({start})")
            return
        changed = [p for p in identity.PARTS if start.get(p) != end.get(p)
                   and not (p == "image" and start.get(p) is None)]
        if changed:
            self._judged_problem(f"the {', '.join(changed)} changed while the run went on (its hash at the start is "
                                 "not its hash at the end): the verdict names what it did not judge; rerun on a "
                                 "source nobody edits meanwhile")

    def _judged_problem(self, why: str) -> None:
        self.verdict["problems"].append(why)
        self.verdict["status"] = "failed"

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.verdict is None and self.active and not self.is_worker and self.interrupt_seen():
            terminalreporter.write_line("pairproof: interrupted (SIGINT or SIGTERM): nothing judged, no verdict written")
        if self.verdict is None:
            return
        from reports import verdict as verdict_report

        terminalreporter.section("pairproof verdict")
        for line in verdict_report.table(self.verdict).splitlines():
            terminalreporter.write_line(line)
        for problem in self.verdict["problems"]:
            terminalreporter.write_line(f"  ! {problem}")
