"""Everything at rest on the host: a before/after diff of the writable host filesystems, every file the run
created or changed scanned for canaries (issue 26, sweep 3).

Class: *a canary at rest where the platform wrote and no listed file holds it*. A scan of the files a driver
lists (its log, its snapshot) sees what the driver thought of; a crash dump in the state root's tmp, a staging
copy left in /tmp, a request cache beside the run, a transcript written to /var/tmp on a crash are at rest all
the same. So the harness stamps (inode, size, mtime_ns, ctime_ns) every regular file under the host's writable
roots when the session starts, before the platform writes anything (``take``: the state root, /tmp, /var/tmp,
/var/log with the journal, /run/log/journal, /dev/shm, and the container engine's data root when the target
runs one), and at the point a case judges (``sweep``) stamps them again: every file created or changed since
is read and opened layer by layer (``canaries.scan.find_at_rest``: compression and archives at any offset),
its records also joined (``hostscan.JoiningSearch``), and searched by the suite's engine in one run that finds
its own sentinels in every encoding it claims.

Proof that it looked, in the same sweep: before the second walk it plants a fresh token in each root (the
state folder of the run included: a file where the platform writes), which the sweep must report, in that
file, as created and found; a root it did not reach or a file it could not read is a ProofError, never a pass.

What it leaves out, each listed with why in the completeness record (``Swept.record``): the instances' own
volumes (the private state itself, judged by the FS cases), the harness's own files (its scan workspaces and
lab, pytest's temporary folder, the reports: they hold canaries by design), stores a driver names as holding
private data by design (``Artifacts.stores``), and, in /tmp and /var/tmp, which other processes on the machine
share, every file the run neither created nor changed. Files that vanished between the walk and the read
were not at rest; they are counted. Bounded: at most ``MAX_BYTES`` of created or changed files, past which
the sweep is broken and names the largest; a file past ``MAX_FILE_BYTES`` in a shared root is listed by name
and size, not read (under the state root it breaks the sweep); records are joined in every file up to
``JOIN_MAX`` (in batches, each within the join's own bound, ``_Batches``), larger ones read alone and counted.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acceptance.errors import ProofError
from acceptance.harness import hostscan
from acceptance.harness import probes as probe
from acceptance.harness.evidence import attach
from canaries import Mint, detect
from canaries.detect import Hit
from canaries.scan import find_at_rest

# The host's writable places a platform may leave something at rest, beside its state root.
HOST_ROOTS = ("/tmp", "/var/tmp", "/var/log", "/run/log/journal", "/dev/shm")
MAX_BYTES = 1 << 30  # created or changed bytes a sweep reads; past it the sweep is broken, naming the largest
# A file past this in a shared root (/tmp, /var/tmp: other processes write there too) is listed, not read; under
# the state root it makes the sweep broken (the platform's own file, unread).
MAX_FILE_BYTES = 64 << 20
# Records are joined (a canary cut across lines or rows) in every file up to this size (their views, about eight
# times the file, in batches within the join's bound); larger files are read and opened alone, and counted.
JOIN_MAX = 1 << 20
# Layers opened (compression, archives) over the whole sweep, not per file: a folder of packed files written
# meanwhile (a benchmark corpus) would otherwise cost each file's own bound. Past it: broken, saying so.
EXPAND_BUDGET = 1 << 30
MAX_LAYERS = 20_000  # layers (a file, each stream or member opened in it) over the whole sweep
SENTINEL_PREFIX = ".pairproof-rest-sentinel-"
# The harness's own temporary folders (hostscan's workspaces, the lab, the mutant runner's copies of the suite):
# canaries by design, never the platform's.
HARNESS_PREFIXES = ("pairproof-hostscan-", "pairproof-lab-", "pairproof-mutants-")


@dataclass(frozen=True)
class Stamp:
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int


@dataclass
class Baseline:
    """Every regular file under ``roots`` with its stamp, when the session started."""

    roots: tuple[str, ...]
    files: dict[str, Stamp]
    unreadable: list[str]
    seconds: float
    state_root: str = ""
    not_roots: dict[str, str] = field(default_factory=dict)
    engine_root: str = ""  # the container engine's data root, when the target runs one


def engine_root(target_name: str) -> str:
    """The container engine's data root when the target runs one (``docker info``), else ''."""
    if not target_name.startswith("docker") or shutil.which("docker") is None:
        return ""
    try:
        done = subprocess.run(["docker", "info", "--format", "{{.DockerRootDir}}"], capture_output=True, text=True,
                              timeout=30, start_new_session=True)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def overlay_mounts(under: Iterable[str], walked: Iterable[str]) -> dict[str, str]:
    """The overlay mounts under ``under`` (the container engine's data root: a running container's merged
    root) whose writable layer (``upperdir``) is in a folder the sweep walks (``walked``), each with why it is
    not walked itself: it shows the image's files, unchanged, through a new inode each, and the container's
    writes are that layer. An overlay whose layer is elsewhere (an engine keeping its layers outside the roots)
    is walked like any folder."""
    prefixes = tuple(r.rstrip("/") + "/" for r in under)
    walked_prefixes = tuple(r.rstrip("/") + "/" for r in walked)
    found = {}
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return {}
    for line in lines:
        fields = line.split()
        try:
            dash = fields.index("-")
            fstype, options = fields[dash + 1], fields[dash + 3]
        except (ValueError, IndexError):
            continue
        point = fields[4].encode().decode("unicode_escape")
        upper = next((o[len("upperdir="):] for o in options.split(",") if o.startswith("upperdir=")), "")
        upper = upper.encode().decode("unicode_escape")
        if fstype == "overlay" and point.startswith(prefixes) and upper and (upper + "/").startswith(walked_prefixes):
            found[point] = (f"a container's merged root (overlay): the image's files seen through it, unchanged; the "
                            f"container's own writes are its writable layer {upper}, walked")
    return found


def walk(roots: Iterable[str], excluded: Iterable[str] = ()) -> tuple[dict[str, Stamp], list[str]]:
    """The stamp of every regular file under ``roots`` (symlinks not followed), folders in ``excluded`` not
    entered; and the folders that could not be listed."""
    skip = {os.path.realpath(p) for p in excluded}
    files: dict[str, Stamp] = {}
    unreadable: list[str] = []
    stack = [r for r in roots if os.path.isdir(r)]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except FileNotFoundError:
            continue  # gone meanwhile: nothing at rest there
        except OSError as exc:
            unreadable.append(f"{folder}: {exc.strerror}")
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    if entry.path not in skip and not entry.name.startswith(HARNESS_PREFIXES):
                        stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    info = entry.stat(follow_symlinks=False)
                    files[entry.path] = Stamp(info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
            except FileNotFoundError:
                continue
    return files, unreadable


def take(state_root: str | os.PathLike[str], target_name: str = "reference") -> Baseline:
    """The session's baseline: the state root, the host roots, and the engine's data root when there is one."""
    started = time.monotonic()
    roots = [os.fspath(state_root), *HOST_ROOTS]
    not_roots = {r: "does not exist on this host" for r in roots if not os.path.isdir(r)}
    engine = engine_root(target_name)
    if engine:
        roots.append(engine)
    else:
        not_roots["the container engine's data root"] = f"target {target_name!r} runs no container engine"
    Path(state_root).mkdir(parents=True, exist_ok=True)
    files, unreadable = walk(roots)
    return Baseline(tuple(r for r in roots if os.path.isdir(r)), files, unreadable, time.monotonic() - started,
                    os.fspath(state_root), not_roots, engine)


class _Deferred:
    """A ``LayerSearch`` that hands every layer of a file to the sweep's one search (joined, or the engine's
    alone) and searches nothing itself: the engine runs once, over all of them, when the sweep asks."""

    def __init__(self, inner: hostscan.JoiningSearch | hostscan.EngineSearch) -> None:
        self.inner = inner

    def add(self, data: bytes, where: str) -> None:
        self.inner.add(data, where)

    def hits(self) -> list[Hit]:
        return []


class _Batches:
    """The sweep's searches, in batches: each a workspace and a joined search (``hostscan.JoiningSearch``)
    within the join's bound. When a file's views would not fit, ``flush`` runs the engine over the batch (its
    sentinels proving it looked, as for one run) and a new batch begins, so every file up to ``JOIN_MAX`` is
    joined whatever came before it."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.using = hostscan.engine()
        self.hits: list[Hit] = []
        self.judged_bytes = 0
        self.count = 0
        self._workspace: hostscan.Workspace | None = None
        self._begin()

    def _begin(self) -> None:
        self._workspace = hostscan.Workspace().__enter__()
        self.joining = hostscan.JoiningSearch(hostscan.EngineSearch(self._workspace, self.what, self.using))
        self.deferred, self.alone = _Deferred(self.joining), _Deferred(self.joining.inner)
        self.added = 0

    def flush(self) -> None:
        """Search the batch (if it holds anything), then begin a new one."""
        try:
            if self.joining.inner.labels:
                self.hits += self.joining.hits()
                judged = self.joining.judged
                self.judged_bytes += judged.evidence(self.what)["bytes"] if judged else 0
                self.count += 1
        finally:
            self._close()
        self._begin()

    def _close(self) -> None:
        if self._workspace is not None:
            self._workspace.__exit__(None, None, None)
            self._workspace = None

    def __enter__(self) -> _Batches:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()


@dataclass
class Swept:
    """What a sweep found (token -> the files holding it) and its completeness record."""

    found: dict[str, list[str]]
    record: dict[str, Any]

    def holding(self, tokens: Iterable[str]) -> dict[str, list[str]]:
        return {t: where for t, where in self.found.items() if t in set(tokens)}


def _file_of(where: str, files: Iterable[str]) -> str:
    """The file a hit's ``where`` (its label, then layers and the engine's suffixes) names."""
    return max((f for f in files if where == f or where.startswith((f + " ", f + " >"))), key=len, default=where)


def sweep(baseline: Baseline, *, state_dir: str | os.PathLike[str], excluded: Mapping[str, str],
          stores: Mapping[str, str] = {}, what: str = "everything at rest on the host",
          log: probe.ProbeLog | None = None) -> Swept:
    """Every file created or changed under the baseline's roots (and ``state_dir``) since it was taken,
    ``excluded`` folders and ``stores`` (each with why) aside, read and searched for canaries, with a sentinel
    planted in every root first that must be found. Raises ProofError when it cannot show it looked."""
    started = time.monotonic()
    state_dir = os.fspath(state_dir)
    roots = list(baseline.roots) + ([state_dir] if not any(state_dir.startswith(r + "/") or state_dir == r
                                                            for r in baseline.roots) else [])
    harness = {tempfile.gettempdir() + "/" + p + "*": "the harness's own scan workspaces, lab and mutant copies"
               for p in HARNESS_PREFIXES}
    # (only the engine's: an overlay the platform mounted under its state root or /tmp is walked like any folder)
    overlays = overlay_mounts([baseline.engine_root], roots) if baseline.engine_root else {}
    excluded = {**excluded, **overlays}
    mint = Mint(detect.run_in_use())  # the sweep's scans look for the session's run
    sentinels: dict[str, tuple[str, str]] = {}  # token -> (root, file)
    for number, root in enumerate([*roots, state_dir]):
        token = mint.mint("probe", f"rest{number}").token
        path = os.path.join(root, f"{SENTINEL_PREFIX}{secrets.token_hex(4)}")
        try:
            with open(path, "xb") as handle:  # written by the harness as a platform's stray file would be
                handle.write(b"left at rest: " + token.encode() + b"\n")
        except OSError as exc:
            raise ProofError(f"{what}: could not plant the sentinel in {root} ({exc.strerror}): the sweep "
                             "could not show it looks there") from None
        sentinels[token] = (root, path)
    try:
        after, unreadable = walk(roots, excluded)
        walked = time.monotonic() - started
        created = sorted(p for p in after if p not in baseline.files)
        changed = sorted(p for p in after if p in baseline.files and baseline.files[p] != after[p])
        # A store's sqlite sidecars (-wal, -shm, -journal) are the store too.
        skipped = {p: why for p in (*created, *changed) for store, why in stores.items()
                   if p == store or p.startswith((store.rstrip("/") + "/", store + "-"))}
        candidates = [p for p in (*created, *changed) if p not in skipped]
        too_large = {p: after[p].size for p in candidates if after[p].size > MAX_FILE_BYTES}
        own = [p for p in too_large if p.startswith(state_dir.rstrip("/") + "/")]
        if own:
            raise ProofError(f"{what}: the platform's own {own[:3]} are past the sweep's file bound of {MAX_FILE_BYTES} "
                             "bytes: unread, they cannot be judged")
        # (smallest first: a batch of the join holds as many files as its bound allows)
        to_read = sorted((p for p in candidates if p not in too_large), key=lambda p: (after[p].size, p))
        total = sum(after[p].size for p in to_read)
        if total > MAX_BYTES:
            largest = sorted(to_read, key=lambda p: -after[p].size)[:5]
            raise ProofError(f"{what}: {total} bytes created or changed, past the sweep's bound of {MAX_BYTES}: "
                             f"the largest {[(p, after[p].size) for p in largest]}")
        found: dict[str, list[str]] = {}
        gone: list[str] = []
        problems: list[str] = []
        read_bytes = 0
        not_joined = 0
        expanded = layers = 0
        with _Batches(what) as batches:
            scanned = []
            for path in to_read:
                try:
                    with open(path, "rb") as handle:
                        blob = handle.read(MAX_BYTES + 1)
                except FileNotFoundError:
                    gone.append(path)  # removed between the walk and the read: not at rest
                    continue
                except OSError as exc:
                    unreadable.append(f"{path}: {exc.strerror}")
                    continue
                read_bytes += len(blob)
                scanned.append(path)
                joined = len(blob) <= JOIN_MAX
                if joined and batches.joining.room <= 8 * len(blob):
                    batches.flush()  # the join's bound is full: its files are searched now, a new batch begins
                not_joined += not joined
                room = max(0, EXPAND_BUDGET - expanded)
                scan = find_at_rest(blob, path, search=batches.deferred if joined else batches.alone,
                                    max_expanded_bytes=room)
                expanded += scan.bytes_scanned - len(blob)
                layers += len(scan.layers)
                if layers > MAX_LAYERS:
                    raise ProofError(f"{what}: more than {MAX_LAYERS} layers in the files created or changed (the last "
                                     f"{path}, {len(scan.layers)} of them): past the sweep's bound")
                problems += scan.problems
            batches.flush()
            hits, judged_bytes, join_batches = batches.hits, batches.judged_bytes, batches.count
        for hit in hits:
            found.setdefault(hit.token, [])
            where = _file_of(hit.where, scanned)
            if where not in found[hit.token]:
                found[hit.token].append(where)
    finally:
        for _, path in sentinels.values():
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
    blind = {root: path for token, (root, path) in sentinels.items() if path not in found.get(token, ())}
    record = {
        "roots": roots, "not roots, and why": baseline.not_roots,
        "files before (session start)": len(baseline.files), "files after": len(after),
        "created": len(created), "changed": len(changed), "read": len(scanned), "bytes read": read_bytes,
        "bytes scanned (engine, sentinels apart)": judged_bytes,
        "read alone, not joined (past JOIN_MAX)": not_joined, "join batches (one engine run each)": join_batches,
        "not read: past the file bound, in a shared root": dict(sorted(too_large.items())[:20]),
        "bytes opened inside layers": expanded,
        "gone before read": len(gone), "unreadable": unreadable[:20] + baseline.unreadable[:20],
        "layer bounds hit": problems[:20], "layers": layers,
        "excluded, and why": {**dict(excluded), **harness,
                              "files neither created nor changed since the session started":
                                  "at rest before the platform ran (/tmp and /var/tmp are shared with other processes)"},
        "stores named by the driver, not scanned": {p: why for p, why in skipped.items()},
        "root sentinels found": f"{len(sentinels) - len(blind)} of {len(sentinels)}",
        "seconds: baseline walk": round(baseline.seconds, 2), "seconds: walk": round(walked, 2),
        "seconds: walk and scan": round(time.monotonic() - started, 2),
    }
    for token in sentinels:
        found.pop(token, None)
    if log is not None:
        log.note("host sweep", **{k: v for k, v in record.items() if not isinstance(v, (dict, list))})
    attach(f"host sweep: {what}", record)
    reasons = []
    if blind:
        reasons.append(f"its sentinel in {sorted(blind)} was not found: it did not look there")
    if unreadable or baseline.unreadable:
        reasons.append(f"it could not read {(unreadable + baseline.unreadable)[:5]}")
    if problems:
        reasons.append(f"it hit a layer bound: {problems[:3]}")
    if reasons:
        message = f"{what}: the sweep did not prove it looked: " + "; ".join(reasons)
        raise log.fail(message) if log is not None else ProofError(message)
    if log is not None and sentinels:
        log.looked(f"host sweep: {what}", f"{len(sentinels)} of {len(sentinels)} root sentinels found, "
                                          f"{len(scanned)} files read, none unreadable")
    return Swept(found, record)
