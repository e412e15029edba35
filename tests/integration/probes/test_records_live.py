"""hostscan.tokens_in_records: the platform log scanned alone and joined by the suite's engine (the static probe
and detect.py), which proves in the same run that its join sees a cut token; a crippled join or one past its
bound is a ProofError, never a clean log. Runs the engines as processes, so not in the unit tier."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest
from support.split_logs import FORMS, TOKEN, log_lines, noise

from acceptance.errors import ProofError
from acceptance.harness import hostscan
from acceptance.harness import probes as probe
from canaries import records


@pytest.fixture(params=["static probe", "detect.py"])
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "static probe":
        binary = Path(os.environ.get("PAIRPROOF_PROBE", probe.PROBE_BUILT))
        if not binary.exists():
            pytest.fail(f"no static probe at {binary}: run tools/build-probe (tools/setup-machine does)")
        monkeypatch.setenv("PAIRPROOF_PROBE", str(binary))
    else:
        monkeypatch.delenv("PAIRPROOF_PROBE", raising=False)
        monkeypatch.setattr(probe, "PROBE_BUILT", Path("/nonexistent/ppscan"))
    return request.param


@pytest.mark.parametrize("form", sorted(FORMS))
def test_the_joined_host_scan_finds_each_form(engine: str, form: str) -> None:
    assert hostscan.tokens_in_records(FORMS[form](), "a log") == {TOKEN}


def test_the_joined_host_scan_of_a_clean_log_finds_nothing(engine: str) -> None:
    assert hostscan.tokens_in_records(log_lines(*noise()), "a log") == set()


def test_a_join_that_cannot_see_is_a_proof_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """The X control of the helper: with the join crippled (no views), its own split sentinels go unseen and
    the scan is broken, never clean."""
    real = records.join_records

    def blind(data: bytes, where: str = "records", **kwargs: int) -> records.Joined:
        joined = real(data, where, **kwargs)
        joined.views = [(label, view) for label, view in joined.views if label.endswith("(joined lines)")]
        return joined

    monkeypatch.setattr(records, "join_records", blind)
    with pytest.raises(ProofError, match="did not prove it joins"):
        hostscan.tokens_in_records(FORMS["base64 halves on two lines"](), "a log")


def test_a_join_past_its_bound_is_a_proof_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(records, "MAX_VIEW_BYTES", 10)
    with pytest.raises(ProofError, match="could not build every view"):
        hostscan.tokens_in_records(FORMS["base64 halves on two lines"](), "a log")


def test_stored_bytes_are_joined_too(engine: str) -> None:
    """The at-rest scan (SN-1's) joins the records of every layer it opens: hex lines inside a gzip stream."""
    scan, judged = hostscan.at_rest(b"header\0" + gzip.compress(FORMS["hex in 64-character lines"]()), "a store")
    assert scan.problems == []
    assert scan.tokens == judged.tokens == {TOKEN}
