"""The target contract: what the suite may ask of the platform it qualifies, as a small core and facets.

The suite never reaches into runtime internals; it drives a ``Target``. A security team qualifies its own
platform by writing one driver (``docs/writing-a-driver.md``; ``targets/reference/`` is the worked example)
and registering it under the ``pairproof.targets`` entry-point group.

- **The core** (``Target``): provision, destroy, exec, identity, turn, plant, read back, platform secrets,
  artifacts, close. Every driver implements it; without it nothing can be probed.
- **Facets** (``FACETS``): small ``runtime_checkable`` Protocols, each named by the channel it lets the suite
  observe (lifecycle, credentials, broker, model path, snapshots, ...) and one per deliberately broken
  arrangement (``broken_shared_volume``, ...). A driver implements the facets its platform has. The
  catalogue (``catalogue.toml``) says which facets each case needs (its refusals and its controls); a case
  whose facet the target lacks is reported *not covered: target lacks <facet>*, which the gate fails: a
  missing facet never reads as a pass. The declaration is checked, not trusted: a case's tests get a view of
  the target (``TargetView``) that exposes only the core and the facets the case declared.

Every operation is phrased in the product's terms (principals, instances, turns) so that a driver can
implement it through the platform's real paths: ``plant`` goes through a chat turn that stores memory,
not a write into the volume from outside.

Request ids: the operations that make a platform call accept ``request_id=`` (and ``ProductClient.request``
an ``X-Request-Id`` header). The driver hands it to the platform the way the platform carries a request id,
and the platform records it with its decision (its log, a component's audit, the provider's record of the
calls a turn made). That record (the ``platform_log`` facet) is how a platform-side probe proves it ran
(``ProbeLog.confirm``); a case that makes such probes declares the facet, so a driver whose platform keeps no
record leaves the case not covered, never passed.
"""


from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class Principal:
    """Someone the platform serves: ``A`` (org1 owner), ``B`` (same org), ``C`` (other org)."""

    name: str
    org: str
    user: str


@dataclass(frozen=True)
class InstanceRef:
    """A handle the target gives out; the suite treats ``key`` as opaque."""

    principal: Principal
    key: str
    generation: int = 1


@dataclass(frozen=True)
class Identity:
    """What the host sees of a running sandbox: the ground truth a probe's proof is checked against."""

    host_pid: int
    uid: int
    gid: int
    uid_map: str
    namespaces: Mapping[str, str]


@dataclass(frozen=True)
class ExecResult:
    rc: int
    stdout: bytes
    stderr: bytes


@dataclass(frozen=True)
class Artifacts:
    """Where scanners may look after (or during) a run."""

    state_dir: Path
    volumes: Mapping[str, Path] = field(default_factory=dict)
    logs: Sequence[Path] = ()


class ProductClient(Protocol):
    def request(self, method: str, path: str, body: Mapping[str, object] | None = None,
                headers: Mapping[str, str] | None = None) -> tuple[int, object]:
        """One call; the status and the parsed JSON (or the text of an HTML answer)."""


# Where a canary may be planted in an instance; each is reached through the product's own path.
LOCATIONS = ("memory", "transcript", "task", "volume")


@runtime_checkable
class Target(Protocol):
    """The core: every driver implements all of it."""

    name: str

    def provision(self, principal: Principal, *, memory_limit_mb: int | None = None, request_id: str = ""
                  ) -> InstanceRef:
        """Create the instance for the principal's (org, user) pair and wake it, ready for turns.
        ``memory_limit_mb``: the sandbox's memory limit instead of the platform's default (RS-1 sets it).
        A target with the ``tools`` facet also takes ``settings=``: the user's own settings, through the same
        path as ``configure``, in place before the agent's first start (TS-2, and MD-3/MD-4 for an agent whose
        profile's ``[background]`` names settings, start their instances so)."""

    def destroy(self, ref: InstanceRef) -> None: ...

    def exec(self, ref: InstanceRef, argv: Sequence[str], *, stdin: bytes | None = None,
             timeout: float = 60.0) -> ExecResult:
        """Run ``argv`` inside the instance's sandbox as the agent would run it."""

    def identity(self, ref: InstanceRef) -> Identity:
        """What the host sees of the sandbox; ``host_pid`` is a process in its namespaces (the lab
        captures in its network namespace through it)."""

    def turn(self, ref: InstanceRef, message: str, *, request_id: str = "") -> str:
        """One agent turn; the reply text. ``request_id`` goes with every call the turn makes (the provider's
        record of its model calls names it)."""

    def plant(self, ref: InstanceRef, location: str, token: str) -> None:
        """Put ``token`` in the instance's ``location`` (one of LOCATIONS) through the product's path."""

    def read_back(self, ref: InstanceRef, location: str) -> str:
        """The owner's own view of ``location``, through the product's path."""

    def platform_secrets(self) -> Mapping[str, str]:
        """Secrets the platform holds outside every sandbox (provider key, grants): must never be inside."""

    def artifacts(self) -> Artifacts: ...

    def close(self) -> None:
        """Tear down everything the target created."""


@runtime_checkable
class ExecBinary(Protocol):
    """Optional core: run a host file inside the sandbox by descriptor (``OPTIONAL_CORE``).

    Not a facet (no case declares it, every case may use it); a driver without it is probed with
    ``exec`` and the sandbox's own interpreter instead, and the scan's record says so."""

    def exec_binary(self, ref: InstanceRef, host_path: str, args: Sequence[str], *,
                    env: Mapping[str, str] | None = None, stdin: bytes | None = None,
                    timeout: float = 60.0) -> ExecResult:
        """Open ``host_path`` on the host and execute that open file inside the instance's sandbox (its
        namespaces, its uid, its root and mounts) with ``args`` after the program name and ``env`` added
        to the sandbox's environment, never copying it into the sandbox's filesystem: the image run is the
        host's file, and what it sees is the sandbox's."""


@runtime_checkable
class Lifecycle(Protocol):
    """Sleep (stopped or frozen), wake, replace and kill a sandbox; whether a principal has one running."""

    def wake(self, ref: InstanceRef, *, request_id: str = "") -> InstanceRef:
        """Bring the instance back to ready from whichever sleep it is in (stopped or frozen)."""

    def sleep(self, ref: InstanceRef) -> None:
        """Stop the instance's sandbox; its volume stays."""

    def freeze(self, ref: InstanceRef) -> None:
        """Sleep without stopping: the sandbox's processes stay, held frozen by the host (the cgroup freezer),
        their memory still charged; ``wake`` thaws them. While frozen nothing of the instance may act or be
        acted for: its broker refuses every request, its capabilities buy nothing."""

    def recreate(self, ref: InstanceRef) -> InstanceRef:
        """Replace the sandbox, keep the volume; the returned ref has the next generation."""

    def crash(self, ref: InstanceRef) -> None: ...

    def running(self, principal: Principal) -> bool:
        """Whether any instance of ``principal``'s pair has a running sandbox."""


@runtime_checkable
class Credentials(Protocol):
    """The credentials the platform holds for an instance, and their rotation and revocation."""

    def capabilities(self, ref: InstanceRef) -> Mapping[str, str]:
        """What the instance's broker holds on its behalf (``grant``, ``model``): never inside a sandbox. And
        ``runctl``, the key the agent's run-control API requires (if it requires one), which the platform
        presents on the platform side: inside the instance's own sandbox (the agent checks it), no other.

        The suite takes them as a thief would, to replay them after the platform moved on."""

    def rotate(self, ref: InstanceRef) -> None:
        """Rotate the instance's credentials (lease, grant, model capability)."""

    def revoke(self, ref: InstanceRef) -> None:
        """The kill switch: the instance's grant and capabilities stop being honoured, in flight too."""


@runtime_checkable
class Broker(Protocol):
    """The agent's egress through its per-instance broker: where it listens, what it refused, run control."""

    def broker_endpoint(self, ref: InstanceRef) -> str:
        """The broker's base URL as the agent inside ``ref`` sees it (e.g. http://127.0.0.1:8765)."""

    def broker_refusals(self, ref: InstanceRef) -> list[tuple[str, str]]:
        """(route, reason) of everything the instance's broker refused, as its log records them."""

    def runctl(self, ref: InstanceRef, method: str, path: str, body: Mapping[str, object] | None = None, *,
               request_id: str = "") -> tuple[int, dict]:
        """Call the agent's run-control API through the platform side of the instance's broker."""


@runtime_checkable
class ModelPath(Protocol):
    """The model path: the proxy, a scriptable upstream provider and its record, the meter and caps."""

    def model_call(self, capability: str, body: Mapping[str, object], *, request_id: str = "") -> tuple[int, dict]:
        """Present ``capability`` to the model proxy directly (OpenAI style); the status and JSON answer."""

    def script_model(self, principal: Principal, steps: Sequence[Mapping[str, object]]) -> None:
        """Queue provider-mock steps (``{"reply": text}`` or ``{"tool": name, "arguments": {...}}``) for the
        principal's next model calls."""

    def model_stream(self, capability: str, body: Mapping[str, object], *, request_id: str = ""
                     ) -> tuple[int, Iterator[str]]:
        """As ``model_call`` with ``body`` asking for a stream (``"stream": true``): the status, and the data of
        each server-sent event as the caller receives it, yielded as it arrives (a refusal's body is the one
        item). The iterator ends when the proxy ends the stream; the suite reads it across a revocation."""

    def provider_records(self) -> list[dict]:
        """The provider's own record of every request it got: ``user`` (``org:user``), ``purpose``,
        ``status``, ``stream``, ``request_id``, the tools offered, and ``usage`` (``{"input": tokens,
        "output": tokens}`` the provider billed for an answered call)."""

    def ledger_usage(self) -> Mapping[tuple[str, str, str], Mapping[str, int]]:
        """The proxy's meter per (org, user, purpose) of answered calls: ``calls``, ``input_tokens``,
        ``output_tokens`` as the ledger recorded them (what the platform bills, not re-derived)."""

    def set_spend_cap(self, principal: Principal, usd: float) -> None: ...


@runtime_checkable
class Snapshots(Protocol):
    """Volume snapshots: take, list, restore, and the bytes at rest."""

    def snapshot(self, ref: InstanceRef, *, request_id: str = "") -> str:
        """Snapshot the instance's volume; the snapshot id."""

    def snapshots(self, principal: Principal) -> list[str]:
        """The snapshot ids ``principal`` may see (their own)."""

    def restore(self, snapshot_id: str, into: InstanceRef, *, request_id: str = "") -> InstanceRef:
        """Restore a snapshot into ``into`` (refused unless the snapshot is its owner's); the new ref."""

    def snapshot_bytes(self, snapshot_id: str) -> bytes:
        """The snapshot as stored at rest, for the scanners."""


@runtime_checkable
class Recovery(Protocol):
    """Effects and recovery after a crash: the effect journal and the fenced successor."""

    def recover(self, ref: InstanceRef, *, request_id: str = "") -> InstanceRef:
        """After ``crash``: fence the stale lease, reconcile the old run's effects, admit a successor."""

    def journal(self, ref: InstanceRef) -> list[dict]:
        """The instance's effect journal: operation id, tool, state, attempts."""


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


@runtime_checkable
class Product(Protocol):
    """The product the agent works in, as its people and operators use it, and its routes."""

    def person(self, principal: Principal) -> ProductClient:
        """A client of the product's people API, signed in as ``principal`` (the human, not the agent)."""

    def operator(self, name: str) -> ProductClient:
        """A client of the product signed in as a support operator."""

    def product_routes(self) -> list[tuple[str, str, str]]:
        """Every route the product server really serves: (method, path template, which credential opens it)."""


@runtime_checkable
class Capacity(Protocol):
    """The platform's admission arithmetic and the host limits it admits against."""

    def capacity_need(self, budget: Mapping[str, int], fleet: Mapping[str, int], *, request_id: str = ""
                      ) -> Mapping[str, int]:
        """The platform's admission arithmetic, pure: the ``memory_mb`` and ``disk_mb`` that ``fleet`` needs
        under ``budget`` (integer MB, the seed's field names).

        ``budget``: ``shared_memory_mb``, ``memory_headroom_mb``, ``idle_instance_mb``, ``active_instance_mb``,
        ``broker_mb``, ``volume_mb``, ``disk_headroom_mb``. ``fleet``: ``resident`` (instances in memory),
        ``active`` (of those, running a turn), ``stored_users`` (users whose volume is kept), ``snapshots_mb``.
        Bad input (a missing or unknown field, a negative or non-integer value, more active than resident)
        raises ``TargetError`` naming the field."""

    def capacity_admit(self, budget: Mapping[str, int], fleet: Mapping[str, int], host: Mapping[str, int], *,
                       request_id: str = "") -> tuple[bool, str]:
        """Whether ``fleet`` fits ``host`` (``memory_mb``, ``disk_mb``) under ``budget``, as the platform would
        decide it; the reason names each resource that does not fit (``memory``, ``disk``)."""

    def fleet_need(self) -> Mapping[str, int]:
        """What the platform's current fleet needs under its own budget, and what it admits against:
        ``memory_mb``, ``disk_mb``, ``host_memory_mb``, ``host_disk_mb``, the fleet's figures (``resident``,
        ``active``, ``stored_users``, ``snapshots_mb``) and the budget's fields."""

    def host_limits(self, memory_mb: int | None = None, disk_mb: int | None = None
                    ) -> AbstractContextManager[None]:
        """While inside, the platform admits against these host limits (``None`` keeps the current one);
        restored on exit. A wake or provision the platform does not admit raises ``CapacityRefusedError``
        with its reason and changes nothing."""


@runtime_checkable
class PlatformLog(Protocol):
    """The platform's own record of its decisions, naming each request id (how platform-side probes prove they ran)."""

    def platform_log(self) -> str:
        """The platform's own log so far (controller, brokers, proxy, product server)."""


# -- deliberately broken arrangements (X controls): one facet each, a context manager torn down on exit --


@runtime_checkable
class BrokenSharedVolume(Protocol):
    def broken_shared_volume(self, owner: InstanceRef, intruder: Principal) -> AbstractContextManager[InstanceRef]:
        """The intruder's sandbox gets the owner's volume as its /data (under the owner's uid)."""


@runtime_checkable
class BrokenSharedTmp(Protocol):
    def broken_shared_tmp(self, owner: Principal, intruder: Principal
                          ) -> AbstractContextManager[tuple[InstanceRef, InstanceRef]]:
        """Two sandboxes whose /tmp is the same host folder."""


@runtime_checkable
class BrokenSecretInEnv(Protocol):
    def broken_secret_in_env(self, principal: Principal, extra: Mapping[str, str] | None = None
                             ) -> AbstractContextManager[InstanceRef]:
        """A sandbox launched with the platform's secrets (and ``extra``) in its environment."""


@runtime_checkable
class BrokenSharedPidNs(Protocol):
    def broken_shared_pid_ns(self, intruder: Principal) -> AbstractContextManager[InstanceRef]:
        """The intruder's sandbox shares the host's pid namespace and /proc."""


@runtime_checkable
class BrokenNestedUserns(Protocol):
    def broken_nested_userns(self, intruder: Principal) -> AbstractContextManager[InstanceRef]:
        """The intruder's sandbox lets its processes create a user namespace (and, in it, any other)."""


@runtime_checkable
class BrokenSameUid(Protocol):
    def broken_same_uid(self, owner: InstanceRef, intruder: Principal) -> AbstractContextManager[InstanceRef]:
        """The intruder's sandbox runs under the owner's host uid (its own volume)."""


@runtime_checkable
class BrokenHostAccountUid(Protocol):
    def broken_host_account_uid(self, intruder: Principal, account: str = "nobody"
                                ) -> AbstractContextManager[InstanceRef]:
        """The intruder's sandbox runs under an existing host account's uid."""


@runtime_checkable
class BrokenUnauditedOperatorRoute(Protocol):
    def broken_unaudited_operator_route(self) -> AbstractContextManager[str]:
        """A support route that reads records without writing the audit; yields its path template (``{id}``)."""


@runtime_checkable
class BrokenDebugLogging(Protocol):
    def broken_debug_logging(self) -> AbstractContextManager[None]:
        """The platform logs at debug level while it lasts."""


@runtime_checkable
class BrokenOpenEgress(Protocol):
    def broken_open_egress(self, principal: Principal, lab: object, catalog_refresh: float = 0.0
                           ) -> AbstractContextManager[InstanceRef]:
        """A sandbox linked to the lab with a default route and the lab's resolver."""


@runtime_checkable
class BrokenUnencryptedSnapshot(Protocol):
    def broken_unencrypted_snapshot(self) -> AbstractContextManager[None]:
        """``snapshot``/``restore`` store snapshots compressed but not encrypted while it lasts."""


@runtime_checkable
class BrokenUnmeteredModelCall(Protocol):
    def broken_unmetered_model_call(self, principal: Principal, purpose: str = "title") -> AbstractContextManager[None]:
        """One model call for ``principal`` reaches the provider past the platform's meter."""


@runtime_checkable
class BrokenCapacityWithoutBrokers(Protocol):
    def broken_capacity_without_brokers(self) -> AbstractContextManager[None]:
        """The capacity arithmetic budgets no broker per resident instance while it lasts."""


@runtime_checkable
class BrokenLossyProductLink(Protocol):
    def broken_lossy_product_link(self, ref: InstanceRef) -> AbstractContextManager[None]:
        """Requests from ``ref``'s broker reach the product, answers are lost."""


@runtime_checkable
class BrokenUnreachableProduct(Protocol):
    def broken_unreachable_product(self, ref: InstanceRef) -> AbstractContextManager[None]:
        """The product refuses ``ref``'s broker's connections."""


# -- the registry: facet name -> Protocol and what it lets the suite observe ----------------------------


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
    Facet("broker", Broker, "the agent's egress through its per-instance broker: its endpoint, its refusals, run control"),
    Facet("model", ModelPath, "the model path: the proxy, a scriptable provider and its record, the meter, spend caps"),
    Facet("snapshots", Snapshots, "volume snapshots: take, list, restore, the bytes at rest"),
    Facet("recovery", Recovery, "effects and recovery after a crash: the effect journal, a fenced successor"),
    Facet("tools", ToolSurface, "the agent's tool surface: signed-off tools, what it resolved, settings, managed config"),
    Facet("product", Product, "the product as its people and support operators use it, and every route it serves"),
    Facet("capacity", Capacity, "the admission arithmetic and the host limits the platform admits against"),
    Facet("platform_log", PlatformLog, "the platform's own record of its decisions, naming request ids (proof for "
                                       "platform-side probes)"),
    *(Facet(members(p)[0], p, "broken arrangement: " + _first_line(p)) for p in (
        BrokenSharedVolume, BrokenSharedTmp, BrokenSecretInEnv, BrokenSharedPidNs, BrokenNestedUserns, BrokenSameUid,
        BrokenHostAccountUid, BrokenUnauditedOperatorRoute, BrokenDebugLogging, BrokenOpenEgress,
        BrokenUnencryptedSnapshot, BrokenUnmeteredModelCall, BrokenCapacityWithoutBrokers, BrokenLossyProductLink,
        BrokenUnreachableProduct)),
)}
# Which facet each contract method belongs to (a method is in exactly one facet, or in the core).
FACET_OF: dict[str, str] = {m: f.name for f in FACETS.values() for m in f.methods}


def facets_of(target: object) -> list[str]:
    """The facets ``target`` implements (``isinstance`` against each Protocol: the methods are there)."""
    return [name for name, f in FACETS.items() if isinstance(target, f.protocol)]


def core_missing(target: object) -> list[str]:
    """The core methods ``target`` does not have."""
    return [m for m in CORE if not hasattr(target, m)]


class UndeclaredFacetError(Exception):
    """A case's test reached a method of a facet its catalogue entry does not declare, or one outside the
    contract. Not an assertion and not a ``TargetError`` (which tests may expect): the plugin counts the test
    broken, whether or not the test caught it."""


class TargetView:
    """The target as one case's tests see it: the core and the facets the case declared, nothing else.

    The catalogue's ``facets`` of a case is what decides whether a target that lacks one may run it; the
    view makes that declaration checked, not trusted: reaching another facet's method raises
    ``UndeclaredFacetError`` naming it (and is remembered, for ``view_violations``, in case the test caught
    it). Every attribute goes through the check, the view's own state included (it has no ``__dict__``, and
    ``_target`` is refused like any other name): the driver behind it is not one attribute away."""

    __slots__ = ("_target", "_case", "_facets", "_violations")

    def __init__(self, target: object, case: str, facets: Iterable[str]) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_case", case)
        object.__setattr__(self, "_facets", frozenset(facets))
        object.__setattr__(self, "_violations", [])

    def __getattribute__(self, attr: str) -> Any:
        if attr in ("__class__", "__repr__", "__str__", "__eq__", "__hash__", "__ne__", "__setattr__",
                    "__delattr__", "__init_subclass__", "__subclasshook__"):
            return object.__getattribute__(self, attr)
        state = object.__getattribute__
        case, target, facets = state(self, "_case"), state(self, "_target"), state(self, "_facets")
        facet = FACET_OF.get(attr)
        if attr in CORE or attr in OPTIONAL_CORE or (facet is not None and facet in facets):
            return getattr(target, attr)
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)  # Python's own protocol probes (copy, pickle, ...): the view has none
        if facet is None:
            why = (f"{case} reached target.{attr}, which is not part of the target contract "
                   "(acceptance/contract/): a case may use only the core and its declared facets")
        else:
            why = (f"{case} reached target.{attr} of facet {facet!r}, which its catalogue entry does not "
                   f"declare: add {facet!r} to facets of [{case}] in acceptance/catalogue.toml")
        state(self, "_violations").append(why)
        raise UndeclaredFacetError(why)

    def __setattr__(self, attr: str, value: object) -> None:
        raise AttributeError(f"the target of a case is read-only (set {attr!r} on the driver instead)")

    def __delattr__(self, attr: str) -> None:
        raise AttributeError(f"the target of a case is read-only (delete {attr!r} on the driver instead)")

    def __repr__(self) -> str:
        state = object.__getattribute__
        return f"<{state(self, '_case')}'s view of {getattr(state(self, '_target'), 'name', '?')}: core + " \
               f"{sorted(state(self, '_facets'))}>"


def view_violations(view: TargetView) -> tuple[str, ...]:
    """What the case's tests reached outside their declaration (for the plugin; a test cannot clear it)."""
    return tuple(object.__getattribute__(view, "_violations"))
