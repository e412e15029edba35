"""The case catalogue (``catalogue.toml``) loaded into records the plugin and the reports share."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from acceptance.contract import FACETS

PATH = Path(__file__).with_name("catalogue.toml")
ROLES = ("refusal", "P", "X")


@dataclass(frozen=True)
class Case:
    id: str
    boundary: str
    channel: str
    refusal: str
    severity: str
    controls: Mapping[str, str]
    facets: tuple[str, ...] = ()  # the target facets its tests use (contract.FACETS), refusal and controls


@cache
def load(path: Path = PATH) -> Mapping[str, Case]:
    data = tomllib.loads(path.read_text())
    cases = {}
    for case_id, entry in data.items():
        controls = dict(entry.get("controls", {}))
        unknown = set(controls) - {"P", "X"}
        if unknown:
            raise ValueError(f"{path}: case {case_id} has control roles {sorted(unknown)}; use P or X")
        if "facets" not in entry:
            raise ValueError(f"{path}: case {case_id} does not say which target facets it needs: add "
                             "facets = [...] (names from acceptance/contract/ FACETS; [] for the core alone)")
        facets = tuple(entry["facets"])
        unknown = [f for f in facets if f not in FACETS]
        if unknown:
            raise ValueError(f"{path}: case {case_id} names facets {unknown} that the contract does not have: "
                             f"use names from acceptance/contract/ FACETS ({', '.join(FACETS)})")
        cases[case_id] = Case(case_id, entry["boundary"], entry["channel"], entry["refusal"],
                              entry["severity"], controls, facets)
    return cases
