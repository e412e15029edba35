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

Where each part lives (this module only re-exports them; ``from acceptance.contract import X`` is the way in):

- ``core.py``: the records (``Principal``, ``InstanceRef``, ``Identity``, ``ExecResult``, ``Artifacts``,
  ``ProductClient``), ``LOCATIONS``, ``PROOF_NAMESPACES``, the core ``Target`` and the optional ``ExecBinary``.
- ``facets/<group>.py``: each facet's Protocol with its check-driver round trip beside it (lifecycle,
  credentials, broker, model, snapshots, recovery, tools, product, capacity, logs, startup; ``broken.py``: the
  one-method broken arrangements, the ``Lab`` a driver may use, and their shared round trip).
- ``registry.py``: ``Facet``, ``FACETS``, ``CORE``, ``OPTIONAL_CORE``, ``facets_of``, ``core_missing``.
- ``view.py``: ``TargetView``, ``UndeclaredFacetError``, ``view_violations``.
- ``sandbox.py``: the sandbox rules SBX-1..SBX-6 as checks; ``checking.py``: what the checks share;
  ``conformance.py``: ``pairproof check-driver``'s runner.

The package imports nothing of ``acceptance`` but ``acceptance.errors``, except the runner's two named arrows
(``conformance.py``'s docstring); ``tests/unit/test_contract.py`` holds it to that.
"""

from __future__ import annotations

from acceptance.contract.core import (
    LOCATIONS,
    PROOF_NAMESPACES,
    Artifacts,
    ExecBinary,
    ExecResult,
    Identity,
    InstanceRef,
    Principal,
    ProductClient,
    Target,
)
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
    Lab,
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
from acceptance.contract.facets.startup import Opened, StartTrace, Startup
from acceptance.contract.facets.tools import ToolSurface
from acceptance.contract.registry import CORE, FACET_OF, FACETS, OPTIONAL_CORE, Facet, core_missing, facets_of, members
from acceptance.contract.view import TargetView, UndeclaredFacetError, view_violations

__all__ = [
    # core.py: the records and the core
    "LOCATIONS", "PROOF_NAMESPACES", "Artifacts", "ExecBinary", "ExecResult", "Identity", "InstanceRef", "Principal",
    "ProductClient", "Target",
    # facets/: one Protocol per facet, and the Lab a broken arrangement may use
    "Broker", "Capacity", "Credentials", "Lifecycle", "ModelPath", "PlatformLog", "Product", "Recovery", "Snapshots",
    "Startup", "Opened", "StartTrace", "ToolSurface", "Lab",
    "BrokenCapacityWithoutBrokers", "BrokenDebugLogging", "BrokenHostAccountUid", "BrokenLaxModelCapability",
    "BrokenLossyProductLink", "BrokenNestedUserns", "BrokenOpenEgress", "BrokenSameUid", "BrokenSecretInEnv", "BrokenSharedPidNs",
    "BrokenSharedTmp", "BrokenSharedVolume", "BrokenUnauditedOperatorRoute", "BrokenUnencryptedSnapshot",
    "BrokenUnmeteredModelCall", "BrokenUnreachableProduct", "BrokenWritableRoot", "BrokenNoSeccomp", "BrokenHostDevice",
    "BrokenSharedPropagation", "BrokenHostUtsCgroupNs", "BrokenNoCpuLimit",
    # registry.py
    "CORE", "FACETS", "FACET_OF", "OPTIONAL_CORE", "Facet", "core_missing", "facets_of", "members",
    # view.py
    "TargetView", "UndeclaredFacetError", "view_violations",
]
