"""What a refusal looked at, shown to a reviewer: Allure attachments with the counts a probe compared (records,
pids, bytes), and the few observations several cases share (a replayed capability, a poll with a deadline).

A refusal that found nothing must show that it looked at something; these helpers attach that, and raise a
harness error (broken, never failed) when the looking itself did not happen.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import allure


def attach(name: str, content: object) -> None:
    """Attach ``content`` to the running test's Allure result: text as text, a ``Path`` as the file it names
    (its suffix the extension; nothing when there is no file, e.g. a capture that never started), anything
    else as JSON (indented, keys sorted). The suite's one way to attach: a test-tree lint keeps it single.
    Outside an Allure run (no ``--alluredir``) allure records nothing and this is a no-op."""
    if isinstance(content, Path):
        if content.exists():
            allure.attach.file(str(content), name=name, extension=content.suffix.lstrip(".") or None)
    elif isinstance(content, str):
        allure.attach(content, name=name, attachment_type=allure.attachment_type.TEXT)
    else:
        allure.attach(json.dumps(content, indent=2, sort_keys=True, default=str), name=name,
                      attachment_type=allure.attachment_type.JSON)


def calls_of(target, principal) -> int:
    """How many model requests the provider itself recorded for ``principal`` (its own count, not the proxy's)."""
    user = f"{principal.org}:{principal.user}"
    return sum(r["user"] == user for r in target.provider_records())


@dataclass(frozen=True)
class Replay:
    """A capability presented to the model proxy: what the proxy answered, and how many calls reached the
    provider because of it (the decisive behaviour: a refused capability buys no model call)."""

    status: int
    reason: str
    reached_provider: int

    @property
    def admitted(self) -> bool:
        return self.status == 200 or self.reached_provider > 0


def replay(refused_by_proxy, target, ref, capability: str, body: Mapping[str, object], label: str) -> Replay:
    """Present ``capability`` as a thief would (through ``refused_by_proxy``, which records the proxy's own log
    line as the probe's witness) and count the provider's records of ``ref``'s principal around it."""
    before = calls_of(target, ref.principal)
    status, reason = refused_by_proxy(ref, capability, dict(body))
    result = Replay(status, reason, calls_of(target, ref.principal) - before)
    attach(f"replay: {label}", {"instance": ref.key, "status": status, "reason": reason,
                                "provider calls caused": result.reached_provider,
                                "provider calls of the principal before": before})
    return result
