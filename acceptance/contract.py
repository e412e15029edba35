"""The target contract: everything the suite may ask of the platform it qualifies.

The suite never reaches into runtime internals; it drives a ``Target``. A security team qualifies its own
platform by writing one driver that satisfies this Protocol (see ``targets/reference/`` for the worked
example) and registering it under the ``pairproof.targets`` entry-point group.

Every operation is phrased in the product's terms (principals, instances, turns) so that a driver can
implement it through the platform's real paths: ``plant`` goes through a chat turn that stores memory,
not a write into the volume from outside.

Request ids: the operations that make a platform call accept ``request_id=`` (and ``ProductClient.request``
an ``X-Request-Id`` header). The driver hands it to the platform the way the platform carries a request id,
and the platform records it with its decision (its log, a component's audit, the provider's record of the
calls a turn made). That record is how a platform-side probe proves it ran (``ProbeLog.confirm``); a driver
whose platform keeps no such record leaves those probes without proof, and the refusals that rest on them
broken, never passed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable


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
    name: str

    def provision(self, principal: Principal, *, request_id: str = "") -> InstanceRef:
        """Create the instance for the principal's (org, user) pair and wake it, ready for turns."""

    def wake(self, ref: InstanceRef, *, request_id: str = "") -> InstanceRef: ...

    def sleep(self, ref: InstanceRef) -> None: ...

    def recreate(self, ref: InstanceRef) -> InstanceRef:
        """Replace the sandbox, keep the volume; the returned ref has the next generation."""

    def destroy(self, ref: InstanceRef) -> None: ...

    def crash(self, ref: InstanceRef) -> None: ...

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

    # -- the model path and the broker (issue: broker and model path) ----------------------------------

    def broker_endpoint(self, ref: InstanceRef) -> str:
        """The broker's base URL as the agent inside ``ref`` sees it (e.g. http://127.0.0.1:8765)."""

    def capabilities(self, ref: InstanceRef) -> Mapping[str, str]:
        """What the instance's broker holds on its behalf (``grant``, ``model``): never inside a sandbox.

        The suite takes them as a thief would, to replay them after the platform moved on."""

    def model_call(self, capability: str, body: Mapping[str, object], *, request_id: str = "") -> tuple[int, dict]:
        """Present ``capability`` to the model proxy directly (OpenAI style); the status and JSON answer."""

    def runctl(self, ref: InstanceRef, method: str, path: str, body: Mapping[str, object] | None = None, *,
               request_id: str = "") -> tuple[int, dict]:
        """Call the agent's run-control API through the platform side of the instance's broker."""

    def script_model(self, principal: Principal, steps: Sequence[Mapping[str, object]]) -> None:
        """Queue provider-mock steps (``{"reply": text}`` or ``{"tool": name, "arguments": {...}}``) for the
        principal's next model calls."""

    def provider_records(self) -> list[dict]:
        """The provider's own record of every request it got (the tools offered, the purpose, usage)."""

    def ledger_counts(self) -> Mapping[tuple[str, str, str], int]:
        """The proxy's metered calls per (org, user, purpose)."""

    def set_spend_cap(self, principal: Principal, usd: float) -> None: ...

    def pin_tool(self, ref: InstanceRef, name: str) -> None:
        """Pin an advertised tool for this instance, as an operator updating its managed configuration."""

    def platform_log(self) -> str:
        """The platform's own log so far (controller, brokers, proxy, product server)."""

    def broker_refusals(self, ref: InstanceRef) -> list[tuple[str, str]]:
        """(route, reason) of everything the instance's broker refused, as its log records them."""

    # -- lifecycle and snapshots (issue: snapshots, journal, recovery) ------------------------------------

    def rotate(self, ref: InstanceRef) -> None:
        """Rotate the instance's credentials (lease, grant, model capability)."""

    def revoke(self, ref: InstanceRef) -> None:
        """The kill switch: the instance's grant and capabilities stop being honoured, in flight too."""

    def recover(self, ref: InstanceRef, *, request_id: str = "") -> InstanceRef:
        """After ``crash``: fence the stale lease, reconcile the old run's effects, admit a successor."""

    def journal(self, ref: InstanceRef) -> list[dict]:
        """The instance's effect journal: operation id, tool, state, attempts."""

    def snapshot(self, ref: InstanceRef, *, request_id: str = "") -> str:
        """Snapshot the instance's volume; the snapshot id."""

    def snapshots(self, principal: Principal) -> list[str]:
        """The snapshot ids ``principal`` may see (their own)."""

    def restore(self, snapshot_id: str, into: InstanceRef, *, request_id: str = "") -> InstanceRef:
        """Restore a snapshot into ``into`` (refused unless the snapshot is its owner's); the new ref."""

    def snapshot_bytes(self, snapshot_id: str) -> bytes:
        """The snapshot as stored at rest, for the scanners."""

    # -- the tool surface (catalogue TS-1..TS-3) ---------------------------------------------------------

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

    def running(self, principal: Principal) -> bool:
        """Whether any instance of ``principal``'s pair has a running sandbox."""

    # -- the product (issue: product server) ----------------------------------------------------------

    def person(self, principal: Principal) -> ProductClient:
        """A client of the product's people API, signed in as ``principal`` (the human, not the agent)."""

    def operator(self, name: str) -> ProductClient:
        """A client of the product signed in as a support operator."""

    def product_routes(self) -> list[tuple[str, str, str]]:
        """Every route the product server really serves: (method, path template, which credential opens it)."""

    # -- capacity (catalogue CP-1, CP-2) ----------------------------------------------------------------

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

    # -- deliberately broken arrangements: one typed context manager each, torn down on exit ----------

    def broken_shared_volume(self, owner: InstanceRef, intruder: Principal) -> AbstractContextManager[InstanceRef]:
        """The intruder's sandbox gets the owner's volume as its /data (under the owner's uid)."""

    def broken_shared_tmp(self, owner: Principal, intruder: Principal
                          ) -> AbstractContextManager[tuple[InstanceRef, InstanceRef]]:
        """Two sandboxes whose /tmp is the same host folder."""

    def broken_secret_in_env(self, principal: Principal, extra: Mapping[str, str] | None = None
                             ) -> AbstractContextManager[InstanceRef]:
        """A sandbox launched with the platform's secrets (and ``extra``) in its environment."""

    def broken_shared_pid_ns(self, intruder: Principal) -> AbstractContextManager[InstanceRef]:
        """The intruder's sandbox shares the host's pid namespace and /proc."""

    def broken_same_uid(self, owner: InstanceRef, intruder: Principal) -> AbstractContextManager[InstanceRef]:
        """The intruder's sandbox runs under the owner's host uid (its own volume)."""

    def broken_host_account_uid(self, intruder: Principal, account: str = "nobody"
                                ) -> AbstractContextManager[InstanceRef]:
        """The intruder's sandbox runs under an existing host account's uid."""

    def broken_unaudited_operator_route(self) -> AbstractContextManager[str]:
        """A support route that reads records without writing the audit; yields its path template (``{id}``)."""

    def broken_debug_logging(self) -> AbstractContextManager[None]:
        """The platform logs at debug level while it lasts."""

    def broken_open_egress(self, principal: Principal, lab: object, catalog_refresh: float = 0.0
                           ) -> AbstractContextManager[InstanceRef]:
        """A sandbox linked to the lab with a default route and the lab's resolver."""

    def broken_unencrypted_snapshot(self) -> AbstractContextManager[None]:
        """``snapshot``/``restore`` store snapshots compressed but not encrypted while it lasts."""

    def broken_unmetered_model_call(self, principal: Principal, purpose: str = "title") -> AbstractContextManager[None]:
        """One model call for ``principal`` reaches the provider past the platform's meter."""

    def broken_capacity_without_brokers(self) -> AbstractContextManager[None]:
        """The capacity arithmetic budgets no broker per resident instance while it lasts."""

    def broken_lossy_product_link(self, ref: InstanceRef) -> AbstractContextManager[None]:
        """Requests from ``ref``'s broker reach the product, answers are lost."""

    def broken_unreachable_product(self, ref: InstanceRef) -> AbstractContextManager[None]:
        """The product refuses ``ref``'s broker's connections."""

    def close(self) -> None:
        """Tear down everything the target created."""
