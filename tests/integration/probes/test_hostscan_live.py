"""acceptance.harness.hostscan: the host-side scans run the suite's engine, prove in the same run that it sees every
encoding it claims, and name it; a blind, crippled or failing engine makes the scan a ProofError, never a pass.

The part of tests/unit/test_hostscan.py that the unit tier cannot hold: they run the scan engines as processes."""

from __future__ import annotations

import gzip
import os
import stat
import sys
import tempfile
from pathlib import Path

import pytest

from acceptance.errors import ProofError
from acceptance.harness import hostscan
from acceptance.harness import probes as probe
from canaries import Mint, detect

MINT = Mint("0123abcd")
TOKEN = MINT.mint("a", "mem").token
OTHER = MINT.mint("a", "tr").token


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The static probe as the engine, and a private TMPDIR to see that nothing is left behind in it."""
    binary = Path(os.environ.get("PAIRPROOF_PROBE", probe.PROBE_BUILT))
    if not binary.exists():
        pytest.fail(f"no static probe at {binary}: run tools/build-probe (tools/setup-machine does)")
    monkeypatch.setenv("PAIRPROOF_PROBE", str(binary))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", None)
    return binary


def _script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_bytes_are_scanned_by_the_static_probe_and_hits_carry_their_labels(built: Path, tmp_path: Path) -> None:
    """Hits in bytes held in memory come back under the caller's label, the engine's layer suffix kept, with
    encodings detect.py does not know; the evidence names the engine and counts what was asked apart from the
    sentinels; the private folder is gone after."""
    # All but the first character escaped: a fully escaped token whose first is a digit ("%30...") is also read
    # from inside its first escape, a second hit of the same token (both scanners try every start).
    percent = (OTHER[0] + "".join(f"%{ord(c):02x}" for c in OTHER[1:])).encode()
    log = probe.ProbeLog("n")
    judged = hostscan.scan_blobs([("the log", b"x " + TOKEN.encode()), ("a backup", gzip.compress(percent))],
                                 "two blobs", log=log)
    assert {(h["token"], h["encoding"], h["where"]) for h in judged.hits} == {
        (TOKEN, "raw", "the log"), (OTHER, "percent", "a backup (gzip)")}
    (evidence,) = log.evidence
    assert evidence["kind"] == "host scan" and evidence["engine"] == f"static probe {built}"
    assert (evidence["files"], evidence["hits"], evidence["could_not_read"]) == (2, 2, 0)
    assert list((tmp_path / "tmp").iterdir()) == []


def test_at_rest_opens_layers_anywhere_and_the_engine_decodes_within(built: Path) -> None:
    """A gzip stream behind a store's header is opened by find_at_rest and its layer searched by the probe, which
    finds a JSON-escaped token; the probe carves the same stream out of the whole blob too (issue 26)."""
    escaped = (TOKEN[0] + "".join(f"\\u{ord(c):04x}" for c in TOKEN[1:])).encode()
    scan, judged = hostscan.at_rest(b"STORE-HEADER\x00\x01" + gzip.compress(escaped), "snap")
    assert sorted((h.token, h.encoding, h.where) for h in scan.hits) == [
        (TOKEN, "json-escape", "snap (gzip@14)"), (TOKEN, "json-escape", "snap > gzip@14")]
    assert scan.problems == [] and judged.report.engine == f"static probe {built}"


def test_host_files_are_read_in_place(built: Path, tmp_path: Path) -> None:
    capture = tmp_path / "sink.pcap"
    capture.write_bytes(b"\xd4\xc3\xb2\xa1" + b"\x00" * 40 + b"\x18" + TOKEN.encode() + b"\x03lab\x07example\x00")
    judged = hostscan.scan_files([capture], "the pcap")
    assert [(h["token"], h["where"]) for h in judged.hits] == [(TOKEN, str(capture))]
    with pytest.raises(ProofError, match="does not exist"):
        hostscan.scan_files([tmp_path / "absent.pcap"], "the pcap")


def test_an_engine_blind_to_an_encoding_it_claims_is_a_proof_error(built: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """detect.py standing in for the static probe finds the token, and the sentinels in percent, JSON escapes, DNS
    labels and the streams the standard library reads, but not zstd nor archive members: the scan did not prove
    it looked, and the log keeps the failure."""
    stand_in = _script(tmp_path / "ppscan", "#!" + sys.executable + " -I\n" + Path(detect.__file__).read_text())
    monkeypatch.setenv("PAIRPROOF_PROBE", str(stand_in))
    log = probe.ProbeLog("n")
    with pytest.raises(ProofError, match="blind to that encoding") as caught:
        hostscan.scan_blobs([("the log", TOKEN.encode())], "the log", log=log)
    for missed in ("(zstd)", "(member m.gz)"):
        assert missed in str(caught.value)
    for seen in ("percent", "json-escape", "dns-labels", "s.gz (gzip)"):
        assert seen not in str(caught.value)
    assert log.failures == [str(caught.value)]


@pytest.mark.parametrize("report", [
    pytest.param('{"scanned_files": 9, "errors": 0, "bytes": 1, "truncated": 0, "problems": [], "end": "pairproof-scan-end"}',
                 id="hides-every-hit"),
    pytest.param('{"scanned_files": 0, "errors": 0, "bytes": 0, "truncated": 0, "problems": []}', id="no-end-mark"),
])
def test_an_engine_that_reports_nothing_real_is_a_proof_error(built: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch, report: str) -> None:
    monkeypatch.setenv("PAIRPROOF_PROBE", str(_script(tmp_path / "ppscan", f"#!/bin/sh\necho '{report}'\n")))
    with pytest.raises(ProofError):
        hostscan.tokens_in(TOKEN.encode(), "the log")


def test_an_engine_that_reads_fewer_files_or_cuts_one_short_is_a_proof_error(built: Path, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The real probe with a small --max-file-bytes forced (it cuts the big blob short), or with the first blob
    skipped: each is a ProofError naming why."""
    cut = _script(tmp_path / "cut", f'#!/bin/sh\nexec {built} "$@" --max-file-bytes 100\n')
    monkeypatch.setenv("PAIRPROOF_PROBE", str(cut))
    with pytest.raises(ProofError, match="cut"):
        hostscan.scan_blobs([("big", b"." * 1000 + TOKEN.encode())], "big")
    skip = _script(tmp_path / "skip", f'#!/bin/sh\nlast=""; for a; do last="$a"; done\n'
                                      f'exec {built} "$@" --skip "$(dirname "$last")/blobs/000000"\n')
    monkeypatch.setenv("PAIRPROOF_PROBE", str(skip))
    with pytest.raises(ProofError, match="it read 10 files of the 11"):
        hostscan.scan_blobs([("first", TOKEN.encode()), ("second", b"clean")], "two")


def test_without_a_static_probe_detect_py_is_the_engine_and_says_so(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    monkeypatch.delenv("PAIRPROOF_PROBE", raising=False)
    monkeypatch.setattr(probe, "PROBE_BUILT", tmp_path / "none")
    judged = hostscan.scan_blobs([("the log", b"x " + TOKEN.encode())], "the log")
    assert judged.tokens == {TOKEN}
    assert judged.report.engine.startswith("detect.py (no static probe")
    assert judged.evidence("x")["sentinels_found"] == "9 in 1 files"


def test_a_report_past_its_bound_stops_the_scanner_and_proves_nothing(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    """Issue 28 item 10: the scanner's report was read whole into this process (a file of canary-shaped text is a
    report line per token). Past ``SCAN_OUTPUT_MAX`` the kernel stops it and the scan is a ProofError; under it the
    same file is reported as before."""
    (tmp_path / "many.txt").write_text("\n".join(Mint("0123abcd").mint("a", f"n{i}").token for i in range(2000)))
    report = hostscan.scan_paths([str(tmp_path)])
    assert len(report.hits) >= 2000
    monkeypatch.setattr(hostscan, "SCAN_OUTPUT_MAX", 64 << 10)
    with pytest.raises(ProofError, match="report of 65536 bytes or more and was stopped"):
        hostscan.scan_paths([str(tmp_path)])
