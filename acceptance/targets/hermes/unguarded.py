"""The ``hermes-unguarded`` target: hermes-agent 0.19.0 with its own configuration handling and its defaults
(``acceptance/profiles/hermes-unguarded.toml``: no managed layer; the model and the product's tools in the
user's own config, which the user and the agent may change). The platform around it (sandbox, broker, proxy,
product) is the same, and so is the surface signed off (``intended_tools``): its verdict is expected to fail,
and its failures are the product of the qualification.
"""

from __future__ import annotations

from ...errors import TargetError
from .. import TargetOptions
from .driver import HermesTarget, clean, preflight

__all__ = ["DEFAULT_PROFILE", "HermesUnguardedTarget", "clean", "create", "preflight"]

DEFAULT_PROFILE = "hermes-unguarded"


class HermesUnguardedTarget(HermesTarget):
    name = DEFAULT_PROFILE

    def managed_config(self) -> bytes:
        """Not built yet: with hermes's own handling there is no managed file the platform checks (its profile
        has no ``[managed]``), and the runtime's answer (pairproof's own managed.json, which hermes never reads)
        would let TS-3 judge a file that does not govern this agent."""
        raise TargetError("hermes-unguarded deploys no managed file of hermes's for the platform to check: TS-3 "
                          "cannot be judged for it yet (issue 16, a later stage: hermes's own handling of a bad one)")

    def start_with_managed_config(self, principal, config: bytes, *, request_id: str = ""):
        self.managed_config()

    def configure(self, ref, settings: object) -> None:
        """Not built yet: hermes's own handling would write the user's settings into its config.yaml unfiltered;
        the runtime has no path that does that (its only path is the allowlist, which this profile does not give),
        and sending them as a message would say nothing about hermes."""
        raise TargetError("hermes-unguarded has no path that writes a user's settings to hermes unfiltered: TS-2 "
                          "cannot be judged for it yet (issue 16, a later stage)")


def create(options: TargetOptions) -> HermesUnguardedTarget:
    return HermesUnguardedTarget(options)
