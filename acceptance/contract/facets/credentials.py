"""The ``credentials`` facet: the credentials the platform holds for an instance, rotated and revoked; with
its check-driver round trip (which, on a driver with the model facet, asks the proxy whether the rotation
is real).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from acceptance.contract.checking import Checker, check
from acceptance.contract.core import InstanceRef


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


def round_trip(c: Checker) -> str:
    """Capabilities are stable until ``rotate`` changes them; with the model facet, the proxy itself refuses
    the old model capability and takes the new one (``revoke`` is irreversible: not exercised)."""
    t, ref = c.target, c.ref
    before = dict(t.capabilities(ref))
    check(before and all(isinstance(v, str) for v in before.values()), f"capabilities: {before!r}")
    check(dict(t.capabilities(ref)) == before, "capabilities gave other values when asked again with nothing "
                                               "rotated: it does not report what the platform holds")
    t.rotate(ref)
    after = dict(t.capabilities(ref))
    check(after != before, "rotate changed none of the capabilities")
    detail = f"capabilities ({', '.join(sorted(before))}), rotate (they changed"
    if "model" in c.claimed and before.get("model") and after.get("model"):
        # The platform, not the driver's word, says whether it rotated: the old model capability is refused.
        call = {"model": "any", "messages": [{"role": "user", "content": "ping"}], "metadata": {"purpose": "turn"}}
        old, new = t.model_call(before["model"], call)[0], t.model_call(after["model"], call)[0]
        check(old != 200 and new == 200, f"after rotate the proxy answers the old model capability {old} and "
                                         f"the new one {new}: the platform did not rotate what it honours")
        detail += "; the proxy refuses the old model capability and takes the new one"
    return detail + "); revoke not exercised (irreversible)"
