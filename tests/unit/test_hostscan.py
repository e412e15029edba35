"""acceptance.harness.hostscan: the host-side scans run the suite's engine, prove in the same run that it sees every
encoding it claims, and name it; a blind, crippled or failing engine makes the scan a ProofError, never a pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from acceptance.errors import ProofError
from acceptance.harness import hostscan
from canaries import Mint

MINT = Mint("0123abcd")
TOKEN = MINT.mint("a", "mem").token


def test_a_bad_probe_setting_is_a_proof_error_not_a_fallback(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PAIRPROOF_PROBE", str(tmp_path / "missing"))
    with pytest.raises(ProofError, match="PAIRPROOF_PROBE"):
        hostscan.tokens_in(TOKEN.encode())

