"""The facet registry: each facet's name, its Protocol and what it lets the suite observe, and the questions
asked of a driver against it (which facets it has, which core methods it lacks).

The names are the catalogue's vocabulary (``facets = [...]`` of each case in ``acceptance/catalogue.toml``)
and check-driver's; the docs' facets table is generated from ``FACETS`` (``conformance.facets_markdown``).
"""

from __future__ import annotations

from dataclasses import dataclass

from acceptance.contract.core import ExecBinary, Target
from acceptance.contract.facets.broken import (
    BrokenCapacityWithoutBrokers,
    BrokenDebugLogging,
    BrokenHostAccountUid,
    BrokenHostDevice,
    BrokenHostUtsCgroupNs,
    BrokenLaxModelCapability,
    BrokenLossyProductLink,
    BrokenNestedUserns,
    BrokenNoCpuLimit,
    BrokenNoSeccomp,
    BrokenOpenEgress,
    BrokenSameUid,
    BrokenSecretInEnv,
    BrokenSharedPidNs,
    BrokenSharedPropagation,
    BrokenSharedTmp,
    BrokenSharedVolume,
    BrokenUnauditedOperatorRoute,
    BrokenUnencryptedSnapshot,
    BrokenUnmeteredModelCall,
    BrokenUnreachableProduct,
    BrokenWritableRoot,
)
from acceptance.contract.facets.broker import Broker
from acceptance.contract.facets.capacity import Capacity
from acceptance.contract.facets.credentials import Credentials
from acceptance.contract.facets.lifecycle import Lifecycle
from acceptance.contract.facets.logs import PlatformLog
from acceptance.contract.facets.model import ModelPath
from acceptance.contract.facets.product import Product
from acceptance.contract.facets.recovery import Recovery
from acceptance.contract.facets.snapshots import Snapshots
from acceptance.contract.facets.startup import Startup
from acceptance.contract.facets.tools import ToolSurface


@dataclass(frozen=True)
class Facet:
    name: str
    protocol: type
    description: str

    @property
    def methods(self) -> tuple[str, ...]:
        return members(self.protocol)


def members(protocol: type) -> tuple[str, ...]:
    """The attributes a Protocol asks for, in the order it declares them."""
    names = [n for n in vars(protocol) if not n.startswith("_") and callable(vars(protocol)[n])]
    return (*(n for n in getattr(protocol, "__annotations__", {}) if not n.startswith("_")), *names)


def _first_line(protocol: type) -> str:
    """A broken arrangement's description: the first sentence of its one method's docstring."""
    [method] = [vars(protocol)[n] for n in members(protocol)]
    text = " ".join((method.__doc__ or "").split()).split(". ")[0].rstrip(".")
    return text[:1].lower() + text[1:]


CORE = members(Target)
# Core methods a driver may lack: the suite falls back to another way and records that it did.
OPTIONAL_CORE = members(ExecBinary)
FACETS: dict[str, Facet] = {f.name: f for f in (
    Facet("lifecycle", Lifecycle, "sleep, freeze, wake, recreate and crash an instance; whether a principal has one "
                                  "running"),
    Facet("credentials", Credentials, "the credentials held for an instance (grant, model capability), rotated and revoked"),
    Facet("broker", Broker,
          "the agent's egress through its per-instance broker: its endpoint, its refusals, what it forwarded, run control"),
    Facet("model", ModelPath, "the model path: the proxy, a scriptable provider and its record, the meter, spend caps"),
    Facet("snapshots", Snapshots, "volume snapshots: take, list, restore, the bytes at rest"),
    Facet("recovery", Recovery, "effects and recovery after a crash: the effect journal, a fenced successor"),
    Facet("tools", ToolSurface, "the agent's tool surface: signed-off tools, what it resolved, settings, managed config"),
    Facet("product", Product, "the product as its people and support operators use it, and every route it serves"),
    Facet("capacity", Capacity, "the admission arithmetic and the host limits the platform admits against"),
    Facet("startup", Startup, "a cold start traced from the host: every file the agent opened while starting, and what "
                              "the platform wrote for it"),
    Facet("platform_log", PlatformLog, "the platform's own record of its decisions, naming request ids (proof for "
                                       "platform-side probes)"),
    *(Facet(members(p)[0], p, "broken arrangement: " + _first_line(p)) for p in (
        BrokenSharedVolume, BrokenSharedTmp, BrokenSecretInEnv, BrokenSharedPidNs, BrokenNestedUserns, BrokenSameUid,
        BrokenHostAccountUid, BrokenUnauditedOperatorRoute, BrokenDebugLogging, BrokenOpenEgress,
        BrokenUnencryptedSnapshot, BrokenUnmeteredModelCall, BrokenCapacityWithoutBrokers, BrokenLossyProductLink,
        BrokenUnreachableProduct, BrokenLaxModelCapability, BrokenWritableRoot, BrokenNoSeccomp, BrokenHostDevice,
        BrokenSharedPropagation, BrokenHostUtsCgroupNs, BrokenNoCpuLimit)),
)}
# Which facet each contract method belongs to (a method is in exactly one facet, or in the core).
FACET_OF: dict[str, str] = {m: f.name for f in FACETS.values() for m in f.methods}


def facets_of(target: object) -> list[str]:
    """The facets ``target`` implements (``isinstance`` against each Protocol: the methods are there)."""
    return [name for name, f in FACETS.items() if isinstance(target, f.protocol)]


def core_missing(target: object) -> list[str]:
    """The core methods ``target`` does not have."""
    return [m for m in CORE if not hasattr(target, m)]
