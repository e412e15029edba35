"""The authority sweep: authority artifacts presented from inside a sandbox, judged by what they bought.

Class (issue 26): *an authority artifact presented from inside a sandbox is refused unless it is that
instance's own, current one*. The sweep takes every artifact the platform holds for other holders (what the
contract's ``capabilities`` gives for each: the product grant, the model capability, the run-control key, and
whatever else a driver names), and presents each from inside one instance's sandbox, in every place an agent
can put a credential (``PLACES``), on every route its broker forwards (``ROUTES``), one request each, each
with a request id of its own. It is judged by what each request *bought*, never by the answer's words:

- a model route bought a call for whoever the provider's own record names under the request's id;
- ``/mcp`` (a ``notes_create`` whose body is the request's marker) bought a note for whoever's notes hold
  the marker, as the product lists them to that person.

A purchase for anyone but the presenter is the finding. The presenter's own purchases are the proof that the
detector sees: every model request its broker answered 200 must be found at the provider under its id, every
``/mcp`` request answered with a result must have left its marker in someone's notes, and every request must
have been answered (status 0: the harness could not ask). Otherwise the sweep is broken, never passed.

What it enumerates: the artifacts ``capabilities`` names, for the holders the case passes, × ``PLACES`` (with
the holder's name in the end-user fields, ``END_USER``) × ``ROUTES``. What it cannot: header names and body or
query field names outside ``KEY_NAMES`` and ``HEADERS`` (an agent may invent any name; a platform that reads one
of its own choosing is not found here unless it is among them), and routes the broker forwards that the contract
does not name.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from acceptance.contract.core import Principal
from acceptance.errors import ProofError

PROBE = Path(__file__).resolve().parents[1] / "inside" / "present_probe.py"

# Headers an agent's client may carry a credential in, each with the shape the value takes there.
HEADERS: tuple[tuple[str, str], ...] = (
    ("Authorization", "Bearer {}"), ("Authorization", "{}"), ("x-api-key", "{}"), ("api-key", "{}"),
    ("Proxy-Authorization", "Bearer {}"), ("Cookie", "token={}"),
)
# Names a credential goes by in a query or a JSON body (clients' and gateways' conventions).
KEY_NAMES: tuple[str, ...] = ("api_key", "apiKey", "key", "token", "access_token", "authorization", "capability",
                              "grant", "runctl")
# Not a credential but a claim of whom the call is for: the body's end-user fields (OpenAI's ``user``, Anthropic's
# ``metadata.user_id``; in an MCP call's ``params._meta``) naming the artifact's holder, as org:user. A platform
# that keeps a client's end user bills and attributes the call to whomever the sandbox names.
END_USER = "body (end-user fields naming the holder: user, metadata.user_id)"
PLACES: tuple[str, ...] = (*(f"header {name}: {shape}" for name, shape in HEADERS), END_USER,
                           "query (every key name)", "body (every key name, top level)",
                           "body (every key name, in metadata or params._meta)")
NOTE_TOOL = "notes_create"  # the product tool the sweep calls on /mcp: its effect is a note of the caller's


def _model_openai(marker: str) -> dict:
    return {"model": "reference-main", "messages": [{"role": "user", "content": marker}],
            "metadata": {"purpose": "turn"}}


def _model_anthropic(marker: str) -> dict:
    return {"model": "reference-main", "max_tokens": 16, "messages": [{"role": "user", "content": marker}],
            "metadata": {"purpose": "turn"}}


def _mcp(marker: str) -> dict:
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": NOTE_TOOL, "arguments": {"body": marker}}}


# Every route the broker forwards for its agent, with a body that buys something there if admitted.
ROUTES = {"/v1/chat/completions": _model_openai, "/v1/messages": _model_anthropic, "/mcp": _mcp}
MODEL_ROUTES = ("/v1/chat/completions", "/v1/messages")


@dataclass(frozen=True)
class Artifact:
    """One authority artifact: whose it is, which kind (``capabilities``' key), and in what standing
    (``current``, ``old generation``...), as the case took it."""

    holder: Principal
    kind: str
    value: str
    standing: str = "current"

    @property
    def label(self) -> str:
        return f"{self.holder.name}'s {self.standing} {self.kind}"


@dataclass(frozen=True)
class Presented:
    """One request of the sweep."""

    id: str
    artifact: Artifact
    place: str
    route: str

    @property
    def marker(self) -> str:
        return f"presented {self.id}"

    def show(self) -> str:
        return f"{self.artifact.label} in {self.place} on {self.route} ({self.id})"


def placed(route: str, place: str, value: str, request_id: str, marker: str, holder: str = "") -> dict:
    """The request that presents ``value`` in ``place`` on ``route`` ({method, path, headers, body}); ``END_USER``
    presents ``holder`` (org:user) instead. Pure."""
    body = ROUTES[route](marker)
    headers = {"Content-Type": "application/json", "X-Request-Id": request_id}
    path = route
    if place.startswith("header "):
        name, shape = place[len("header "):].split(": ", 1)
        headers[name] = shape.format(value)
    elif place == END_USER:
        if route == "/mcp":
            body["params"]["_meta"] = {"user": holder, "user_id": holder}
        else:
            body["user"] = holder
            body.setdefault("metadata", {})["user_id"] = holder
    elif place.startswith("query"):
        path += "?" + "&".join(f"{n}={quote(value, safe='')}" for n in KEY_NAMES)
    elif place == PLACES[-2]:
        body.update({n: value for n in KEY_NAMES})
    elif place == PLACES[-1]:
        inner = body["params"].setdefault("_meta", {}) if route == "/mcp" else body.setdefault("metadata", {})
        inner.update({n: value for n in KEY_NAMES})
    else:
        raise ValueError(f"unknown place {place!r}: one of PLACES")
    return {"method": "POST", "path": path, "headers": headers, "body": json.dumps(body)}


def plan(artifacts: Iterable[Artifact], prefix: str, places: Sequence[str] = PLACES) -> list[Presented]:
    """Every artifact × every place (of ``places``, all by default) × every route, each with its own request id
    ``PREFIX-N``."""
    every = [(a, p, r) for a in artifacts for p in places for r in ROUTES]
    return [Presented(f"{prefix}-{n}", a, p, r) for n, (a, p, r) in enumerate(every)]


@dataclass
class Sweep:
    """What the sweep presented and what each request bought."""

    presenter: Principal
    requests: list[Presented]
    status: dict[str, int] = field(default_factory=dict)
    bought: list[tuple[Presented, str]] = field(default_factory=list)  # (request, for whom: "org:user")
    own: int = 0  # purchases for the presenter: the detector seeing

    def findings(self) -> list[str]:
        """Every purchase for anyone but the presenter, shown."""
        mine = f"{self.presenter.org}:{self.presenter.user}"
        return [f"{p.show()} bought for {who}" for p, who in self.bought if who != mine]

    def summary(self) -> dict:
        return {"presenter": f"{self.presenter.org}:{self.presenter.user}", "requests": len(self.requests),
                "artifacts": sorted({p.artifact.label for p in self.requests}),
                "places": sorted({p.place for p in self.requests}),
                "routes": list(ROUTES), "statuses": _tally(self.status.values()),
                "purchases for the presenter (the detector seeing)": self.own, "findings": self.findings(),
                "not enumerated": "header, query and body names outside HEADERS and KEY_NAMES; routes the "
                                  "broker forwards that the contract does not name"}


def _tally(values: Iterable[int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[str(v)] = out.get(str(v), 0) + 1
    return out


def run(target, host, base: str, presenter: Principal, artifacts: Sequence[Artifact],
        readers: Sequence[Principal], places: Sequence[str] = PLACES) -> Sweep:
    """Present ``artifacts`` from inside ``host``'s sandbox (the instance of ``presenter``) to its broker at
    ``base`` and judge what each request bought: the provider's record per request id, and the notes of each
    of ``readers`` and of the presenter (as each person lists them). ProofError when the sweep could not see.
    ``places``: a subset of ``PLACES`` (the authority matrix presents in fewer, at every lifecycle point)."""
    unknown = sorted(set(places) - set(PLACES))
    if unknown:
        raise ValueError(f"places {unknown} are not among PLACES")
    requests = plan(artifacts, f"pp{secrets.token_hex(4)}", places)
    items = [{"id": p.id, **placed(p.route, p.place, p.artifact.value, p.id, p.marker,
                                   f"{p.artifact.holder.org}:{p.artifact.holder.user}")} for p in requests]
    script = f"PLAN = {json.dumps(items)!r}\nimport json as _j\nPLAN = _j.loads(PLAN)\n".encode() + PROBE.read_bytes()
    out = host.backend.run_with_stdin(f"/usr/bin/python3 -I -S - {host.backend.quote('%s', base)}", stdin=script,
                                      timeout=600.0)
    try:
        answers = json.loads(out.stdout.strip().splitlines()[-1])["answers"]
    except (ValueError, IndexError, KeyError, TypeError):
        raise ProofError(f"the authority sweep in {presenter.name}'s sandbox printed no answers "
                         f"(rc {out.rc}): {out.stderr[-300:]!r}") from None
    sweep = Sweep(presenter, requests, {a["id"]: a["status"] for a in answers})
    unanswered = [p.show() for p in requests if not sweep.status.get(p.id)]
    if len(answers) != len(requests) or unanswered:
        raise ProofError(f"the broker did not answer {len(unanswered)} of the sweep's {len(requests)} requests "
                         f"(e.g. {unanswered[:3]}): the sweep could not present everything")
    # Matched by the marker in the prompt the provider recorded, not by the request id the sandbox sent: an id
    # chosen inside a sandbox is the instance's text, and a platform need not keep it (the reference broker
    # replaces any id it did not issue).
    by_marker = {json.dumps(p.marker): p for p in requests if p.route in MODEL_ROUTES}
    seen: set[str] = set()
    for r in target.provider_records():
        said = json.dumps(r.get("body"))
        for quoted, p in by_marker.items():
            if quoted in said:
                sweep.bought.append((p, str(r.get("user"))))
                seen.add(p.id)
    blind = [p.show() for p in requests if p.route in MODEL_ROUTES and sweep.status[p.id] == 200 and p.id not in seen]
    if blind:
        raise ProofError(f"{len(blind)} model requests the broker answered 200 are not in the provider's record "
                         f"with their marker (e.g. {blind[:2]}): the sweep cannot tell whom a call was for")
    markers = {p.marker: p for p in requests if p.route == "/mcp"}
    found: set[str] = set()
    for reader in {*readers, presenter}:
        status, listing = target.person(reader).request("GET", "/api/records?kind=note")
        if status != 200 or not isinstance(listing, dict):
            raise ProofError(f"the product did not list {reader.name}'s notes ({status}): nothing to judge by")
        for note in listing.get("records") or []:
            p = markers.get(str(note.get("body", "")))
            if p is not None:
                found.add(p.id)
                sweep.bought.append((p, f"{reader.org}:{reader.user}"))
    sweep.own = sum(who == f"{presenter.org}:{presenter.user}" for _, who in sweep.bought)
    if not sweep.own:
        raise ProofError(f"none of the sweep's {len(requests)} requests bought anything for the presenter "
                         f"{presenter.name} itself: its own authority was not seen working, so a refusal proves nothing")
    if not any(p.route == "/mcp" and p.id in found for p in requests):
        raise ProofError("no /mcp request of the sweep left its note anywhere: the product's record was not seen")
    return sweep
