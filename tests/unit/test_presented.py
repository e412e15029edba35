"""The authority sweep's plan (``acceptance/cases/judges/presented.py``): every artifact lands in every place
on every route, each request with an id of its own, and nowhere the place does not name."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import pytest

from acceptance.cases.judges import presented
from acceptance.contract.core import Principal

ALICE = Principal("A", "org1", "alice")
VALUE = "ppmodel.eyJhIjoxfQ.c2ln"


def _where(request: dict, value: str) -> set[str]:
    """Every place of ``request`` that holds ``value``: header names, query names, body paths."""
    found = {f"header {k}" for k, v in request["headers"].items() if value in v}
    found |= {f"query {k}" for k, vs in parse_qs(urlsplit(request["path"]).query).items() if value in vs}

    def walk(node: object, at: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{at}.{k}" if at else k)
        elif node == value:
            found.add(f"body {at}")
    walk(json.loads(request["body"]), "")
    return found


@pytest.mark.parametrize("route", list(presented.ROUTES))
@pytest.mark.parametrize("place", presented.PLACES)
def test_each_place_carries_the_value_there_and_nowhere_else(place: str, route: str):
    request = presented.placed(route, place, VALUE, "rid-1", "presented rid-1", "org1:alice")
    where = _where(request, VALUE)
    assert request["headers"]["X-Request-Id"] == "rid-1"
    assert urlsplit(request["path"]).path == route
    if place == presented.END_USER:
        assert where == set()
        named = _where(request, "org1:alice")
        assert named == ({"body params._meta.user", "body params._meta.user_id"} if route == "/mcp"
                         else {"body user", "body metadata.user_id"})
    elif place.startswith("header "):
        assert where == {f"header {place.split(' ')[1].rstrip(':')}"}
    elif place.startswith("query"):
        assert where == {f"query {n}" for n in presented.KEY_NAMES}
    elif "top level" in place:
        assert where == {f"body {n}" for n in presented.KEY_NAMES}
    else:
        inner = "params._meta" if route == "/mcp" else "metadata"
        assert where == {f"body {inner}.{n}" for n in presented.KEY_NAMES}


def test_the_marker_is_what_buys_on_each_route():
    """The model routes carry the marker as the user's message, /mcp as the note's body."""
    for route in presented.ROUTES:
        body = json.loads(presented.placed(route, presented.PLACES[0], VALUE, "r", "presented r")["body"])
        marker = body["params"]["arguments"]["body"] if route == "/mcp" else body["messages"][0]["content"]
        assert marker == "presented r"


def test_the_plan_is_the_whole_product_with_distinct_ids():
    artifacts = [presented.Artifact(ALICE, kind, VALUE) for kind in ("grant", "model", "runctl")]
    plan = presented.plan(artifacts, "pfx")
    assert len(plan) == len(artifacts) * len(presented.PLACES) * len(presented.ROUTES)
    assert len({p.id for p in plan}) == len(plan)
    assert {(p.artifact.kind, p.place, p.route) for p in plan} == {
        (a.kind, place, route) for a in artifacts for place in presented.PLACES for route in presented.ROUTES}


def test_an_unknown_place_is_refused():
    with pytest.raises(ValueError, match="unknown place"):
        presented.placed("/mcp", "the moon", VALUE, "r", "m")
