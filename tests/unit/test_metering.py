"""The metering judge (acceptance/cases/judges/metering.py) on records and ledgers built by hand."""

from __future__ import annotations

import pytest

from acceptance.cases.judges import metering
from acceptance.contract.core import Principal
from acceptance.errors import ProofError

WREN = Principal("W", "org3", "wren")


def record(seq: int, user: str = "org3:wren", purpose: str = "turn", status: int = 200, request_id: str = "",
           usage: dict | None = None) -> dict:
    return {"seq": seq, "user": user, "purpose": purpose, "status": status, "request_id": request_id,
            "usage": usage if usage is not None else ({"input": 10, "output": 3} if status == 200 else None)}


class Target:
    def __init__(self, records: list[dict], ledger: dict) -> None:
        self.records, self.ledger = records, ledger

    def provider_records(self) -> list[dict]:
        return list(self.records)

    def ledger_usage(self) -> dict:
        return self.ledger


def test_the_bill_is_per_org_user_purpose_of_answered_calls_only():
    table, reconciled = metering.billed([record(1), record(2, purpose=""), record(3, status=401),
                                         record(4, user="org1:alice")], {("org3", "wren")}, [])
    assert table == {("org3", "wren", "turn"): (1, 10, 3), ("org3", "wren", "unattributed"): (1, 10, 3)}
    assert reconciled == 2


@pytest.mark.parametrize("bad", [record(1, user=""), record(1, user="nobody")])
def test_a_record_naming_no_end_user_cannot_be_attributed(bad):
    with pytest.raises(ProofError, match="names no end user"):
        metering.billed([bad], {("org3", "wren")}, [])


def test_a_shapes_record_under_another_user_is_refused():
    shape = metering.Shape("whole", "rid-1", WREN, "turn")
    with pytest.raises(ProofError, match="not org3:wren"):
        metering.billed([record(1, user="org1:alice", request_id="rid-1")], {("org3", "wren")}, [shape])


def test_tokens_billed_and_not_metered_are_missing(monkeypatch):
    monkeypatch.setattr(metering, "SETTLE_SECONDS", 0.0)
    target = Target([], {})
    since = metering.mark(target, [WREN])
    target.records.append(record(1, request_id="rid-1"))
    target.ledger = {("org3", "wren", "turn"): {"calls": 1, "input_tokens": 10, "output_tokens": 1}}
    result = metering.reconcile(target, since, [metering.Shape("whole", "rid-1", WREN, "turn")], [WREN])
    assert result.missing == {"org3/wren/turn": {"calls": 0, "input_tokens": 0, "output_tokens": 2}}
    assert (result.seen, result.reconciled) == (1, 1)


def test_a_shape_that_never_reached_the_provider_proves_nothing(monkeypatch):
    monkeypatch.setattr(metering, "SETTLE_SECONDS", 0.0)
    target = Target([record(1)], {})
    since = metering.Mark(0, {})
    with pytest.raises(ProofError, match="did not reach the provider answered"):
        metering.reconcile(target, since, [metering.Shape("stream", "rid-9", WREN, "turn")], [WREN])
