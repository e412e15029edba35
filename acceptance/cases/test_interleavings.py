"""LF-6: random interleavings of lifecycle operations keep every invariant (hypothesis, stateful).

Two principals in two organizations go through create, plant, turn (with an effect), rotate, revoke,
recreate, snapshot, restore and crash/recover in orders hypothesis chooses. After every step:
no principal sees the other's canaries and each still sees its own (a scan from inside each sandbox that
must find the principal's own canaries, or it did not look); no capability outlives its generation or lease
(every one retired so far buys no model call: the provider records none for it); every operation has
exactly the effects it should at the product (one, or none if the turn ran while its instance was revoked);
and a restore of another principal's snapshot is refused and changes nothing. Deterministic in CI
(``--lf6-examples``, default 3, derandomized); raise it locally for a longer search.

The kill switch is modelled as lasting until the instance's generation changes (recreate, restore,
recovery): a rotation does not lift it.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from acceptance.contract import Principal
from acceptance.errors import ProofError, TargetError
from acceptance.harness.evidence import attach, calls_of

PEOPLE = {"I": Principal("I", "org4", "ivy"), "J": Principal("J", "org5", "jay")}
BODY = {"model": "reference-main", "messages": [{"role": "user", "content": "hi"}], "metadata": {"purpose": "turn"}}


def build_machine(target, scan_visible, sandbox_host, mint, counter, profile):
    class Interleavings(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            n = self.n = next(counter)
            # Fresh users per example: a search is many runs, each from a clean platform state.
            self.people = {k: Principal(k, p.org, f"{p.user}{n}") for k, p in PEOPLE.items()}
            self.refs = {k: target.provision(p) for k, p in self.people.items()}
            self.tokens = {k: set() for k in self.people}  # every canary planted, ever
            self.present = {k: set() for k in self.people}  # those the principal's state holds now
            self.retired: list[tuple[str, str]] = []
            self.markers: list[tuple[str, str, int]] = []  # (who, marker, effects expected)
            self.snaps: dict[str, tuple[str, set[str]]] = {}
            self.revoked = {k: False for k in self.people}
            self.checked = {"scans": 0, "replays": 0, "effects": 0}

        def teardown(self) -> None:
            attach(f"LF-6 example {self.n}", {"checked": self.checked, "planted": {k: len(v) for k, v in self.tokens.items()},
                                              "operations": len(self.markers), "retired capabilities": len(self.retired)})
            for ref in self.refs.values():
                target.destroy(ref)

        def _retire(self, who: str) -> None:
            self.retired.append((who, target.capabilities(self.refs[who])["model"]))

        @rule(who=st.sampled_from(sorted(PEOPLE)))
        def plant(self, who):
            token = mint.mint(f"{who.lower()}{self.n}"[:6], f"m{len(self.tokens[who])}"[:6]).token
            target.plant(self.refs[who], "memory", token)
            self.tokens[who].add(token)
            self.present[who].add(token)

        @rule(who=st.sampled_from(sorted(PEOPLE)))
        def turn_with_effect(self, who):
            marker = f"lf6-{who}-{len(self.markers)}"
            target.script_model(self.people[who], [{"tool": profile.tool("notes_create"), "arguments": {"body": marker}},
                                                        {"reply": "ok"}])
            target.turn(self.refs[who], "note it")
            self.markers.append((who, marker, 0 if self.revoked[who] else 1))

        @rule(who=st.sampled_from(sorted(PEOPLE)))
        def rotate(self, who):
            self._retire(who)
            target.rotate(self.refs[who])

        @rule(who=st.sampled_from(sorted(PEOPLE)))
        def revoke(self, who):
            target.revoke(self.refs[who])
            self._retire(who)
            self.revoked[who] = True

        @rule(who=st.sampled_from(sorted(PEOPLE)))
        def recreate(self, who):
            self._retire(who)
            self.refs[who] = target.recreate(self.refs[who])
            self.revoked[who] = False

        @rule(who=st.sampled_from(sorted(PEOPLE)))
        def snapshot(self, who):
            self.snaps[who] = (target.snapshot(self.refs[who]), set(self.present[who]))

        @precondition(lambda self: bool(self.snaps))
        @rule(who=st.sampled_from(sorted(PEOPLE)), whose=st.sampled_from(sorted(PEOPLE)))
        def restore(self, who, whose):
            if whose not in self.snaps:
                return
            snap, held = self.snaps[whose]
            if who != whose:
                try:
                    target.restore(snap, into=self.refs[who])
                except TargetError:
                    return  # refused; the invariants check that nothing of it arrived
                raise AssertionError(f"{who}'s instance restored {whose}'s snapshot")
            self._retire(who)
            self.refs[who] = target.restore(snap, into=self.refs[who])
            self.present[who] = set(held)
            self.revoked[who] = False

        @rule(who=st.sampled_from(sorted(PEOPLE)))
        def crash_and_recover(self, who):
            self._retire(who)
            target.crash(self.refs[who])
            self.refs[who] = target.recover(self.refs[who])
            self.revoked[who] = False

        @invariant()
        def nobody_sees_the_others_canaries(self):
            for who, ref in self.refs.items():
                seen = scan_visible(sandbox_host(ref))
                self.checked["scans"] += 1
                if not self.present[who] <= seen:
                    raise ProofError(f"the scan in {who}'s sandbox missed {who}'s own canaries: it did not look")
                others = set().union(*(t for k, t in self.tokens.items() if k != who))
                assert seen & others == set(), f"{who} sees another principal's canary"

        @invariant()
        def no_capability_outlives_its_generation_or_lease(self):
            for who, capability in self.retired:
                before = calls_of(target, self.people[who])
                status, _ = target.model_call(capability, BODY)
                self.checked["replays"] += 1
                assert status != 200 and calls_of(target, self.people[who]) == before, "a retired capability was admitted"

        @invariant()
        def every_operation_has_at_most_one_effect(self):
            for who in self.people:
                listed = target.person(self.people[who]).request("GET", "/api/records?kind=note")[1]["records"]
                bodies = [r["body"] for r in listed]
                for _, marker, expected in (m for m in self.markers if m[0] == who):
                    self.checked["effects"] += 1
                    assert bodies.count(marker) == expected, \
                        f"operation {marker} happened {bodies.count(marker)} times, expected {expected}"

    return Interleavings


@pytest.mark.case("LF-6", "refusal", pair="I,J")
def test_lf6_random_interleavings_keep_every_invariant(request, target, scan_visible, sandbox_host, pairproof_run,
                                                     agent_profile):
    examples = request.config.getoption("pairproof_lf6_examples")
    machine = build_machine(target, scan_visible, sandbox_host, pairproof_run.mint, itertools.count(),
                            agent_profile)
    run_state_machine_as_test(machine, settings=settings(max_examples=examples, stateful_step_count=6, deadline=None,
                                                         derandomize=True, database=None))
