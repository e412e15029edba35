"""SH-2's judge at the moment of effect: what an approval posts is, byte for byte, the payload and audience the
owner was shown on that card, whatever happened to cards between the look and the approval.

A state machine drives A's agent and A (the person) through operation sequences on approval cards: the agent
writes to a target (an issue, a colleague's task list, an outside address), writes again to the same target
while its card is pending, re-sends a card's text to another audience; A looks at the cards (what A was
*shown*, kept until A looks again: people approve from a page they loaded a while ago), approves a card with
the digest A was shown, approves it again, approves it with another card's digest, rejects it. Each sequence
gets fresh issues, task titles and addresses, so it (and hypothesis's replay of a failing one) starts from
nothing of an earlier one's.

Judged as it happens, through the product's own paths (the people's API, never the store):

- every approval that posts: the record it names, read back by A, holds exactly the body, title, parent and
  audience of the card A was shown (string equality: nothing re-rendered, trimmed or normalized); B reads it
  back the same iff that audience includes B, and is refused otherwise;
- after every step: the records carrying this sequence's text are, as a multiset, exactly the cards A
  approved and the platform said it posted, each as A was shown it: nothing posted without an approval,
  twice, from a rejected card, or from a card other than the one approved;
- a decided card, or a card approved with another card's digest, posts nothing; an approval of a pending card
  exactly as shown is refused only if the card has changed since;
- a digest, once seen on any of A's cards, names one content (action, payload, audience) for the rest of the
  run: a card whose payload or audience changes under the digest A approves by cannot bind an approval.

What it covers and what it cannot: operation sequences on cards are an unbounded space, so they are sampled.
First ``FLOOR``, one fixed sequence that reaches every kind of sequence the class turns on (``Reach.REQUIRED``:
an approval after a later write to the card's target, a re-sent text approved, a second approval, another
card's digest, a rejection, an approval that posts each target kind, one whose text is longer than a listing's
preview); then hypothesis (``EXAMPLES`` sequences of ``STEPS`` steps, derandomized, so a run is reproducible)
interleaves the same operations over the target kinds of the product's agent tools whose writes are held
(issue comment, task for a colleague, outside message, invitation; two targets each, an invitation's address
being its text) and text whose edges, case, characters and length a tidy-up, a normalizer or a preview would
change. Not driven: crm_note (posted like a comment, to the team) and conversation posts (SH-4's). ``Reach``
records what was run; the case is broken, not passed, if a required kind was not reached.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from acceptance.cases.judges.product_client import drive, with_request_id
from acceptance.errors import ProofError, TargetError

EXAMPLES = 6
STEPS = 10

# What a held write's text is made of: edges a tidy-up would strip, characters a normalizer would fold
# (composed and decomposed accents, a ligature, a zero-width space, full-width digits), markup, and a length
# past what a listing would show as a preview (what is cut from the page is not what the owner was shown).
LONG = "tail " * 120
EDGES = st.sampled_from(["", " ", "\n", "\t", "  \n", "\u00a0"])
WORDS = st.lists(st.sampled_from(["ok", "café", "cafe\u0301", "ﬁle", "a\u200bb", "１２", "<b>", "&amp;", "**x**",
                                  "[l](/api/records/1)", "  two  spaces", "Straße", "İ", "Mixed@Case.Example", LONG]),
                 max_size=3).map(" ".join)
PICK = st.integers(0, 2**16)  # which of the candidate cards: an index, so a fixed sequence can name one too

# Every agent tool whose write is held as a card (crm_note posts like comment: one target, the team).
KINDS = ("comment", "task", "message", "invite")
ADDRESS_MAX = 320  # the invite tool's pinned maxLength: the address is the text, cut to fit


@dataclass(frozen=True)
class Target:
    """Where an agent write goes: ``kind`` and ``slot`` (which issue, which colleague, which address)."""

    kind: str
    slot: int

    def other(self) -> Target:
        return Target(self.kind, 1 - self.slot)


@dataclass(frozen=True)
class Shown:
    """A card as the owner's listing showed it: what an approval of it must post."""

    action: str
    payload: str  # canonical JSON of the payload, so two looks compare exactly
    audience: str
    sha256: str
    status: str

    @property
    def content(self) -> tuple[str, str, str]:
        return (self.action, self.payload, self.audience)

    def record(self) -> tuple[Any, Any, Any, str]:
        """The record this card posts: the payload's body, title and parent, under the card's audience."""
        p = json.loads(self.payload)
        return (p.get("body", ""), p.get("title", ""), p.get("parent"), self.audience)


def shown(card: dict) -> Shown:
    return Shown(card["action"], json.dumps(card["payload"], sort_keys=True, ensure_ascii=False), card["audience"],
                 card["sha256"], card["status"])


@dataclass
class Reach:
    """What was run, over the floor and every example: the case is broken unless each required kind occurred."""

    sequences: int = 0
    steps: int = 0
    writes: int = 0
    counts: Counter = field(default_factory=Counter)

    REQUIRED = ("approved after a later write to its target", "approved after a re-send to another audience",
                "second approval refused", "rejected", "another card's digest refused", "approval posted",
                *(f"approval posted: {kind}" for kind in KINDS), "approval posted: longer than a preview")

    def missing(self) -> list[str]:
        return [what for what in self.REQUIRED if not self.counts[what]]

    def summary(self) -> dict[str, Any]:
        return {"sequences": self.sequences, "steps": self.steps, "agent writes": self.writes,
                "reached": dict(sorted(self.counts.items())), "not reached": self.missing()}


def build_machine(target, profile, principals, instance, prefix: str, probes: list[str],
                  platform_probe: Callable[[str], str], reach: Reach) -> type[RuleBasedStateMachine]:
    """The state machine class for one run: ``prefix`` makes its text unique to the run, ``probes`` collects
    the request id of every decision request (the caller confirms them against the platform's log), ``reach``
    tallies what was run."""
    owner, colleague = target.person(principals["A"]), target.person(principals["B"])
    counter = itertools.count()

    class Approvals(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.n = next(counter)
            reach.sequences += 1
            self.issues = [self._issue(i) for i in (0, 1)]
            # The fixed sequence (the first) addresses B, so B's read-back is judged both ways; the search's
            # address colleagues of their own, so nothing of one sequence is mixed into another (a replay of
            # a failing sequence meets the platform as the first run did).
            self.colleagues = (principals["B"].user, "zed") if self.n == 0 else (f"mate{self.n}a", f"mate{self.n}b")
            self.addresses = [f"x{self.n}-{i}@outside.example" for i in (0, 1)]
            self.writes = itertools.count()
            self.cards: dict[int, Target] = {}  # card -> the target its latest write went to
            self.marks: dict[int, str] = {}  # card -> the marker of the text it was made for
            self.shown: dict[int, Shown] = {}  # what A's last look showed
            self.changed: set[Target] = set()  # targets written since A's last look
            self.resent: set[int] = set()  # cards whose text was re-sent elsewhere since A's last look
            self.decided: dict[int, str] = {}
            self.expected: Counter = Counter()
            self.bound: dict[str, tuple[str, str, str]] = {}  # digest -> the content it was first seen on

        def _issue(self, i: int) -> int:
            status, body = colleague.request("POST", "/api/issues", {"title": f"{prefix} issue {i}", "body": "x"})
            if status != 200:
                raise TargetError(f"B could not file an issue to comment on: {status} {body!r}"[:300])
            return int(body["id"])

        def _pending_shown(self) -> list[int]:
            """Cards A was shown pending and has not decided: where a later write matters."""
            return sorted(c for c, s in self.shown.items() if s.status == "pending" and c not in self.decided)

        # -- what the agent writes --------------------------------------------------------------------

        @initialize(kind=st.sampled_from(KINDS), slot=st.integers(0, 1), edges=st.tuples(EDGES, EDGES), words=WORDS)
        def first_card_and_a_look(self, kind, slot, edges, words):
            """Every sequence starts from a card A has seen: later writes, looks and decisions are its story."""
            self.write(kind, slot, edges, words)
            self.look()

        @rule(kind=st.sampled_from(KINDS), slot=st.integers(0, 1), edges=st.tuples(EDGES, EDGES), words=WORDS)
        def write(self, kind, slot, edges, words):
            self._write(Target(kind, slot), *self._text(edges, words))

        @precondition(lambda self: bool(self.cards))
        @rule(pick=PICK, edges=st.tuples(EDGES, EDGES), words=WORDS)
        def write_again_to_the_same_target(self, pick, edges, words):
            card = _pick(self._pending_shown() or sorted(self.cards), pick)
            self._write(self.cards[card], *self._text(edges, words))

        @precondition(lambda self: bool(self.cards))
        @rule(pick=PICK)
        def resend_to_another_audience(self, pick):
            """The same text again, to the target's other audience (another colleague, address or issue)."""
            self._resend(_pick(self._pending_shown() or sorted(self.cards), pick))

        @precondition(lambda self: bool(self._pending_shown()))
        @rule(pick=PICK, resend=st.booleans(), edges=st.tuples(EDGES, EDGES), words=WORDS)
        def later_write_then_approve_as_shown(self, pick, resend, edges, words):
            """The class's own sequence: A has a pending card on the page; the agent writes again to its target
            (or re-sends its text elsewhere); A approves the card from that page."""
            card = _pick(self._pending_shown(), pick)
            if resend:
                self._resend(card)
            else:
                self._write(self.cards[card], *self._text(edges, words))
            self._approve(card)

        def _text(self, edges: tuple[str, str], words: str) -> tuple[str, str]:
            mark = f"{prefix}-{self.n}-{next(self.writes)}-"
            return mark, f"{edges[0]}{mark} {words}{edges[1]}"

        def _call(self, t: Target, text: str) -> tuple[str, dict, str]:
            if t.kind == "comment":
                return "issue_comment", {"issue_id": self.issues[t.slot], "body": text}, "team"
            if t.kind == "task":
                who = self.colleagues[t.slot]
                return "task_create", {"title": text, "assignee": who}, f"user:{who}"
            if t.kind == "invite":  # the address is the text: the card's audience is what the agent wrote
                return "invite", {"email": text[:ADDRESS_MAX]}, f"external:{text[:ADDRESS_MAX]}"
            return "message_send", {"to": self.addresses[t.slot], "body": text}, f"external:{self.addresses[t.slot]}"

        def _write(self, t: Target, mark: str, text: str) -> None:
            tool, arguments, audience = self._call(t, text)
            drive(target, profile, principals["A"], instance, [(tool, arguments)])
            reach.writes += 1
            self.changed.add(t)
            # Found by the write's own marker, so an agent that re-spaced the text does not hide its card.
            mine = [c["id"] for c in self._observe() if c["audience"] == audience
                    and any(mark in str(v) for v in c["payload"].values())]
            if mine:
                card = max(mine)
                self.cards[card], self.marks[card] = t, mark
            elif not any(mark in r["body"] or mark in r["title"] for r in self._records()):
                raise TargetError(f"A's agent was asked to {tool} and the product holds neither a card nor a record "
                                  "of it: the turn did not make the call")
            # (posted at once instead of held: the invariant judges it)

        def _resend(self, card: int) -> None:
            t = self.cards[card]
            if t.kind == "invite":
                return  # an invitation's text is its address: the same text elsewhere is the same audience
            listed = {c["id"]: c for c in self._observe()}
            if card not in listed:
                raise TargetError(f"A's card {card} is no longer in A's listing")
            self.resent.add(card)
            self._write(t.other(), self.marks[card], listed[card]["payload"]["title" if t.kind == "task" else "body"])

        # -- what the owner does ----------------------------------------------------------------------

        @rule()
        def look(self):
            listed = self._observe()
            self.shown.update({c["id"]: shown(c) for c in listed if c["id"] in self.cards})
            self.changed.clear()
            self.resent.clear()

        @precondition(lambda self: bool(self.shown))
        @rule(pick=PICK, other=st.one_of(st.none(), PICK))
        def approve(self, pick, other):
            """A approves a card on the page A loaded at the last look, whatever the agent wrote since (cards whose
            target was written to since come first; a card already decided is approved again), with the digest
            shown on it, or with ``other`` card's digest."""
            if other is not None and len(self.shown) >= 2:
                card = _pick(sorted(self.shown), pick)
                self._approve_with_another_cards_digest(card, _pick(sorted(set(self.shown) - {card}), other))
                return
            moved = [c for c in self._pending_shown() if self.cards[c] in self.changed or c in self.resent]
            self._approve(_pick(moved or sorted(self.shown), pick))

        def _approve(self, card: int) -> None:
            seen = self.shown[card]
            status, body = self._decide(card, "approve", {"sha256": seen.sha256})
            if card in self.decided:
                assert status != 200, f"card {card}, already {self.decided[card]}, was approved again: {body!r}"[:300]
                reach.counts["second approval refused"] += 1
                return
            if status != 200:
                now = {c["id"]: shown(c) for c in self._observe()}.get(card)
                assert now is None or now.content != seen.content or now.status != "pending", \
                    f"A's approval of pending card {card}, unchanged since A was shown it, was refused: {status} {body!r}"
                reach.counts["stale approval refused"] += 1
                return
            assert isinstance(body, dict) and body.get("status") == "posted" and isinstance(body.get("record"), int), \
                f"approving card {card} answered 200 without naming the record it posted: {body!r}"[:300]
            self.decided[card] = "posted"
            self.expected[seen.record()] += 1
            reach.counts["approval posted"] += 1
            reach.counts[f"approval posted: {self.cards[card].kind}"] += 1
            if any(len(str(v)) > 200 for v in json.loads(seen.payload).values()):
                reach.counts["approval posted: longer than a preview"] += 1
            if self.cards[card] in self.changed:
                reach.counts["approved after a later write to its target"] += 1
            if card in self.resent:
                reach.counts["approved after a re-send to another audience"] += 1
            self._judge_posted(card, seen, body["record"])

        def _approve_with_another_cards_digest(self, card: int, them: int) -> None:
            if self.shown[card].content == self.shown[them].content:
                return  # the same action, payload and audience may share a digest
            status, body = self._decide(card, "approve", {"sha256": self.shown[them].sha256})
            assert status != 200, f"card {card} was approved with card {them}'s digest: {body!r}"[:300]
            reach.counts["another card's digest refused"] += 1

        @precondition(lambda self: bool(self.shown))
        @rule(pick=PICK)
        def reject(self, pick):
            card = _pick(sorted(self.shown), pick)
            status, body = self._decide(card, "reject", {})
            if card in self.decided:
                assert status != 200, f"card {card}, already {self.decided[card]}, was rejected after: {body!r}"[:300]
                return
            assert status == 200, f"A could not reject pending card {card}: {status} {body!r}"[:300]
            self.decided[card] = "rejected"
            reach.counts["rejected"] += 1

        # -- judged at the moment of effect -----------------------------------------------------------

        @invariant()
        def posted_is_exactly_what_was_approved_as_shown(self):
            reach.steps += 1
            posted = Counter((r["body"], r["title"], r["parent"], r["audience"]) for r in self._records())
            assert posted == self.expected, (
                "the records carrying this sequence's text are not exactly the approved cards as A was shown them: "
                f"posted and not approved as shown {sorted(map(repr, posted - self.expected))[:3]}, approved and "
                f"not posted as shown {sorted(map(repr, self.expected - posted))[:3]}")[:1500]

        def _judge_posted(self, card: int, seen: Shown, record: int) -> None:
            status, got = owner.request("GET", f"/api/records/{record}")
            assert status == 200, f"A cannot read back record {record}, posted by approving card {card}: {status}"
            actual = (got.get("body"), got.get("title"), got.get("parent"), got.get("audience"))
            assert actual == seen.record() and got.get("owner") == principals["A"].user, (
                f"approving card {card} posted something other than A was shown: shown {seen.record()!r}, "
                f"posted {actual!r}")[:1500]
            status, theirs = colleague.request("GET", f"/api/records/{record}")
            if seen.audience in ("team", f"user:{principals['B'].user}"):
                assert status == 200 and theirs.get("body") == seen.record()[0], \
                    f"B, in the audience {seen.audience!r} A approved, does not read record {record} as A was shown it"
            else:
                assert status == 404, f"B, outside the audience {seen.audience!r} A approved, reads record {record}"

        # -- the product's paths ------------------------------------------------------------------------

        def _decide(self, card: int, how: str, body: dict) -> tuple[int, Any]:
            nonce = platform_probe(f"{how} card {card}")
            probes.append(nonce)
            return owner.request("POST", f"/api/approvals/{card}/{how}", body, headers=with_request_id(nonce))

        def _observe(self) -> list[dict]:
            """A's cards as listed; the digest of each card of this sequence judged against every content it
            was seen with."""
            status, body = owner.request("GET", "/api/approvals")
            if status != 200:
                raise TargetError(f"A cannot list A's approval cards: {status} {body!r}"[:300])
            mark = f"{prefix}-{self.n}-"
            for card in body["cards"]:
                s = shown(card)
                if mark not in s.payload:
                    continue  # another sequence's (or case's) card: judged by its own
                first = self.bound.setdefault(s.sha256, s.content)
                assert first == s.content, (
                    f"card {card['id']}'s digest, which an approval names, was seen on {first!r} and now on "
                    f"{s.content!r}: approving by it cannot bind what posts")[:1500]
            return body["cards"]

        def _records(self) -> list[dict]:
            status, body = owner.request("GET", "/api/records")
            if status != 200:
                raise TargetError(f"A cannot list A's records: {status} {body!r}"[:300])
            mark = f"{prefix}-{self.n}-"
            return [r for r in body["records"] if mark in r["body"] or mark in r["title"]]

    return Approvals


def _pick(candidates: list[int], index: int) -> int:
    return candidates[index % len(candidates)]


def run_floor(machine: type[RuleBasedStateMachine]) -> None:
    """One fixed sequence reaching every kind in ``Reach.REQUIRED`` (so the search's luck never decides whether
    the class was exercised), judged like any other: the invariant after every step."""
    m = machine()
    steps: list[tuple[str, dict]] = [
        ("first_card_and_a_look", {"kind": "comment", "slot": 0, "edges": (" ", "\n"), "words": "café ﬁle"}),
        # a later write to the comment's issue, then A approves the comment from the page A has
        ("later_write_then_approve_as_shown", {"pick": 0, "resend": False, "edges": ("\t", " "), "words": "cafe\u0301"}),
        ("write", {"kind": "task", "slot": 0, "edges": ("", "\u00a0"), "words": "Straße " + LONG}),
        ("look", {}),
        # pending on the page: the second comment, the task; the task's text re-sent to the other colleague,
        # then A approves the task (for the first colleague) from the page A has
        ("later_write_then_approve_as_shown", {"pick": 1, "resend": True, "edges": ("", ""), "words": ""}),
        ("approve", {"pick": 0, "other": None}),  # the first comment again: it was posted
        ("write", {"kind": "message", "slot": 0, "edges": ("  \n", ""), "words": "a\u200bb"}),
        ("look", {}),
        # on the page: comment 1 (posted), comment 2, task (posted), task re-sent, message
        ("approve", {"pick": 1, "other": 0}),  # the second comment, with the first one's digest
        ("reject", {"pick": 4}),
        ("approve", {"pick": 1, "other": None}),
        # a message and an invitation approved as shown (pick -1: the newest card on the page)
        ("write", {"kind": "message", "slot": 1, "edges": (" ", " "), "words": "ok"}),
        ("look", {}),
        ("approve", {"pick": -1, "other": None}),
        ("write", {"kind": "invite", "slot": 0, "edges": ("", " "), "words": "Mixed@Case.Example"}),
        ("look", {}),
        ("approve", {"pick": -1, "other": None}),
    ]
    m.posted_is_exactly_what_was_approved_as_shown()
    for name, arguments in steps:
        getattr(m, name)(**arguments)
        m.posted_is_exactly_what_was_approved_as_shown()


def check_reach(reach: Reach) -> None:
    """Broken, not passed, when what was run did not reach a kind of sequence the class turns on."""
    if reach.missing():
        raise ProofError(f"SH-2's card operation sequences did not reach: {', '.join(reach.missing())} "
                         f"({reach.summary()}): the fixed sequence (run_floor) no longer reaches them")
