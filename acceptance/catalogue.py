"""The case catalogue (``catalogue.toml``) loaded into records the plugin and the reports share."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

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


@cache
def load(path: Path = PATH) -> Mapping[str, Case]:
    data = tomllib.loads(path.read_text())
    cases = {}
    for case_id, entry in data.items():
        controls = dict(entry.get("controls", {}))
        unknown = set(controls) - {"P", "X"}
        if unknown:
            raise ValueError(f"{path}: case {case_id} has control roles {sorted(unknown)}; use P or X")
        cases[case_id] = Case(case_id, entry["boundary"], entry["channel"], entry["refusal"],
                              entry["severity"], controls)
    return cases
