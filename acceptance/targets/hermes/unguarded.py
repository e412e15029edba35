"""The ``hermes-unguarded`` target: hermes-agent 0.19.0 with its own configuration handling and its defaults
(``acceptance/profiles/hermes-unguarded.toml``: no managed layer; the model and the product's tools in the
user's own config, which the user and the agent may change). The platform around it (sandbox, broker, proxy,
product) is the same, and so is the surface signed off (``intended_tools``): its verdict is expected to fail,
and its failures are the product of the qualification.
"""

from __future__ import annotations

from .. import TargetOptions
from .driver import HermesTarget, clean, preflight

__all__ = ["DEFAULT_PROFILE", "HermesUnguardedTarget", "clean", "create", "preflight"]

DEFAULT_PROFILE = "hermes-unguarded"


class HermesUnguardedTarget(HermesTarget):
    name = DEFAULT_PROFILE


def create(options: TargetOptions) -> HermesUnguardedTarget:
    return HermesUnguardedTarget(options)
