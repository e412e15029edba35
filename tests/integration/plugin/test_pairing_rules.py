"""The plugin's rules (DESIGN §5), run from outside with pytester, in one process and under xdist."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

SUPPORT = str(Path(__file__).resolve().parents[2])
CHECKOUT = str(Path(__file__).resolve().parents[3])  # this checkout's plugin, not an installed copy
MODES = [pytest.param([], id="single"), pytest.param(["-n", "2"], id="xdist")]

PROBING = """
import pytest

@pytest.mark.case("RS-1", "refusal", pair="A")
def test_refusal(sandbox_host, instances):
    assert sandbox_host(instances["A"]).run("true").rc == 0

@pytest.mark.case("RS-1", "P", pair="A")
def test_control(sandbox_host, instances):
    assert sandbox_host(instances["A"]).run("echo ok").stdout.strip() == "{control_output}"
"""


@pytest.fixture
def run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([CHECKOUT, SUPPORT]))

    def go(source: str, *args: str):
        pytester.makepyfile(test_cases=source)
        verdict = pytester.path / "verdict.json"
        result = pytester.runpytest_subprocess(
            "--target", "support.local_target:create", "--pairproof-verdict", str(verdict), "-p", "no:cacheprovider", *args)
        return result, (json.loads(verdict.read_text()) if verdict.exists() else None)
    return go


def _case(verdict: dict, case_id: str) -> dict:
    return next(c for c in verdict["cases"] if c["id"] == case_id)


@pytest.mark.parametrize("mode", MODES)
def test_paired_refusal_with_proof_passes(run, mode):
    """A refusal that probed (with proof) and whose control passed is a passed case; exit 0."""
    result, verdict = run(PROBING.format(control_output="ok"), *mode)
    assert result.ret == 0
    assert _case(verdict, "RS-1")["status"] == "passed"
    assert _case(verdict, "RS-1")["refusals"][0]["proofs"] == 1


@pytest.mark.parametrize("mode", MODES)
def test_refusal_whose_control_failed_is_broken(run, mode):
    """The refusal itself passed, but its positive control failed: the case is broken and the run fails."""
    result, verdict = run(PROBING.format(control_output="not what it prints"), *mode)
    assert result.ret == 1
    case = _case(verdict, "RS-1")
    assert case["status"] == "broken"
    assert case["refusals"][0]["status"] == "broken"
    assert "control P" in case["refusals"][0]["reason"]


@pytest.mark.parametrize("mode", MODES)
def test_missing_control_is_a_usage_error_naming_it(run, mode):
    """A refusal of a case whose catalogued control no test implements stops the run at collection."""
    source = """
import pytest

@pytest.mark.case("RS-1", "refusal")
def test_refusal():
    pass
"""
    result, verdict = run(source, *mode)
    assert result.ret != 0
    output = result.stdout.str() + result.stderr.str()
    assert "case RS-1 declares control P (the same allocation lives under a 1 GB limit) but no collected test" in output
    assert verdict is None, "a run stopped by a usage error must not leave a verdict behind"


@pytest.mark.parametrize("mode", MODES)
def test_selecting_only_the_refusal_pulls_in_its_control(run, mode):
    """-k picking the refusal alone still runs its control, so the verdict can pair them."""
    result, verdict = run(PROBING.format(control_output="ok"), "-k", "test_refusal", *mode)
    assert result.ret == 0
    result.assert_outcomes(passed=2)
    assert _case(verdict, "RS-1")["controls"]["P"]["status"] == "passed"


@pytest.mark.parametrize("mode", MODES)
def test_refusal_without_proof_is_broken(run, mode):
    """A refusal that never probed its sandbox proves nothing: broken, run fails."""
    source = """
import pytest

@pytest.mark.case("RS-1", "refusal")
def test_refusal():
    assert True

@pytest.mark.case("RS-1", "P")
def test_control():
    assert True
"""
    result, verdict = run(source, *mode)
    assert result.ret == 1
    assert "no proof of execution" in _case(verdict, "RS-1")["refusals"][0]["reason"]


@pytest.mark.parametrize("mode", MODES)
def test_skipped_refusal_is_not_a_pass(run, mode):
    """A skipped refusal leaves its case skipped and the run failing."""
    source = PROBING.format(control_output="ok").replace(
        "def test_refusal(sandbox_host, instances):", "def test_refusal(sandbox_host, instances):\n    pytest.skip('no reason')")
    result, verdict = run(source, *mode)
    assert result.ret == 1
    assert _case(verdict, "RS-1")["status"] == "skipped"


@pytest.mark.parametrize("mode", MODES)
def test_zero_selected_cases_fails(run, mode):
    """A run on a target that selects no case fails, whatever pytest thinks of it."""
    result, verdict = run(PROBING.format(control_output="ok"), "-k", "nothing_matches_this", *mode)
    assert result.ret != 0
    if verdict is not None:
        assert verdict["status"] == "failed"


def test_unknown_case_id_is_a_usage_error(run):
    source = """
import pytest

@pytest.mark.case("ZZ-9", "refusal")
def test_refusal():
    pass
"""
    result, _ = run(source)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*names case 'ZZ-9', which is not in acceptance/catalogue.toml*"])


def test_plugin_is_inert_without_cases(pytester: pytest.Pytester):
    """A project that does not use pairproof sees no rule and no runtime: a plain test passes."""
    pytester.makepyfile("def test_plain():\n    assert True\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == 0
    assert "pairproof verdict" not in result.stdout.str()


@pytest.mark.parametrize("mode", MODES)
def test_an_exception_other_than_an_assertion_is_broken_not_failed(run, mode):
    """Only an assertion is a finding; a refusal that crashed could not judge and is broken."""
    source = PROBING.format(control_output="ok").replace(
        'assert sandbox_host(instances["A"]).run("true").rc == 0',
        'sandbox_host(instances["A"]).run("true")\n    raise RuntimeError("the target fell over")')
    result, verdict = run(source, *mode)
    assert result.ret == 1
    refusal = _case(verdict, "RS-1")["refusals"][0]
    assert (refusal["status"], _case(verdict, "RS-1")["status"]) == ("broken", "broken")
    assert "RuntimeError: the target fell over" in refusal["reason"]


@pytest.mark.parametrize("mode", MODES)
def test_an_interrupt_that_comes_back_as_a_target_error_is_judged_not_at_all(run, mode):
    """Issue 27 item 11: a SIGINT that lands inside a driver call can come back as the driver's error (the
    sandbox it killed "is not running") instead of a KeyboardInterrupt. The run stops there, judges nothing
    (no case broken by it) and writes no verdict; pytest's exit says interrupted."""
    source = PROBING.format(control_output="ok").replace(
        'assert sandbox_host(instances["A"]).run("true").rc == 0',
        'sandbox_host(instances["A"]).run("true")\n'
        '    import os, signal, time\n'
        '    from acceptance.errors import TargetError\n'
        '    try:\n'
        '        os.kill(os.getpid(), signal.SIGINT)\n'
        '        time.sleep(5)\n'
        '    except KeyboardInterrupt:\n'
        '        raise TargetError("instance org1-alice-0 is not running") from None')
    result, verdict = run(source, *mode)
    output = result.stdout.str()
    assert verdict is None, f"an interrupted run wrote a verdict: {verdict['problems']}"
    assert result.ret == pytest.ExitCode.INTERRUPTED, output[-2000:]
    assert "test_control PASSED" not in output and "1 passed" not in output, output[-2000:]


@pytest.mark.parametrize("mode", MODES)
def test_a_probe_whose_result_nobody_read_lends_a_refusal_no_proof(run, mode):
    """Issue 27 item 13: a refusal's proof is that of the probes whose results it read (or the harness helper
    that made its observation read: a scan, a file test). A probe run beside an observation made another way,
    its result never read (NT-5's ``run("true")``), proves nothing about what was judged: broken, no proof."""
    source = PROBING.format(control_output="ok").replace(
        'assert sandbox_host(instances["A"]).run("true").rc == 0',
        'sandbox_host(instances["A"]).run("true")  # (its result never read)\n    assert set() == set()')
    result, verdict = run(source, *mode)
    assert result.ret == 1
    refusal = _case(verdict, "RS-1")["refusals"][0]
    assert (refusal["status"], refusal["proofs"]) == ("broken", 0), refusal


@pytest.mark.parametrize("mode", MODES)
def test_a_failed_assertion_in_a_refusal_is_a_failed_case(run, mode):
    """A refusal whose detector found something fails the case (and the run)."""
    source = PROBING.format(control_output="ok").replace(
        'assert sandbox_host(instances["A"]).run("true").rc == 0', 'assert sandbox_host(instances["A"]).run("false").rc == 0')
    result, verdict = run(source, *mode)
    assert result.ret == 1
    assert _case(verdict, "RS-1")["status"] == "failed"


@pytest.mark.parametrize("mode", MODES)
def test_a_refusal_that_did_not_raise_is_a_failed_case(run, mode):
    """``pytest.raises`` around an operation the platform should refuse: when it goes ahead, pytest's
    "DID NOT RAISE" is the test's verdict, a finding like an assertion, not a crash."""
    source = PROBING.format(control_output="ok").replace(
        'assert sandbox_host(instances["A"]).run("true").rc == 0',
        'sandbox_host(instances["A"]).run("true")\n    with pytest.raises(PermissionError):\n        pass')
    result, verdict = run(source, *mode)
    assert result.ret == 1
    assert _case(verdict, "RS-1")["status"] == "failed"


# -- issue 12: hollow passes the plugin now refuses ---------------------------------------------------

VARIANTS = """
import pytest

@pytest.mark.parametrize("who", [pytest.param(n, marks=pytest.mark.case("RS-1", "refusal", pair=n), id=n)
                                 for n in ("bob", "carol")])
def test_refusal(who, sandbox_host, instances):
    assert sandbox_host(instances["A"]).run("true").rc == 0

@pytest.mark.case("RS-1", "P", pair="A")
def test_control(sandbox_host, instances):
    assert sandbox_host(instances["A"]).run("echo ok").stdout.strip() == "ok"
"""


@pytest.mark.parametrize("mode", MODES)
def test_a_deselected_refusal_variant_leaves_its_case_not_covered(run, mode):
    """Finding 4: `-k "not carol"` used to leave RS-1 passed on the variant left. Every refusal the suite
    has for a case must run; a case with one not run is *not covered* and the run fails."""
    result, verdict = run(VARIANTS, "-k", "not carol", *mode)
    case = _case(verdict, "RS-1")
    assert (case["status"], result.ret) == ("not covered", 1)
    assert case["expected_refusals"] == ["test_cases.py::test_refusal[bob]", "test_cases.py::test_refusal[carol]"]
    assert "test_cases.py::test_refusal[carol]" in case["reason"]
    assert verdict["status"] == "failed"
    full, verdict = run(VARIANTS, *mode)
    assert (_case(verdict, "RS-1")["status"], full.ret) == ("passed", 0)


def test_a_refusal_and_its_control_judged_on_two_platform_runs_is_broken(run, pytester):
    """Finding 5: under xdist a refusal and its control ran on two workers, i.e. two platforms, and were
    merged by case. Now the verdict sees the two platform runs and calls the case broken."""
    pytester.makepyfile(test_control_side="""
import pytest

@pytest.mark.case("RS-1", "P", pair="A")
def test_control(sandbox_host, instances):
    assert sandbox_host(instances["A"]).run("echo ok").stdout.strip() == "ok"
""")
    refusal_only = PROBING.split('@pytest.mark.case("RS-1", "P"')[0]
    result, verdict = run(refusal_only, "-n", "2", "--dist", "loadfile")
    case = _case(verdict, "RS-1")
    assert (case["status"], result.ret) == ("broken", 1)
    assert "different platform runs" in case["reason"]


@pytest.mark.parametrize("mode", MODES)
def test_an_unmarked_test_in_the_suite_is_a_usage_error(run, mode):
    """Finding 6: a test without a case mark was ignored by pairing and its failure accepted. In a
    pairproof session it is now a usage error naming it."""
    result, verdict = run(PROBING.format(control_output="ok") + "\n\ndef test_forgotten():\n    assert False\n", *mode)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "test_cases.py::test_forgotten has no @pytest.mark.case" in result.stdout.str() + result.stderr.str()
    assert verdict is None


@pytest.mark.parametrize("mode", MODES)
def test_an_assertion_raised_by_a_harness_helper_is_broken_not_a_finding(run, pytester, mode):
    """Finding 17: a helper's deadline raised AssertionError and counted as a finding (and as a mutant
    kill). An assertion from outside the case code is the harness failing: broken."""
    pytester.makepyfile(waiting="""
def until(predicate, what):
    assert predicate(), f"{what} did not happen within the deadline"
""")
    source = PROBING.format(control_output="ok").replace(
        'assert sandbox_host(instances["A"]).run("true").rc == 0',
        'import waiting\n    sandbox_host(instances["A"]).run("true")\n    waiting.until(lambda: False, "the effect")')
    result, verdict = run(source, *mode)
    refusal = _case(verdict, "RS-1")["refusals"][0]
    assert (refusal["status"], result.ret) == ("broken", 1)
    assert "harness assertion at" in refusal["reason"] and "waiting.py" in refusal["reason"]


PLATFORM_PROBING = """
import pytest

@pytest.mark.case("RS-1", "refusal", pair="A")
def test_refusal(probe_log, instances):
    nonce = probe_log.platform_probe(instances["A"], "a request to the platform")
    {confirm}

@pytest.mark.case("RS-1", "P", pair="A")
def test_control(sandbox_host, instances):
    assert sandbox_host(instances["A"]).run("echo ok").stdout.strip() == "ok"
"""


@pytest.mark.parametrize("confirm,reason", [
    pytest.param("pass", "never confirmed", id="never-confirmed"),
    # What the old witness did: proof from a record that does not name this probe (the test's own words).
    pytest.param("probe_log.confirm(nonce, 'refused model call: generation_stale')", "ProofError", id="not-in-record"),
])
def test_a_platform_probe_the_platform_did_not_record_is_broken(run, confirm, reason):
    """A refusal whose only probe is platform-side passes only with the platform's record of that probe's id;
    otherwise the case is broken, never passed."""
    result, verdict = run(PLATFORM_PROBING.format(confirm=confirm))
    assert result.ret == 1
    refusal = _case(verdict, "RS-1")["refusals"][0]
    assert (refusal["status"], refusal["proofs"]) == ("broken", 0)
    assert reason in refusal["reason"]


def test_a_platform_probe_the_platform_recorded_is_proof(run):
    result, verdict = run(PLATFORM_PROBING.format(confirm="probe_log.confirm(nonce, f'INFO [{nonce}] answered 403')"))
    assert result.ret == 0
    assert _case(verdict, "RS-1")["refusals"][0] == {**_case(verdict, "RS-1")["refusals"][0], "status": "passed", "proofs": 1}


# -- review of issue 12: hollow passes found after the rules landed ----------------------------------

CAUGHT = """
import pytest
from acceptance.errors import ProofError

@pytest.mark.case("RS-1", "refusal", pair="A")
def test_refusal(sandbox_host, instances, {fixtures}):
    {body}

@pytest.mark.case("RS-1", "P", pair="A")
def test_control(sandbox_host, instances):
    assert sandbox_host(instances["A"]).run("echo ok").stdout.strip() == "ok"
"""


@pytest.mark.parametrize("body", [
    # A scan that did not prove it looked (a canary planted for the prober is not found), its ProofError
    # swallowed by the test: the detector's probe still carried a valid proof line. It scans /proc (the
    # instance's own pid namespace), not /tmp: the local target shares the host's /tmp, whose size is the
    # machine's, and a scan of it once ran past the probe's 120 s on a CI machine.
    pytest.param("from acceptance.harness import probes as probe\n"
                 "    try:\n        probe.scan(sandbox_host(instances['A']), ['/proc'], own={'never-planted'})\n"
                 "    except ProofError:\n        pass", id="scan-proof-error-caught"),
    pytest.param("sandbox_host(instances['A']).run('true')\n"
                 "    try:\n        probe_log.confirm(probe_log.platform_probe(instances['A'], 'x'), 'nothing')\n"
                 "    except Exception:\n        pass", id="confirm-error-caught"),
])
@pytest.mark.parametrize("mode", MODES)
def test_a_proof_error_the_refusal_caught_is_still_broken(run, body, mode):
    """A refusal that catches the harness's ProofError (``except Exception`` around a scan, say) and goes
    on used to pass on the proofs of its other probes: the probe that failed to prove itself is still a
    probe that did not look."""
    result, verdict = run(CAUGHT.format(fixtures="probe_log", body=body), *mode)
    refusal = _case(verdict, "RS-1")["refusals"][0]
    assert (refusal["status"], result.ret) == ("broken", 1), refusal
    assert "ProofError" in refusal["reason"]


def test_a_platform_probe_left_unconfirmed_is_broken_even_with_other_proofs(run):
    """The refusal's real check was a platform-side request it never confirmed; a ``true`` probe in the
    sandbox gave it a proof. Every platform probe a test takes must be confirmed, or it did not look."""
    source = PLATFORM_PROBING.format(confirm="pass").replace(
        "def test_refusal(probe_log, instances):", "def test_refusal(probe_log, instances, sandbox_host):\n"
        "    sandbox_host(instances['A']).run('true')")
    result, verdict = run(source)
    refusal = _case(verdict, "RS-1")["refusals"][0]
    assert (refusal["status"], result.ret) == ("broken", 1), refusal
    assert "never confirmed" in refusal["reason"]


def test_a_refusal_that_asserts_before_confirming_still_fails(run):
    """A finding made before the platform probe was confirmed stays a finding (a mutant kill)."""
    source = PLATFORM_PROBING.format(confirm="assert False, 'the platform answered 200'")
    result, verdict = run(source)
    assert (_case(verdict, "RS-1")["status"], result.ret) == ("failed", 1)


BLIND_SCAN = """
import pytest
from acceptance.harness import fixtures

fixtures.VISIBLE_ROOTS[:] = ["/tmp", "/proc"]  # a small scan: A's /tmp is a fresh tmpfs of its own (below)

@pytest.mark.case("RS-1", "P", pair="A")
def test_control(sandbox_host, instances, planted):
    # The control plants (through the local target, whose plant writes nowhere: a sandbox blind to
    # where its canaries are, like a scan that does not look where the instance keeps them).
    assert sandbox_host(instances["A"]).run("mount -t tmpfs none /tmp").rc == 0

@pytest.mark.case("RS-1", "refusal", pair="A")
def test_refusal(sandbox_host, instances, scan_visible{planted}):
    scan_visible(sandbox_host(instances["A"]))  # (what it asserts of the hits does not matter here)
"""


@pytest.mark.parametrize("planted", [pytest.param("", id="without-planted"), pytest.param(", planted", id="with-planted")])
def test_a_scan_of_a_planted_instance_must_find_its_canaries_whether_or_not_the_test_asked_for_them(run, planted):
    """Review of issue 12: a scan's own canaries were taken only when the test requested ``planted``; a
    refusal that did not (it looks for nothing by name, say) scanned A, planted by then, without having
    to find A's canaries. Whatever the test requested, a scan of an instance with canaries planted in it
    must find them."""
    result, verdict = run(BLIND_SCAN.format(planted=planted))
    refusal = _case(verdict, "RS-1")["refusals"][0]
    assert (refusal["status"], result.ret) == ("broken", 1), refusal
    assert "prober's own canaries" in refusal["reason"]


FOREIGN_SCAN = """
import pytest
from acceptance.harness import fixtures

fixtures.VISIBLE_ROOTS[:] = ["/tmp", "/proc"]  # a scan that cannot find B's own canaries (the local target keeps none)

@pytest.mark.case("RS-1", "P", pair="A")
def test_control(sandbox_host, instances):
    assert sandbox_host(instances["A"]).run("echo ok").stdout.strip() == "ok"

@pytest.mark.case("RS-1", "refusal", pair="B")
def test_refusal(sandbox_host, instances, scan_visible, planted):
    b = sandbox_host(instances["B"])
    assert b.run("mount -t tmpfs none /tmp").rc == 0  # B's own /tmp: a small scan, nothing of the host's in it
    left = {left}
    if left:
        assert b.run("printf %s " + sorted(planted.of("A"))[0] + " > /tmp/left-by-a").rc == 0
    assert scan_visible(b) & planted.of("A") == set()
"""


@pytest.mark.parametrize("left", [True, False], ids=["a-canary-seen", "nothing-seen"])
def test_an_incomplete_scan_that_saw_another_principal_s_canary_is_a_finding(run, left):
    """The class of FS-2's fix, for the scans: an incomplete scan (it did not find B's own canaries) that found
    A's canary where B can see it is a failed refusal, the leak its finding; once it was *broken*, the leak
    hidden behind the scan's own incompleteness. Nothing of anyone else's seen, the same scan proves nothing:
    broken."""
    result, verdict = run(FOREIGN_SCAN.format(left=left))
    refusal = _case(verdict, "RS-1")["refusals"][0]
    if left:
        assert refusal["status"] == "failed", refusal
    else:
        assert refusal["status"] == "broken" and "prober's own canaries" in refusal["reason"], refusal
    assert result.ret == 1


@pytest.mark.parametrize("selection", [
    pytest.param(["test_cases.py::test_refusal[bob]", "test_cases.py::test_control"], id="node-ids"),
    pytest.param(["--deselect", "test_cases.py::test_refusal[carol]"], id="deselect"),
])
@pytest.mark.parametrize("mode", MODES)
def test_a_refusal_variant_left_out_by_node_id_leaves_its_case_not_covered(run, selection, mode):
    """Review of issue 12: the refusals a case has were learnt from what pytest collected, and naming node
    ids on the command line collects only those: RS-1 passed on bob alone, carol never collected. A run
    whose collection was narrowed below the module cannot say which refusals a case has: its verdict fails."""
    result, verdict = run(VARIANTS, *selection, *mode)
    assert result.ret == 1
    assert verdict["status"] == "failed"
    assert _case(verdict, "RS-1")["status"] != "passed" or any("node id" in p for p in verdict["problems"])


@pytest.mark.parametrize("blocked", ["pairproof-session", "pairproof-fixtures"])
def test_blocking_a_part_of_the_plugin_is_a_usage_error(run, blocked):
    """Review of issue 12: ``-p no:pairproof-session`` silently dropped every rule (no pairing, no proof
    check, no verdict) and a refusal without a single probe exited 0. A session with part of pairproof
    blocked cannot judge anything: usage error."""
    source = PROBING.format(control_output="ok").replace(
        'assert sandbox_host(instances["A"]).run("true").rc == 0', "pass")
    result, verdict = run(source, "-p", f"no:{blocked}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()[-500:]
    assert verdict is None


@pytest.mark.parametrize("mode", MODES)
def test_a_control_that_never_probed_does_not_support_a_refusal(run, mode):
    """Issue 27 item 13: a control needs proof as a refusal does. A P control that asserts over an empty set (or
    nothing) once supported a refusal as well as one that reached the canary; now it is broken, and so is the case."""
    source = PROBING.format(control_output="ok").replace(
        'def test_control(sandbox_host, instances):\n    assert sandbox_host(instances["A"]).run("echo ok")'
        '.stdout.strip() == "ok"', "def test_control():\n    assert set() <= set()")
    result, verdict = run(source, *mode)
    assert result.ret == 1
    case = _case(verdict, "RS-1")
    assert case["status"] == "broken"
    [control] = case["controls"]["P"]["tests"]
    assert (control["status"], control["proofs"]) == ("broken", 0)
    assert "no proof of execution" in control["reason"] and "control P" in case["refusals"][0]["reason"]


# PROBING with a control that observes through the platform only: a turn answered.
PLATFORM_CONTROL = PROBING.format(control_output="ok").replace(
    'def test_control(sandbox_host, instances):\n    assert sandbox_host(instances["A"]).run("echo ok").stdout.strip() == "ok"',
    'def test_control(target, instances):\n    assert target.turn(instances["A"], "hello") == "ok"')


@pytest.mark.parametrize("factory,status,proofs", [
    pytest.param("create", "passed", 1, id="recorded"),
    pytest.param("create_forgetful", "broken", 0, id="not-recorded"),
])
def test_a_control_observing_through_the_platform_is_proved_by_its_record(run, factory, status, proofs):
    """A control that observes through a platform call (a turn answered) proves it by the platform's own record of
    that call: the harness gives the call a request id of its own, and the record naming it is the proof. A
    platform that recorded nothing of the call leaves the control unproved, and the case broken."""
    result, verdict = run(PLATFORM_CONTROL, "--target", f"support.recording_target:{factory}")
    [control] = _case(verdict, "RS-1")["controls"]["P"]["tests"]
    assert (control["status"], control["proofs"]) == (status, proofs), control
    assert _case(verdict, "RS-1")["status"] == status


FIXTURE_CALL = """
import pytest

@pytest.fixture
def greeted(target, instances):
    return target.turn(instances["A"], "hello")

@pytest.mark.case("RS-1", "refusal", pair="A")
def test_refusal({refusal_args}):
    {refusal_body}

@pytest.mark.case("RS-1", "P", pair="A")
def test_control({control_args}):
    {control_body}
"""


@pytest.mark.parametrize("parts,who", [
    pytest.param(dict(refusal_args="sandbox_host, instances", refusal_body='sandbox_host(instances["A"]).run("true").rc',
                      control_args="greeted", control_body="assert greeted == 'ok'"), "control", id="fixture-call"),
    pytest.param(dict(refusal_args="target, instances", refusal_body='assert target.turn(instances["A"], "x") == "ok"',
                      control_args="target, instances", control_body='assert target.turn(instances["A"], "y") == "ok"'),
                 "refusal", id="refusal-turn"),
])
def test_a_platform_call_proves_only_a_control_s_own_body(run, parts, who):
    """Review of item 13: a call a fixture made for the test (an instance provisioned, a turn) lends the test no
    proof, and a refusal never takes proof from a platform call on its way (only its probes and confirmed
    platform probes): either alone leaves the case broken."""
    result, verdict = run(FIXTURE_CALL.format(**parts), "--target", "support.recording_target:create")
    case = _case(verdict, "RS-1")
    proofs = case["controls"]["P"]["tests"][0]["proofs"] if who == "control" else case["refusals"][0]["proofs"]
    assert (case["status"], proofs) == ("broken", 0), case
