"""The managed configuration: what the operator pins about every agent, checked before a sandbox starts.

The file (``managed_config.json``, schema ``managed_config.schema.json``) names the agent's models, the
tools each of its two loaders may offer (``toolsets.builtin``: tools the agent implements itself;
``mcp.servers``: tool servers reached through the broker, whose tools the broker cuts down to the pinned
set of ``pinned_tools.json``), the two bridges that would widen that surface (``tool_search``,
``connections``: off), the defaults of the few settings a user may change, and which those are
(``user_settable``). Every other key is pinned, whole subtree: the agent applies a user's setting only
when its exact path is listed, never by merging the user's file over this one leaf by leaf.

The controller refuses to start an instance from a managed configuration that is not exactly the
reviewed one: the bytes must parse as strict JSON (no duplicate keys), satisfy the schema, and hash to
the pinned SHA-256. Changing the file therefore means changing ``PINNED_SHA256`` in the same review.
The agent checks the file again when it starts and refuses to run on one it cannot read.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

from .errors import ConfigError

SHIPPED = Path(__file__).with_name("managed_config.json")
SCHEMA = Path(__file__).with_name("managed_config.schema.json")
PINNED_SHA256 = "ea26dd5a43292fccd7c4155395f72c73b613ec0ab10c510c961c0e7917b7743d"
MAX_BYTES = 64 << 10


class ManagedConfigError(ConfigError):
    """The managed configuration is malformed or not the pinned one; no instance was started from it."""


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    seen: dict[str, object] = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"duplicate key {key!r}")
        seen[key] = value
    return seen


@functools.cache
def _validator():
    """The schema's validator, built once: every provision and every wake checks against it."""
    import jsonschema

    return jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))


def parse(raw: bytes, source: str = "managed config") -> dict:
    """Strict JSON against the schema; the first problem, with where it is, as a ManagedConfigError."""
    import jsonschema

    fix = "deploy the reviewed managed_config.json"
    if len(raw) > MAX_BYTES:
        raise ManagedConfigError(f"{source}: {len(raw)} bytes, more than {MAX_BYTES}: {fix}")
    try:
        config = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except UnicodeDecodeError as exc:
        raise ManagedConfigError(f"{source}: not UTF-8 ({exc.reason} at byte {exc.start}): {fix}") from None
    except ValueError as exc:  # JSONDecodeError included: it carries line and column
        raise ManagedConfigError(f"{source}: not strict JSON ({exc}): {fix}") from None
    validator = _validator()
    error = jsonschema.exceptions.best_match(validator.iter_errors(config))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        raise ManagedConfigError(f"{source}: schema {validator.schema['$id']} refuses {where}: {error.message}: {fix}")
    return config


def check(raw: bytes, *, pinned_sha256: str = PINNED_SHA256, source: str = "managed config") -> dict:
    """The parsed configuration, if ``raw`` is well formed *and* exactly the pinned file."""
    config = parse(raw, source)
    digest = hashlib.sha256(raw).hexdigest()
    if digest != pinned_sha256:
        raise ManagedConfigError(
            f"{source}: unexpected managed config (sha256 {digest}, pinned {pinned_sha256}): it is well formed but "
            "not the reviewed file; deploy the reviewed file, or change the file and its pin in one review"
        )
    return config


def shipped() -> bytes:
    return SHIPPED.read_bytes()
