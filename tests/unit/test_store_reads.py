"""Issue 27 item 8: the product's store records every record it hands out with the credential of the request
being served, whatever route or helper asked, so OP-2 judges operators' reads at the data layer."""

from __future__ import annotations

from runtime.product.store import Caller, ProductStore


def test_every_record_handed_out_is_recorded_with_the_requests_credential(tmp_path):
    store = ProductStore(tmp_path / "product.sqlite")
    try:
        alice = Caller("person", "org1", "alice")
        note = store.person_write(alice, "note", "private", "a note")
        conversation = store.conversation(alice, "support")
        operator = Caller("operator", "", "sam")
        with store.serving(operator):
            store.record(note)  # a helper with no caller of its own: the request's credential is recorded
            store.operator_read(operator, note, "GET /api/operator/records/{id}")
            assert store.message_ids(alice, conversation) == []  # ids only: nothing handed out
        with store.serving(alice):
            store.list(alice, "note")
        store.record(note)  # outside any request
        seen = [(r["kind"], r["user"], r["record"], r["owner"]) for r in store.handed_out()]
        assert seen == [("operator", "sam", note, "alice"), ("operator", "sam", note, "alice"),
                        ("person", "alice", note, "alice"), ("platform", "", note, "alice")]
        assert [(a["operator"], a["record"]) for a in store.audit(alice)] == [("sam", note)]
    finally:
        store.close()
