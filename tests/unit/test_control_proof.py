"""Issue 27 item 13: a control proves what it observed, as a refusal does; platform calls made through a case's
view carry a request id of the harness's, and the platform's record naming it is the call's proof."""

from __future__ import annotations

from acceptance.catalogue import load
from acceptance.contract import TargetView
from acceptance.harness.pairing import Declared, Outcome, judge
from acceptance.harness.probes import ProbeLog, proving_calls


def _rs1(control_proofs: int) -> dict:
    outcomes = [Outcome(Declared("t::r", "RS-1", "refusal", "A"), proofs=1),
                Outcome(Declared("t::p", "RS-1", "P", "A"), proofs=control_proofs)]
    return next(c for c in judge(outcomes, load())["cases"] if c["id"] == "RS-1")


def test_a_control_without_proof_is_broken_and_so_is_its_refusal():
    case = _rs1(0)
    [control] = case["controls"]["P"]["tests"]
    assert (case["status"], control["status"], control["proofs"]) == ("broken", "broken", 0)
    assert "no proof of execution" in control["reason"]
    assert case["refusals"][0]["status"] == "broken" and "control P" in case["refusals"][0]["reason"]
    assert _rs1(1)["status"] == "passed"


class Platform:
    """A driver whose record names the request ids it was given, unless ``forget``."""
    name = "fake"

    def __init__(self, forget: bool = False) -> None:
        self.forget, self.lines, self.headers = forget, ["started"], []

    def turn(self, ref, message, *, request_id=""):
        self.lines.append(f"turn answered [{'' if self.forget else request_id}]")
        return "ok"

    def read_back(self, ref, location):  # no request id in its signature: called as it is
        return "memory"

    def person(self, principal):
        platform = self

        class Client:
            def request(self, method, path, body=None, headers=None):
                platform.headers.append(dict(headers or {}))
                platform.lines.append(f"{method} {path} rid={(headers or {}).get('X-Request-Id', '')}")
                return 200, {}
        return Client()


def _view(platform: Platform) -> tuple[TargetView, ProbeLog]:
    log = ProbeLog(nonce="n", in_call=True)
    log.platform_record = lambda: "\n".join(platform.lines)
    return TargetView(platform, "SH-1", ["product"], wrap=proving_calls(log)), log


def test_a_platform_call_is_proved_by_the_record_naming_its_id_and_only_then():
    platform = Platform()
    view, log = _view(platform)
    assert view.turn(None, "hi") == "ok" and view.read_back(None, "memory") == "memory"
    assert view.person(None).request("GET", "/api/records")[0] == 200
    log.settle_calls()
    assert len(log.proofs()) == 2 and all("platform call" in p for p in log.proofs())
    forgetful = Platform(forget=True)
    view, log = _view(forgetful)
    view.turn(None, "hi")
    log.settle_calls()
    assert log.proofs() == [] and log.unproved() == []  # no proof, and no failure: the call lends nothing


def test_an_id_the_test_gives_is_left_alone_and_the_wrapped_call_is_the_method():
    platform = Platform()
    view, log = _view(platform)
    view.turn(None, "hi", request_id="pp-mine")
    view.person(None).request("GET", "/x", headers={"x-request-id": "pp-theirs"})
    assert platform.lines[1:] == ["turn answered [pp-mine]", "GET /x rid="]
    assert platform.headers == [{"x-request-id": "pp-theirs"}]
    log.settle_calls()
    assert log.proofs() == []  # the test's own ids are the test's to confirm
    assert view.turn == platform.turn and view.turn == view.turn and hash(view.turn) == hash(platform.turn)


def test_a_call_outside_the_test_body_or_with_an_unreadable_record_lends_no_proof():
    """A fixture's call (an instance provisioned for the test) is made with an id but proves nothing the test read;
    a record that cannot be read is noted, not raised (a finding stays a finding)."""
    platform = Platform()
    view, log = _view(platform)
    log.in_call = False
    view.turn(None, "from a fixture")
    log.in_call = True
    log.settle_calls()
    assert log.proofs() == [] and "[pp-" in platform.lines[-1]

    def unreadable():
        raise OSError("the provider is gone")
    view.turn(None, "hi")
    log.platform_record = unreadable
    log.settle_calls()
    assert log.proofs() == [] and log.evidence[-1]["kind"] == "platform calls unproved"
