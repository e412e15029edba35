"""Metering reconciled against the provider's bill: every token the provider billed is in the ledger.

Class (issue 26): *tokens the provider billed that the ledger does not hold*, whatever became of the call.
The provider's own record is the reference, never the proxy's view of the call: a call the provider answered
is billed whether the caller read the answer to its end, hung up half way, or was refused it by the platform
after the provider had answered (a revocation while the call was in flight). The judge takes a mark (how far
the provider's record went, what the ledger held), lets the case make its calls (``Shape``: each with a
request id of its own, the principal whose capability made it and the purpose the provider should see it
tagged with), then reconciles, per (org, user, purpose), what the provider billed since the mark against
what the ledger added: calls, input tokens and output tokens.

Attribution: a provider record belongs to the principal its end user names (the proxy sets it from the
capability that made the call); a record carrying a shape's request id must name that shape's principal and
purpose. A record since the mark that names no end user, or a shape's request id under another one, is one
the judge cannot attribute: ProofError, never a pass (its tokens would be billed to nobody the judge knows).

Completeness (``Reconciliation.summary``): the calls seen at the provider since the mark, those reconciled
(of the judged users), each shape's calls at the provider and its provider status, and the shapes the
target could not make (``not_made``, each with why). A shape that never reached the provider, or that the
provider did not answer, proved nothing about its metering: ProofError.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from acceptance.contract.core import Principal
from acceptance.errors import ProofError
from acceptance.harness.wait import settle

FIELDS = ("calls", "input_tokens", "output_tokens")
UNATTRIBUTED = "unattributed"
SETTLE_SECONDS = 15.0  # a hung-up or withheld call is metered when the provider's answer ends, after the caller left

Key = tuple[str, str, str]
Triple = tuple[int, int, int]


@dataclass(frozen=True)
class Shape:
    """One call the case made: its shape's name, the request id it was sent with, whose capability made it,
    and the purpose the provider should see it tagged with."""

    name: str
    request_id: str
    principal: Principal
    purpose: str


@dataclass(frozen=True)
class Mark:
    records: int  # how many records the provider held
    ledger: dict[Key, Triple]


@dataclass
class Reconciliation:
    billed: dict[Key, Triple]
    metered: dict[Key, Triple]
    seen: int = 0  # calls at the provider since the mark, anyone's
    reconciled: int = 0  # of them, the judged users' answered calls
    shapes: dict[str, dict] = field(default_factory=dict)
    not_made: dict[str, str] = field(default_factory=dict)

    @property
    def missing(self) -> dict[str, dict[str, int]]:
        """Per (org/user/purpose): what the provider billed minus what the ledger added, where they differ."""
        zero = (0, 0, 0)
        return {"/".join(k): dict(zip(FIELDS, (b - m for b, m in zip(self.billed.get(k, zero), self.metered.get(k, zero)))))
                for k in sorted(set(self.billed) | set(self.metered)) if self.billed.get(k, zero) != self.metered.get(k, zero)}

    def summary(self) -> dict:
        return {"calls seen at the provider": self.seen, "calls reconciled": self.reconciled,
                "billed (provider)": _show(self.billed), "metered (ledger)": _show(self.metered),
                "billed and not metered (or metered and not billed)": self.missing,
                "shapes": self.shapes, "shapes not made, and why": self.not_made}


def _show(table: Mapping[Key, Triple]) -> dict:
    return {"/".join(k): dict(zip(FIELDS, v)) for k, v in sorted(table.items())}


def ledger_table(target, users: set[tuple[str, str]]) -> dict[Key, Triple]:
    return {tuple(k): tuple(int(v[f] or 0) for f in FIELDS) for k, v in target.ledger_usage().items()
            if tuple(k[:2]) in users}


def mark(target, users: Iterable[Principal]) -> Mark:
    return Mark(len(target.provider_records()), ledger_table(target, {(p.org, p.user) for p in users}))


def _user(record: Mapping) -> tuple[str, str] | None:
    org, sep, user = str(record.get("user") or "").partition(":")
    return (org, user) if sep and org and user else None


def billed(records: Iterable[Mapping], users: set[tuple[str, str]], shapes: Iterable[Shape]) -> tuple[dict[Key, Triple], int]:
    """The provider's bill per (org, user, purpose) for ``users`` (answered calls: status 200 with usage),
    and how many calls it came from. Raises ProofError for a record it cannot attribute."""
    by_id = {s.request_id: s for s in shapes}
    table: dict[Key, Triple] = {}
    reconciled = 0
    for r in records:
        who = _user(r)
        shape = by_id.get(r.get("request_id") or "")
        if who is None:
            raise ProofError(f"the provider's record {r.get('seq')} (request id {r.get('request_id')!r}) names no end user "
                             f"({r.get('user')!r}): its tokens cannot be attributed to anyone's ledger")
        if shape is not None and who != (shape.principal.org, shape.principal.user):
            raise ProofError(f"the provider's record of shape {shape.name!r} names {r.get('user')!r}, not "
                             f"{shape.principal.org}:{shape.principal.user}, whose capability made it")
        if who not in users or r.get("status") != 200:
            continue
        usage = r.get("usage")
        if not isinstance(usage, Mapping):
            raise ProofError(f"the provider's record {r.get('seq')} answered 200 with no usage: nothing to bill from")
        key = (*who, r.get("purpose") or UNATTRIBUTED)
        calls, tokens_in, tokens_out = table.get(key, (0, 0, 0))
        table[key] = (calls + 1, tokens_in + int(usage.get("input", 0)), tokens_out + int(usage.get("output", 0)))
        reconciled += 1
    return table, reconciled


def reconcile(target, since: Mark, shapes: Iterable[Shape], users: Iterable[Principal], *,
              not_made: Mapping[str, str] | None = None, expect_equal: bool = True) -> Reconciliation:
    """What the provider billed ``users`` since ``since`` against what the ledger added, once they agree or
    SETTLE_SECONDS passed (``expect_equal=False``, the X control: as soon as they differ). ProofError if a
    shape did not reach the provider answered, under its principal and purpose, or a record is unattributable."""
    shapes = list(shapes)
    keys = {(p.org, p.user) for p in users}

    def observe() -> tuple[dict, dict, list]:
        records = target.provider_records()[since.records:]
        table, _ = billed(records, keys, shapes)
        now = ledger_table(target, keys)
        zero = (0, 0, 0)
        added = {k: tuple(a - b for a, b in zip(now.get(k, zero), since.ledger.get(k, zero)))
                 for k in set(now) | set(since.ledger) if now.get(k, zero) != since.ledger.get(k, zero)}
        return table, added, records

    table, added, records = settle(observe, lambda seen: (seen[0] == seen[1]) == expect_equal, SETTLE_SECONDS, 0.1)
    table, reconciled = billed(records, keys, shapes)
    result = Reconciliation(billed=table, metered=added, seen=len(records), reconciled=reconciled,
                            not_made=dict(not_made or {}))
    for shape in shapes:
        mine = [r for r in records if r.get("request_id") == shape.request_id]
        result.shapes[shape.name] = {"request id": shape.request_id, "calls at the provider": len(mine),
                                     "statuses": [r.get("status") for r in mine],
                                     "purposes": sorted({r.get("purpose") or UNATTRIBUTED for r in mine})}
        if not mine or any(r.get("status") != 200 for r in mine):
            raise ProofError(f"shape {shape.name!r} (request id {shape.request_id}) did not reach the provider answered "
                             f"({result.shapes[shape.name]}): it proved nothing about its metering")
        if shape.purpose and {r.get("purpose") for r in mine} != {shape.purpose}:
            raise ProofError(f"shape {shape.name!r} reached the provider tagged {result.shapes[shape.name]['purposes']}, "
                             f"not {shape.purpose!r}: the call was not the one the case meant to make")
    if not reconciled:
        raise ProofError("no answered call of the judged users reached the provider since the mark: nothing reconciled")
    return result
