"""The managed configuration: what the operator pins about every agent, checked before a sandbox starts.

Each agent has its own managed file in its own language (``ManagedFormat``): the file the operator reviewed,
its syntax (strict JSON, or YAML read with a real parser), the JSON Schema of the keys the platform decides,
the SHA-256 it is pinned to, and where in the sandbox the agent reads it (read-only). ``REFERENCE`` is the
runtime's own agent's; an agent profile gives another (hermes-agent reads a YAML layer from its managed
directory). Whatever the format, the controller refuses to start an instance from a managed file that is not
exactly the reviewed one: the bytes must parse strictly (UTF-8, no duplicate keys; in YAML no aliases, merge
keys or values JSON has no word for), satisfy the schema, and hash to the pin. It checks when it provisions
the instance and again at every cold start. Changing the file therefore means changing its pin in the same
review. An agent that ignores a managed file it cannot read (hermes starts anyway, with a warning) never
gets the chance.

The reference agent's file (``managed_config.json``, schema ``managed_config.schema.json``) names its
models, the tools each of its two loaders may offer (``toolsets.builtin``: tools the agent implements
itself; ``mcp.servers``: tool servers reached through the broker, whose tools the broker cuts down to the
pinned set of ``pinned_tools.json``), the two bridges that would widen that surface (``tool_search``,
``connections``: off), the defaults of the few settings a user may change, and which those are
(``user_settable``). Every other key is pinned, whole subtree: the agent applies a user's setting only
when its exact path is listed, never by merging the user's file over this one leaf by leaf. The agent
checks the file again when it starts and refuses to run on one it cannot read.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from runtime.errors import ConfigError

SHIPPED = Path(__file__).with_name("managed_config.json")
SCHEMA = Path(__file__).with_name("managed_config.schema.json")
PINNED_SHA256 = "ea26dd5a43292fccd7c4155395f72c73b613ec0ab10c510c961c0e7917b7743d"
MAX_BYTES = 64 << 10
SYNTAXES = ("json", "yaml")
SHA256 = re.compile(r"^[0-9a-f]{64}$")


class ManagedConfigError(ConfigError):
    """The managed configuration is malformed or not the pinned one; no instance was started from it."""


@dataclass(frozen=True)
class ManagedFormat:
    """One agent's managed file as the platform checks and deploys it."""

    shipped: Path  # the reviewed file
    schema: Path  # the JSON Schema (a JSON file) of the keys the platform decides
    pinned_sha256: str
    syntax: str = "json"  # "json" (strict) or "yaml"
    inside: str = "/etc/pairproof/managed.json"  # where the agent reads it in the sandbox, read-only

    def __post_init__(self) -> None:
        if self.syntax not in SYNTAXES:
            raise ConfigError(f"managed file syntax {self.syntax!r} is unknown: use one of {', '.join(SYNTAXES)}")
        if not SHA256.match(self.pinned_sha256):
            raise ConfigError(f"managed file pin {self.pinned_sha256!r} is not a SHA-256 (64 lowercase hex digits)")
        parts = PurePosixPath(self.inside).parts
        # A file of its own folder under /etc: never one of the files the sandbox binds from the host or makes.
        if len(parts) != 4 or parts[:2] != ("/", "etc") or ".." in parts or parts[2] in ("passwd", "group"):
            raise ConfigError(f"managed file path {self.inside!r} must be /etc/<folder>/<file> inside the sandbox")
        for what, path in (("file", self.shipped), ("schema", self.schema)):
            if not Path(path).is_file():
                raise ConfigError(f"managed {what} {path} does not exist")

    @property
    def stored_name(self) -> str:
        """The name the controller keeps an instance's copy under, in the instance's folder."""
        return f"managed.{self.syntax}"

    def read(self) -> bytes:
        return Path(self.shipped).read_bytes()


REFERENCE = ManagedFormat(SHIPPED, SCHEMA, PINNED_SHA256)


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    seen: dict[str, object] = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"duplicate key {key!r}")
        seen[key] = value
    return seen


@functools.cache
def _validator(schema: Path = SCHEMA):
    """The schema's validator, built once per schema: every provision and every wake checks against it."""
    import jsonschema

    document = json.loads(Path(schema).read_text())
    jsonschema.Draft202012Validator.check_schema(document)
    return jsonschema.Draft202012Validator(document)


@functools.cache
def _strict_yaml_loader():
    """PyYAML's safe loader, stricter: a duplicate key, a merge key (``<<``), an alias (``*name``) or a key
    that is not a string is an error. Two readers of one file may keep different copies of a duplicate key
    (hermes keeps the last), and an alias or a merge key makes one text mean a larger tree: refuse them all."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise yaml.composer.ComposerError(None, None, f"found an alias (*{event.anchor}): aliases are refused",
                                                  event.start_mark)
            return super().compose_node(parent, index)

        def construct_mapping(self, node, deep=False):
            seen = set()
            if isinstance(node, yaml.MappingNode):
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        raise yaml.constructor.ConstructorError(None, None, "merge keys (<<) are refused",
                                                                key_node.start_mark)
                    key = self.construct_object(key_node, deep=True)
                    if not isinstance(key, str):
                        raise yaml.constructor.ConstructorError(None, None, f"key {key!r} is not a string",
                                                                key_node.start_mark)
                    if key in seen:
                        raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}",
                                                                key_node.start_mark)
                    seen.add(key)
            return super().construct_mapping(node, deep)

    return StrictLoader


def load_yaml(text: str) -> object:
    """One YAML document, read strictly (``_strict_yaml_loader``); ValueError naming the problem and where."""
    import yaml

    try:
        return yaml.load(text, Loader=_strict_yaml_loader())
    except yaml.YAMLError as exc:
        raise ValueError(" ".join(str(exc).split())) from None


def _as_json(value: object) -> object:
    """``value`` if JSON has a word for every part of it (a YAML date, set, binary or NaN has none)."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"a value JSON has no word for ({exc})") from None
    return value


def parse(raw: bytes, source: str = "managed config", form: ManagedFormat = REFERENCE) -> dict:
    """Strict JSON or YAML (``form.syntax``) against ``form``'s schema; the first problem, with where it is, as
    a ManagedConfigError."""
    import jsonschema

    fix = f"deploy the reviewed {Path(form.shipped).name}"
    if len(raw) > MAX_BYTES:
        raise ManagedConfigError(f"{source}: {len(raw)} bytes, more than {MAX_BYTES}: {fix}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManagedConfigError(f"{source}: not UTF-8 ({exc.reason} at byte {exc.start}): {fix}") from None
    if form.syntax == "json":
        try:
            config = json.loads(text, object_pairs_hook=_no_duplicates)
        except ValueError as exc:  # JSONDecodeError included: it carries line and column
            raise ManagedConfigError(f"{source}: not strict JSON ({exc}): {fix}") from None
    else:
        try:
            config = _as_json(load_yaml(text))
        except ValueError as exc:
            raise ManagedConfigError(f"{source}: not strict YAML ({exc}): {fix}") from None
        if not isinstance(config, dict):
            found = "an empty document" if config is None else f"a {type(config).__name__}"
            raise ManagedConfigError(f"{source}: not strict YAML (a mapping is required at the top level, not "
                                     f"{found}): {fix}")
    validator = _validator(Path(form.schema))
    error = jsonschema.exceptions.best_match(validator.iter_errors(config))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        raise ManagedConfigError(f"{source}: schema {validator.schema['$id']} refuses {where}: {error.message}: {fix}")
    return config


def check(raw: bytes, form: ManagedFormat = REFERENCE, *, pinned_sha256: str | None = None,
          source: str = "managed config") -> dict:
    """The parsed configuration, if ``raw`` is well formed *and* exactly the pinned file (``form``'s pin, unless
    another is given)."""
    config = parse(raw, source, form)
    if pinned_sha256 is None:
        pinned_sha256 = form.pinned_sha256
    digest = hashlib.sha256(raw).hexdigest()
    if digest != pinned_sha256:
        raise ManagedConfigError(
            f"{source}: unexpected managed config (sha256 {digest}, pinned {pinned_sha256}): it is well formed but "
            "not the reviewed file; deploy the reviewed file, or change the file and its pin in one review"
        )
    return config


def shipped() -> bytes:
    return SHIPPED.read_bytes()
