"""The ``tools`` facet: the agent's tool surface (the signed-off tools, what the agent resolved, the user's
settings, the managed configuration); with its check-driver round trip.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from acceptance.contract.checking import OTHER, Checker, check
from acceptance.contract.core import InstanceRef, Principal


@runtime_checkable
class ToolSurface(Protocol):
    """The agent's tool surface: the signed-off tools, what the agent resolved, settings and the managed config."""

    def intended_tools(self) -> Mapping[str, str]:
        """The tool surface the security team signed off: tool name -> the route it is meant to come by
        (``builtin`` for the agent's own, ``mcp:<server>`` for a tool server's). The driver declares it; it
        is not read from the platform's configuration, which is what is being checked against it."""

    def tool_surface(self, ref: InstanceRef) -> Mapping[str, str]:
        """The surface as the agent resolved it right now: tool name -> the route it came by. The decisive
        observation is still the provider's record of the tools offered (``provider_records``)."""

    def configure(self, ref: InstanceRef, settings: object) -> None:
        """Write the user's own agent settings through the product's path, exactly as given (a user may
        write anything there); the platform decides what of it applies."""

    def managed_config(self) -> bytes:
        """The managed configuration the platform deploys to every agent, as bytes."""

    def start_with_managed_config(self, principal: Principal, config: bytes, *, request_id: str = "") -> InstanceRef:
        """Provision and wake ``principal``'s instance under ``config`` instead of the deployed file. A
        platform that refuses raises ``TargetError`` saying why, having started nothing."""

    def pin_tool(self, ref: InstanceRef, name: str) -> None:
        """Pin an advertised tool for this instance, as an operator updating its managed configuration."""


def round_trip(c: Checker) -> str:
    """Every tools method answers in kind; an instance started under the deployed managed config runs."""
    t, ref = c.target, c.ref
    intended = t.intended_tools()
    check(isinstance(intended, Mapping) and intended, "intended_tools is empty")
    surface = t.tool_surface(ref)
    check(isinstance(surface, Mapping), f"tool_surface returned {type(surface).__name__}")
    config = t.managed_config()
    check(isinstance(config, bytes) and config, "managed_config is not non-empty bytes")
    t.configure(ref, {})
    served = [n for n, route in intended.items() if route.startswith("mcp:")]
    if served:
        t.pin_tool(ref, served[0])
    other = t.start_with_managed_config(OTHER, config)
    try:
        out = t.exec(other, ["true"], timeout=30)
        check(out.rc == 0, f"exec in an instance started with the managed config: rc {out.rc}")
    finally:
        t.destroy(other)
    return (f"intended_tools ({len(intended)}), tool_surface ({len(surface)}), managed_config, configure, "
            f"pin_tool{' ' + served[0] if served else ' (no mcp tool to pin)'}, start_with_managed_config")
