"""Host-side scans: the suite's one engine, run on the host over host files and bytes the harness holds.

Issue 14's "one engine, two places": the static probe (``probe.probe_binary()``) scans each sandbox by
descriptor, and here the host's side of the boundary: snapshots and what they leave at rest (whose layers
``canaries.scan.find_at_rest`` opens, at any offset), the platform's log, the lab's pcap, bytes a probe
carried out of a sandbox, and ``pairproof scan``. It runs as a host subprocess on host paths; bytes held in
memory are first written to a private temporary folder (mode 0700, removed after; the probe reads files,
not stdin). With no static probe built, detect.py (the reference) runs the same way; every result names
the engine that produced it, as ``probe.engine_for`` does for sandbox scans.

A host-side scan proves it looked (DESIGN §5 rule 5) in the same call: the engine must end its report,
read every file it was handed, cut nothing short, fail on no path, and find a fresh sentinel in every
encoding it claims (``SENTINELS``: raw, base64 at each alignment, wrapped, url-safe, hex, and for the static
probe also percent, JSON escapes, DNS labels, each compression and archive), planted beside what it scans.
Anything less raises ``ProofError`` (the test is broken, never passed): a blind or crippled engine cannot
make a refusal pass. ``pairproof scan`` is ``scan_paths`` without sentinels; its user reads the record.
"""

from __future__ import annotations

import base64
import binascii
import bz2
import gzip
import io
import json
import lzma
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from acceptance.errors import ProofError
from acceptance.harness import probes as probe
from acceptance.harness.evidence import attach
from canaries import Mint, detect, records
from canaries.detect import Hit
from canaries.scan import AtRest, find_at_rest

# Long enough for a whole-state snapshot through detect.py; a scan still running then is a harness failure.
SCAN_TIMEOUT = 600.0
# The most a scanner's report may write (its stdout and stderr files, each): what it scans is the instances'
# (a file of canary-shaped text is a hit per token), and its report is read into this process's memory. Past
# it the kernel stops the scanner (``prlimit --fsize``: SIGXFSZ) and the scan proves nothing.
SCAN_OUTPUT_MAX = 256 << 20


@dataclass(frozen=True)
class Engine:
    """The scanner a host-side scan runs: its command (roots follow) and the name results carry."""

    command: tuple[str, ...]
    name: str
    static: bool  # the static probe (every encoding, every layer) rather than detect.py


def engine() -> Engine:
    """The static probe when one is built or named by ``PAIRPROOF_PROBE``, else detect.py under this Python.
    ``PAIRPROOF_PROBE`` naming something that is not an executable is a ``ProofError``, never a fallback."""
    binary = probe.probe_binary()
    if binary is not None:
        return Engine((str(binary),), f"static probe {binary}", True)
    return Engine((sys.executable, "-I", str(probe.DETECT)),
                  f"detect.py (no static probe: {probe.PROBE_ENV} unset, nothing at {probe.PROBE_BUILT})", False)


@dataclass(frozen=True)
class Report:
    """One engine run: its hits (``token``, ``encoding``, ``offset``, ``where``) and its completeness record."""

    hits: tuple[dict[str, Any], ...]
    scanned_files: int
    bytes: int
    truncated: int
    errors: int
    problems: tuple[str, ...]
    engine: str

    @property
    def tokens(self) -> set[str]:
        return {hit["token"] for hit in self.hits}

    def summary(self) -> dict[str, Any]:
        """The completeness record as the engine printed it, with the engine named before the end mark."""
        return {"scanned_files": self.scanned_files, "errors": self.errors, "bytes": self.bytes,
                "truncated": self.truncated, "problems": list(self.problems), "engine": self.engine,
                "end": detect.END_MARK}


def scan_paths(paths: Sequence[str], *, skip: Iterable[str] = (), max_file_bytes: int | None = None,
               using: Engine | None = None) -> Report:
    """Run the engine over host ``paths`` and return what it reported, judged by no one (``pairproof scan``
    shows it to its user). An engine that fails or does not finish its report raises ``ProofError``."""
    used = using or engine()
    # No "--" (a scanner need not know it): a path that looks like an option is given as ./path. The run looked
    # for is the one this process uses (detect.use_run: the session's, or pairproof scan's --run).
    command = [*used.command, "--run", detect.run_in_use(), *(a for s in skip for a in ("--skip", s)),
               *(["--max-file-bytes", str(max_file_bytes)] if max_file_bytes else []),
               *(f"./{p}" if p.startswith("-") else p for p in paths)]
    # The report goes to files, not pipes, under a file size limit: bounded on disk, read only once judged small.
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            child = subprocess.run(["prlimit", f"--fsize={SCAN_OUTPUT_MAX}", "--", *command], stdout=out,
                                   stderr=err, timeout=SCAN_TIMEOUT, start_new_session=True)
        except subprocess.TimeoutExpired:
            raise ProofError(f"the scanner ({used.name}) did not finish within {SCAN_TIMEOUT:.0f} s") from None
        except OSError as exc:
            raise ProofError(f"the scanner ({used.name}) could not be started: {exc.strerror}") from None
        sizes = [os.fstat(f.fileno()).st_size for f in (out, err)]
        if child.returncode == -signal.SIGXFSZ or max(sizes) >= SCAN_OUTPUT_MAX:
            raise ProofError(f"the scanner ({used.name}) wrote a report of {SCAN_OUTPUT_MAX} bytes or more and was "
                             "stopped: what it scanned holds more canary-shaped text than a report can carry")
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(child.args, child.returncode, out.read(), err.read())
    try:
        lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    except ValueError:
        lines = []
    if done.returncode != 0 or not lines or not isinstance(lines[-1], dict) or lines[-1].get("end") != detect.END_MARK:
        raise ProofError(f"the scanner ({used.name}) failed (rc {done.returncode}) or did not finish its report: "
                         f"{done.stderr.decode(errors='replace')[-300:]}")
    summary = lines[-1]
    return Report(tuple(lines[:-1]), summary["scanned_files"], summary["bytes"], summary["truncated"],
                  summary["errors"], tuple(summary["problems"]), used.name)


# -- the sentinels: fresh tokens in every encoding the engine claims, scanned in the same call ----------------

@dataclass(frozen=True)
class Sentinel:
    """One fresh token, in the file ``name`` of the sentinel folder, to be found in ``encoding`` at ``where``
    (the file, plus the engine's suffix for a layer it opened)."""

    token: str
    encoding: str
    name: str
    suffix: str = ""


def _tar(name: str, content: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo(name)
        info.size = len(content)
        archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def _zip(name: str, content: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(name, content)
    return buffer.getvalue()


def _zstd(content: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor().compress(content)


# (location, encoding, how the token is written: token bytes -> line of text)
_TEXT_FORMS: tuple[tuple[str, str, Callable[[bytes], bytes]], ...] = (
    ("raw", "raw", lambda t: b"<" + t + b">"),
    ("upper", "raw", lambda t: t.upper()),
    ("b64a0", "base64", lambda t: base64.b64encode(t)),
    ("b64a1", "base64", lambda t: base64.b64encode(b"\x01" + t)),
    ("b64a2", "base64", lambda t: base64.b64encode(b"\x01\x02" + t)),
    ("b64url", "base64url", lambda t: base64.urlsafe_b64encode(t + b"\xfb\xff\xfe")),
    ("b64wr", "base64", lambda t: b"\n".join(base64.b64encode(b"w" * 50 + t)[i:i + 76] for i in range(0, 200, 76))),
    ("hexlo", "hex", lambda t: binascii.hexlify(t)),
    ("hexup", "hex", lambda t: binascii.hexlify(t).upper()),
)
_STATIC_TEXT_FORMS: tuple[tuple[str, str, Callable[[bytes], bytes]], ...] = (
    ("pct", "percent", lambda t: b"".join(b"%%%02X" % c for c in t)),
    ("json", "json-escape", lambda t: b'"' + b"".join(b"\\u%04x" % c for c in t) + b'"'),
    ("dns", "dns-labels", lambda t: t[:20] + b"." + t[20:] + b".lab.example"),
    # issue 26's forms
    ("dns4", "dns-labels", lambda t: b".".join((t[:9], t[9:22], t[22:30], t[30:])) + b".lab.example"),
    ("u16le", "utf-16", lambda t: b"\xff\xfe" + t.decode().encode("utf-16-le")),
    ("u16be", "utf-16", lambda t: t.decode().encode("utf-16-be")),
    ("hexsep", "hex-sep", lambda t: b":".join(b"%02x" % c for c in t)),
    ("hexesc", "hex-sep", lambda t: b"".join(b"\\x%02x" % c for c in t)),
    *((f"b32a{lead}", "base32", lambda t, lead=lead: base64.b32encode(b"\x01" * lead + t)) for lead in range(5)),
    ("html", "html-entity", lambda t: b"".join(b"&#%d;" % c if i % 2 else bytes([c]) for i, c in enumerate(t))),
    ("qp", "quoted-printable", lambda t: b"".join(b"=%02X" % c for c in t)),
    ("b64b64", "base64-base64", lambda t: base64.b64encode(base64.b64encode(t))),
)
# (location, file name, suffix the engine adds to where, how the file holds the raw token)
_STATIC_LAYERS: tuple[tuple[str, str, str, Callable[[bytes], bytes]], ...] = (
    ("gzip", "s.gz", " (gzip)", gzip.compress),
    ("zlib", "s.zz", " (zlib)", zlib.compress),
    ("xz", "s.xz", " (xz)", lzma.compress),
    ("bz2", "s.bz2", " (bz2)", bz2.compress),
    ("zstd", "s.zst", " (zstd)", _zstd),
    # A stored member's bytes are the archive's own (found at the archive's where): a packed one is opened.
    ("tar", "s.tar", " (member m.gz) (gzip)", lambda t: _tar("m.gz", gzip.compress(t))),
    ("zip", "s.zip", " (member m.txt) (gzip)", lambda t: _zip("m.txt", gzip.compress(t))),
)


def plant_sentinels(folder: Path, static: bool) -> list[Sentinel]:
    """Write fresh tokens into ``folder`` in every encoding the engine claims (``static``: the static probe's
    too); return what it must find."""
    mint = Mint(detect.run_in_use())  # the scan's run (a mint of its own: sentinels are nobody's canaries)
    planted: list[Sentinel] = []
    lines: list[bytes] = []
    for location, encoding, form in (*_TEXT_FORMS, *(_STATIC_TEXT_FORMS if static else ())):
        token = mint.mint("probe", location)
        lines.append(form(token.bytes))
        planted.append(Sentinel(token.token, encoding, "s.txt"))
    (folder / "s.txt").write_bytes(b"\n\n".join(lines) + b"\n")
    for location, name, suffix, pack in _STATIC_LAYERS if static else ():
        token = mint.mint("probe", location)
        (folder / name).write_bytes(pack(token.bytes))
        planted.append(Sentinel(token.token, "raw", name, suffix))
    if static:
        planted += _plant_large(folder, mint)
    return planted


LARGE_BYTES = (1 << 20) + (64 << 10)


def _plant_large(folder: Path, mint: Mint) -> list[Sentinel]:
    """A file past the static probe's read chunk (1 MiB) and its mapping threshold: a token cut by the chunk
    boundary, a gzip stream starting at an odd offset inside, and a base64 token near its end, so a scan that
    drops a window, the carry between windows or the carving of a large file is broken, not blind."""
    cross, packed, tail = (mint.mint("probe", f"large{i}") for i in range(3))
    text = bytearray((b"a sentinel file larger than one read chunk\n" * (LARGE_BYTES // 40 + 1))[:LARGE_BYTES])
    at = (1 << 20) - 20
    text[at:at] = b"<" + cross.bytes + b">"
    text[-100:-100] = base64.b64encode(b"\x01\x02" + tail.bytes)  # within the last window's overlap
    start = (1 << 20) + 33_333
    stream = gzip.compress(packed.bytes)
    text[start:start] = b"blob:" + stream + b" end"
    (folder / "large.bin").write_bytes(bytes(text))
    return [Sentinel(cross.token, "raw", "large.bin"), Sentinel(tail.token, "base64", "large.bin"),
            Sentinel(packed.token, "raw", "large.bin", f" (gzip@{start + 5})")]


def _missing_sentinels(report: Report, folder: Path, planted: list[Sentinel]) -> list[str]:
    seen = {(hit["token"], hit["encoding"], hit["where"]) for hit in report.hits}
    return [f"{s.encoding} in {s.name}{s.suffix}" for s in planted
            if (s.token, s.encoding, f"{folder / s.name}{s.suffix}") not in seen]


# -- judged scans -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Judged:
    """A host-side scan that proved it looked: the hits on what was asked (sentinels taken out) and the record."""

    hits: tuple[dict[str, Any], ...]
    report: Report
    sentinels: int
    sentinel_files: int
    sentinel_bytes: int

    @property
    def tokens(self) -> set[str]:
        return {hit["token"] for hit in self.hits}

    def evidence(self, what: str) -> dict[str, Any]:
        """What was read (the sentinels' files and bytes apart), by which engine, and what it could not read."""
        r = self.report
        return {"what": what, "engine": r.engine, "files": r.scanned_files - self.sentinel_files,
                "bytes": r.bytes - self.sentinel_bytes, "truncated": r.truncated, "could_not_read": r.errors,
                "problems": list(r.problems[:20]), "hits": len(self.hits),
                "sentinels_found": f"{self.sentinels} in {self.sentinel_files} files"}


class Workspace:
    """A private temporary folder: ``blobs/`` holds the bytes to scan, one file each, ``sentinels/`` the
    engine's own canaries. Removed on exit."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="pairproof-hostscan-"))  # 0700, owned by us
        self.blobs = self.root / "blobs"
        self.sentinels = self.root / "sentinels"
        self.blobs.mkdir()
        self.sentinels.mkdir()

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _judge(what: str, report: Report, folder: Path, planted: list[Sentinel], expected_files: int) -> None:
    """Raise ProofError unless the run read everything it was handed and found every sentinel."""
    reasons = []
    if report.scanned_files != expected_files:
        reasons.append(f"it read {report.scanned_files} files of the {expected_files} it was handed")
    if report.truncated:
        reasons.append(f"it cut {report.truncated} files or streams short")
    if report.errors:
        reasons.append(f"{report.errors} paths could not be read: {list(report.problems[:5])}")
    missing = _missing_sentinels(report, folder, planted)
    if missing:
        reasons.append(f"it did not find its own sentinel {', '.join(missing)}: it is blind to that encoding")
    if reasons:
        raise ProofError(f"the host-side scan of {what} ({report.engine}) did not prove it looked: " + "; ".join(reasons))


def _keep(judged: Judged, what: str, log: probe.ProbeLog | None) -> None:
    record = judged.evidence(what)
    if log is not None:
        log.note("host scan", **record)
    attach(f"host scan: {what}", record)


def _fail(log: probe.ProbeLog | None, exc: ProofError) -> ProofError:
    return log.fail(str(exc)) if log is not None else exc


def _host_error(what: str, exc: OSError) -> ProofError:
    """An OSError on the host (a path to scan that is gone, a full temporary folder) as the scan's ProofError."""
    where = f" {exc.filename}" if exc.filename else ""
    reason = "does not exist" if isinstance(exc, FileNotFoundError) else (exc.strerror or type(exc).__name__)
    return ProofError(f"the host-side scan of {what} could not be done:{where} {reason}")


class EngineSearch:
    """A ``canaries.scan.LayerSearch`` that hands every layer to the engine in one run: ``add`` writes the
    bytes to a file of the workspace, ``hits`` runs the engine over them and the sentinels, judges the run
    and maps each hit's ``where`` back to the layer's label (the engine's own suffix kept)."""

    def __init__(self, workspace: Workspace, what: str, using: Engine) -> None:
        self.workspace, self.what, self.using = workspace, what, using
        self.labels: list[str] = []
        self.largest = 0
        self.judged: Judged | None = None

    def add(self, data: bytes, where: str) -> None:
        path = self.workspace.blobs / f"{len(self.labels):06d}"  # the engine walks in name order: layer order
        path.write_bytes(data)
        self.labels.append(where)
        self.largest = max(self.largest, len(data))

    def hits(self) -> list[Hit]:
        planted = plant_sentinels(self.workspace.sentinels, self.using.static)
        # Every file is read whole, and a stream the static probe opens inside one may be as large.
        limit = max(detect.DEFAULT_MAX_FILE_BYTES, self.largest + 1)
        report = scan_paths([str(self.workspace.blobs), str(self.workspace.sentinels)], max_file_bytes=limit,
                            using=self.using)
        files, size = _files_in(self.workspace.sentinels)
        _judge(self.what, report, self.workspace.sentinels, planted, len(self.labels) + files)
        found = []
        prefix = f"{self.workspace.blobs}/"
        for hit in report.hits:
            if not hit["where"].startswith(prefix):
                continue  # a sentinel (or a name of the workspace itself, which holds none)
            name, sep, rest = hit["where"][len(prefix):].partition(" ")
            if not name.isdigit() or int(name) >= len(self.labels):
                raise ProofError(f"the scanner ({self.using.name}) reported a hit at {hit['where']!r}, which is "
                                 "no file it was handed")
            found.append({**hit, "where": self.labels[int(name)] + sep + rest})
        self.judged = Judged(tuple(found), report, len(planted), files, size)
        return [Hit(h["token"], h["encoding"], h["offset"], h["where"]) for h in found]


def _files_in(folder: Path) -> tuple[int, int]:
    """How many files ``folder`` holds and their bytes."""
    sizes = [entry.stat().st_size for entry in folder.iterdir() if entry.is_file()]
    return len(sizes), sum(sizes)


def scan_blobs(blobs: Sequence[tuple[str, bytes]], what: str, *, log: probe.ProbeLog | None = None) -> Judged:
    """Every canary-shaped token in bytes the harness holds (``(label, bytes)`` pairs, each hit's ``where``
    is its label), by the engine in one run, judged complete. The evidence names the engine."""
    try:
        using = engine()
        with Workspace() as workspace:
            search = EngineSearch(workspace, what, using)
            for label, data in blobs:
                search.add(bytes(data), label)
            search.hits()
            assert search.judged is not None
            judged = search.judged
    except OSError as exc:
        raise _fail(log, _host_error(what, exc)) from None
    except ProofError as exc:
        raise _fail(log, exc) from None
    _keep(judged, what, log)
    return judged


def tokens_in(data: bytes, what: str = "bytes carried out", *, log: probe.ProbeLog | None = None) -> set[str]:
    """The canary-shaped tokens in ``data`` (``scan_blobs`` of one blob)."""
    return scan_blobs([(what, data)], what, log=log).tokens


# The label of the split sentinels and their views: never a label of what a caller hands in.
JOIN_SENTINEL = "pairproof join sentinel"


class JoiningSearch:
    """A ``canaries.scan.LayerSearch`` that hands the engine (an ``EngineSearch``) what it is given alone and
    joined: each ``add`` also adds the views in which a payload cut across its records is whole again
    (``canaries.records``), all views together within one bound. ``hits`` proves the join sees, in the same
    engine run (its X control): a fresh token cut in every form the views join (``records.split_forms``) goes
    through the same join and must be found joined and in no record alone; that, or a view past the bound, is
    a ``ProofError``. The split sentinels' hits are taken out of what it returns and of ``judged``."""

    def __init__(self, inner: EngineSearch, max_view_bytes: int | None = None) -> None:
        self.inner = inner
        self.room = records.MAX_VIEW_BYTES if max_view_bytes is None else max_view_bytes
        self.records = 0
        self.pieces = 0
        self.view_bytes: dict[str, int] = {}
        self.problems: list[str] = []
        self.sentinels: dict[str, str] = {}
        self.sources: set[str] = set()

    @property
    def judged(self) -> Judged | None:
        return self.inner.judged

    def add(self, data: bytes, where: str) -> None:
        self.inner.add(data, where)
        self.sources.add(where)
        joined = records.join_records(data, where, max_view_bytes=self.room)
        self.records += joined.records
        self.pieces += joined.pieces
        self.problems += joined.problems
        for name, size in joined.view_bytes.items():
            self.view_bytes[name] = self.view_bytes.get(name, 0) + size
            self.room -= size
        for label, view in joined.views:
            self.inner.add(view, label)

    def hits(self) -> list[Hit]:
        what = self.inner.what
        if self.problems:
            raise ProofError(f"the joined scan of {what} could not build every view: {self.problems[0]}")
        mint = Mint(detect.run_in_use())
        for number, form in enumerate(records.split_forms(b"")):
            token = mint.mint("probe", f"split{number}")
            blob = records.split_forms(token.bytes)[form]
            self.sentinels[form] = token.token
            self.inner.add(blob, f"{JOIN_SENTINEL} {form} alone")
            for label, view in records.join_records(blob, f"{JOIN_SENTINEL} {form}").views:
                self.inner.add(view, label)
        found = self.inner.hits()
        seen: dict[str, set[str]] = {}
        for hit in found:
            seen.setdefault(hit.token, set()).add(hit.where)
        blind = [form for form, token in self.sentinels.items()
                 if not any(w.startswith(f"{JOIN_SENTINEL} {form} (joined") for w in seen.get(token, ()))]
        whole = [form for form, token in self.sentinels.items()
                 if any(w.startswith(f"{JOIN_SENTINEL} {form} alone") for w in seen.get(token, ()))]
        if blind or whole:
            raise ProofError(f"the joined scan of {what} did not prove it joins: split sentinel(s) "
                             f"{', '.join(blind) or '-'} not found joined; {', '.join(whole) or '-'} whole in one record")
        # A token whole in what was given is reported there only; a view adds the tokens no record held whole.
        alone = {hit.token for hit in found if not self._joined(hit.where)}
        kept = {(hit.token, hit.where) for hit in found if not hit.where.startswith(JOIN_SENTINEL)
                and (not self._joined(hit.where) or hit.token not in alone)}
        assert self.inner.judged is not None
        judged = self.inner.judged
        self.inner.judged = replace(judged, hits=tuple(h for h in judged.hits if (h["token"], h["where"]) in kept))
        return [hit for hit in found if (hit.token, hit.where) in kept]

    def _joined(self, where: str) -> bool:
        """Whether a hit's ``where`` is in a view (``"<label> (joined <view>)"``, the engine's suffix after it)."""
        source, mark, view = where.rpartition(" (joined ")
        return bool(mark) and source in self.sources and view.split(")", 1)[0] in records.VIEWS

    def record(self) -> dict[str, Any]:
        """The join's completeness record: records and pieces read, bytes per view, what no view joins."""
        return {"records": self.records, "pieces": self.pieces, "views": dict(self.view_bytes),
                "problems": list(self.problems), "not joined": list(records.BLIND),
                "split sentinels found joined": sorted(self.sentinels)}


def _keep_join(search: JoiningSearch, what: str, log: probe.ProbeLog | None) -> None:
    record = search.record()
    if log is not None:
        log.note("joined scan", what=what, **record)
    attach(f"joined scan: {what}", record)


def tokens_in_records(data: bytes, what: str, *, log: probe.ProbeLog | None = None) -> set[str]:
    """The canary-shaped tokens in record-structured bytes (a log, a dump of rows), the records scanned alone and
    joined (``JoiningSearch``), by the engine in one run with its sentinels and the join's split sentinels,
    judged complete. Both completeness records (the engine's, the join's) are attached."""
    try:
        using = engine()
        with Workspace() as workspace:
            search = JoiningSearch(EngineSearch(workspace, what, using))
            search.add(bytes(data), what)
            search.hits()
            assert search.judged is not None
            judged = search.judged
    except OSError as exc:
        raise _fail(log, _host_error(what, exc)) from None
    except ProofError as exc:
        raise _fail(log, exc) from None
    _keep(judged, what, log)
    _keep_join(search, what, log)
    return judged.tokens


def scan_files(paths: Sequence[str | os.PathLike[str]], what: str, *, log: probe.ProbeLog | None = None) -> Judged:
    """Every canary-shaped token in host files (a pcap, a log file), read in place by the engine in one run with
    its sentinels, judged complete: every file read whole, no path failed (the host may read them all)."""
    names = [os.fspath(p) for p in paths]
    try:
        using = engine()
        sizes = []
        for name in names:
            info = os.lstat(name)
            if not os.path.isfile(name) or os.path.islink(name):
                raise ProofError(f"the host-side scan of {what}: {name} is not a regular file")
            sizes.append(info.st_size)
        with Workspace() as workspace:
            planted = plant_sentinels(workspace.sentinels, using.static)
            report = scan_paths([*names, str(workspace.sentinels)], using=using,
                                max_file_bytes=max([detect.DEFAULT_MAX_FILE_BYTES, *(s + 1 for s in sizes)]))
            files, size = _files_in(workspace.sentinels)
            _judge(what, report, workspace.sentinels, planted, len(names) + files)
            inside = f"{workspace.root}/"
            judged = Judged(tuple(h for h in report.hits if not h["where"].startswith(inside)), report, len(planted),
                            files, size)
    except OSError as exc:
        raise _fail(log, _host_error(what, exc)) from None
    except ProofError as exc:
        raise _fail(log, exc) from None
    _keep(judged, what, log)
    return judged


def at_rest(blob: bytes, where: str, *, log: probe.ProbeLog | None = None) -> tuple[AtRest, Judged]:
    """``find_at_rest`` with every layer searched by the engine in one run (``EngineSearch``), alone and with its
    records joined (``JoiningSearch``: a row or a line of a stored file cut in two is still a canary): the
    layers are opened here, at any offset (the probe opens a stream only at a file's start), and the engine
    decodes what it knows within each. Returns the at-rest record and the engine's judged run; the at-rest bounds
    are the caller's to judge (``AtRest.problems``)."""
    try:
        using = engine()
        with Workspace() as workspace:
            search = JoiningSearch(EngineSearch(workspace, f"at rest: {where}", using))
            scan = find_at_rest(blob, where, search=search)
            assert search.judged is not None
            judged = search.judged
    except OSError as exc:
        raise _fail(log, _host_error(f"at rest: {where}", exc)) from None
    except ProofError as exc:
        raise _fail(log, exc) from None
    _keep(judged, f"at rest: {where}", log)
    _keep_join(search, f"at rest: {where}", log)
    return scan, judged


