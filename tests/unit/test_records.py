"""canaries.records: a canary cut across records (log lines, the strings of an array, a wrapped line) is found
once the records are joined, and nothing is found where there is none. The host-side helper that runs the
engine over the views is tested in tests/integration/probes/test_records_live.py."""

from __future__ import annotations

import base64
import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.split_logs import FORMS, TOKEN, log_lines, noise
from support.tokens import TEST_RUN

from canaries import records
from canaries.detect import find
from canaries.records import join_records, split_forms


def _joined_tokens(data: bytes) -> set[str]:
    return {hit.token for _, view in join_records(data, "log").views for hit in find(view)}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_token_cut_across_records_is_found_joined_and_not_alone(form: str) -> None:
    data = FORMS[form]()
    assert {hit.token for line in records.records(data) for hit in find(line)} == set()
    assert {hit.token for hit in find(data)} == set()
    assert _joined_tokens(data) == {TOKEN}


def test_records_with_no_canary_join_to_none() -> None:
    """The control: realistic lines, long base64 and hex among them, joined every way, make no token."""
    data = log_lines(*noise(), *noise(), "tool refused: " + json.dumps({"arguments": [TEST_RUN + "-", "0123"]}))
    joined = join_records(data, "log")
    assert [label for label, _ in joined.views] == [f"log (joined {v})" for v in records.VIEWS]
    assert _joined_tokens(data) == set()


def test_every_split_form_the_sentinels_use_is_found_only_joined() -> None:
    for form, blob in split_forms(TOKEN.encode()).items():
        assert {hit.token for line in records.records(blob) for hit in find(line)} == set(), form
        assert _joined_tokens(blob) == {TOKEN}, form


def test_a_view_past_the_bound_is_not_built_and_says_so() -> None:
    data = FORMS["base64 halves on two lines"]()
    joined = join_records(data, "log", max_view_bytes=len(data))
    assert joined.problems and "was not built" in joined.problems[0]
    assert sum(joined.view_bytes.values()) <= len(data)
    assert joined.summary()["not joined"] == list(records.BLIND)


def _short_part(parts: list[bytes]) -> bool:
    """Whether a part begins (after the first) or ends (before the last) with a run of payload characters shorter
    than a piece: the text of a cut that a prefix hides."""
    run = rb"[A-Za-z0-9+/=_-]*"
    heads = [len(re.match(run, part).group()) for part in parts[1:]]  # type: ignore[union-attr]
    tails = [len(re.search(run + rb"\Z", part).group()) for part in parts[:-1]]  # type: ignore[union-attr]
    return bool(heads + tails) and min(heads + tails) < records.MIN_PIECE  # (one part: no cut, nothing hidden)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(encoding=st.sampled_from(["raw", "base64", "hex"]), before=st.text("abc xyz{}\":,", max_size=30),
       cuts=st.lists(st.integers(1, 200), min_size=1, max_size=3, unique=True),
       prefix=st.sampled_from(["", "2026-01-01 00:00:00,000 app INFO [-] part: ", "    "]))
def test_any_cut_of_an_encoded_payload_across_prefixed_lines_is_found(encoding: str, before: str, cuts: list[int],
                                                                       prefix: str) -> None:
    """Cut anywhere (each part 7 characters or more, or with nothing but whitespace in front) into two to four
    lines behind a log line's prefix, the token is found joined."""
    payload = (before + TOKEN + '"}').encode()
    text = {"raw": payload, "base64": base64.b64encode(payload), "hex": payload.hex().encode()}[encoding]
    points = sorted({c % len(text) for c in cuts} - {0})
    parts = [text[a:b] for a, b in zip([0, *points], [*points, len(text)])]
    if prefix.strip() and _short_part(parts):
        return  # a part shorter than MIN_PIECE behind a prefix is what BLIND says no view joins
    data = b"".join(prefix.encode() + part + b"\n" for part in parts)
    assert TOKEN in _joined_tokens(data) | {hit.token for hit in find(data)}
