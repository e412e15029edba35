"""A user's own settings, for an agent that reads them from a file: the platform's allowlist is the only way in.

An agent such as hermes-agent reads its user's settings from a file in its home (``$HERMES_HOME/config.yaml``)
and merges its managed layer over it leaf by leaf: whatever the managed layer does not name stays the user's
(another tool server, the tool-search bridge, a filter on the product's tools...). So the platform, not the
agent, decides what of a user's settings applies (``UserSettings``, from the agent's profile): a leaf of the
user's settings is kept only if its exact dotted path is on the allowlist and its value is of the kind listed
there (``text``, ``bool``, ``int``); everything else is refused and named. A key is a plain name (letters,
digits, ``_``, ``-``): a key with a dot in it never stands for a path.

The controller keeps the kept settings, serialized, in the instance's folder (root's) and writes them into
the volume, at the file the agent reads, at every cold start, replacing whatever is there: a file changed on
the volume by anyone else (a restored snapshot, the agent) does not outlive the next start. The write goes
through the volume's folders without following a link (``write_into``), as the instance's uid.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from runtime.errors import ConfigError

VOLUME = PurePosixPath("/data")  # where the volume is inside the sandbox
SYNTAXES = ("json", "yaml")
KINDS = ("text", "bool", "int")
KEY = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
PATH = re.compile(r"^[A-Za-z0-9_-]{1,64}(\.[A-Za-z0-9_-]{1,64}){0,7}$")
MAX_TEXT = 2000
MAX_DEPTH = 8


@dataclass(frozen=True)
class UserSettings:
    """Where an agent reads its user's settings (a file on its volume), in which syntax, and what of them may
    apply: (dotted path, kind) pairs."""

    path: str
    allow: tuple[tuple[str, str], ...]
    syntax: str = "yaml"

    def __post_init__(self) -> None:
        inside = PurePosixPath(self.path)
        if not inside.is_relative_to(VOLUME) or inside == VOLUME or ".." in inside.parts or not self.path.startswith("/"):
            raise ConfigError(f"user settings file {self.path!r} must be a file under {VOLUME}/ (the volume)")
        if self.syntax not in SYNTAXES:
            raise ConfigError(f"user settings syntax {self.syntax!r} is unknown: use one of {', '.join(SYNTAXES)}")
        for path, kind in self.allow:
            if not PATH.match(path):
                raise ConfigError(f"allowed setting {path!r} is not a dotted path of plain names")
            if kind not in KINDS:
                raise ConfigError(f"allowed setting {path!r}: kind {kind!r} is unknown: use one of {', '.join(KINDS)}")
        paths = [p for p, _ in self.allow]
        for path in paths:
            if any(other.startswith(path + ".") for other in paths):
                raise ConfigError(f"allowed setting {path!r} is a leaf and the parent of another: list leaves only")

    def dump(self, kept: dict) -> bytes:
        """The kept settings as the agent reads them (an empty mapping when nothing is kept)."""
        if self.syntax == "json":
            return (json.dumps(kept, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
        import yaml

        return yaml.safe_dump(kept, sort_keys=True, allow_unicode=True, default_flow_style=False).encode()


def _fits(value: object, kind: str) -> bool:
    if kind == "text":
        return isinstance(value, str) and len(value) <= MAX_TEXT and "\x00" not in value
    if kind == "bool":
        return isinstance(value, bool)
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**31


def allowed(settings: object, spec: UserSettings) -> tuple[dict, list[str]]:
    """The settings that apply (a tree of the allowed leaves only) and the paths refused, sorted: any key that
    is not a plain name, any leaf not on the allowlist or not of its kind, a subtree where a leaf is allowed."""
    kinds = dict(spec.allow)
    kept: dict = {}
    refused: list[str] = []

    def keep(path: str, value: object) -> None:
        node = kept
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value

    def walk(node: dict, prefix: str, depth: int) -> None:
        for key, value in node.items():
            if not isinstance(key, str) or not KEY.match(key):
                refused.append(f"{prefix}{key!r}")
                continue
            path = prefix + key
            if path in kinds:
                if _fits(value, kinds[path]):
                    keep(path, value)
                else:
                    refused.append(f"{path} (not {kinds[path]})")
            elif isinstance(value, dict) and value and depth < MAX_DEPTH:
                walk(value, path + ".", depth + 1)
            else:
                refused.append(path)

    if isinstance(settings, dict):
        walk(settings, "", 1)
    else:
        refused.append("(not an object)")
    return kept, sorted(refused)


def write_into(volume: Path, inside: str, data: bytes, uid: int) -> None:
    """Replace the file at ``inside`` (a path under /data) in ``volume`` with ``data``, owned by ``uid``, mode
    0600. The volume is the instance's to change: each folder on the way is opened without following a link
    (and made, the instance's, mode 0700, if missing), the file is written under a new name and renamed over
    the old one, so nothing outside the volume, and no file a link points to, is ever written."""
    parts = PurePosixPath(inside).relative_to(VOLUME).parts
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(volume, flags)
    except OSError as exc:
        raise ConfigError(f"volume {volume}: {exc.strerror}") from exc
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(part, flags, dir_fd=fd)
            except FileNotFoundError:
                os.mkdir(part, 0o700, dir_fd=fd)
                os.chown(part, uid, uid, dir_fd=fd, follow_symlinks=False)
                nxt = os.open(part, flags, dir_fd=fd)
            except OSError as exc:  # a link (ELOOP), a file where a folder should be (ENOTDIR)
                raise ConfigError(f"{inside}: {part!r} on the volume is not a folder ({exc.strerror}): the "
                                  "settings are not written") from exc
            os.close(fd)
            fd = nxt
        tmp = f".{parts[-1]}.pairproof-{secrets.token_hex(6)}"
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
        try:
            os.fchown(out, uid, uid)
            os.write(out, data)
            os.fsync(out)
        finally:
            os.close(out)
        try:
            os.rename(tmp, parts[-1], src_dir_fd=fd, dst_dir_fd=fd)
        except OSError as exc:
            os.unlink(tmp, dir_fd=fd)
            raise ConfigError(f"{inside} on the volume cannot be replaced ({exc.strerror}): the settings are not "
                              "written") from exc
    finally:
        os.close(fd)
