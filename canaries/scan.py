"""Host-side scanning: find canary-shaped tokens and say whose canary each one is.

``detect`` finds every token of the run it is told and knows nothing about which canaries exist; a
``Mint`` knows what it planted and nothing about where tokens turn up. This module joins the two on the
host, where the mint lives: every hit is paired with the canary it came from, or with None when
the token was not minted by this mint (a sentinel of another mint of the run, or a mangled one). Deciding whether a
given hit is a leak belongs to the caller, who knows who was allowed to see what.

Stored bytes (a snapshot, a backup, a cache) are opened layer by layer before they are searched
(``find_at_rest``): any common compression or archive, at any offset, recursively within bounds, so
that "no canary at rest" cannot come from a scanner that only knew the one format a store happens to
use. The probe (``detect``) stays standard-library-only and layer-blind; unpacking is host-side.
Each layer is searched by a ``LayerSearch``: ``detect.find`` in this process unless the caller gives
another (the suite hands every layer to its static probe, ``acceptance.harness.hostscan``). The engine here is
detect.py's (the standard library's ``re`` and ``bytes.find``, no Hyperscan: that is the static probe's, which
``pairproof scan`` and the host-side scans run); it decodes every form the probe does (issue 26), and
``scan_bytes`` and ``scan_dir`` carve streams at any offset as the probe does (``detect.carve``).
"""

from __future__ import annotations

import bz2
import hashlib
import io
import lzma
import os
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from canaries.detect import DEFAULT_MAX_FILE_BYTES, Hit, carve, find, looking_for, scan_tree
from canaries.errors import IncompleteScanError
from canaries.token import Canary, Mint

__all__ = ["AtRest", "Attributed", "FindInProcess", "Layer", "LayerSearch", "attribute", "find_at_rest", "scan_at_rest",
           "scan_bytes", "scan_dir"]


@dataclass(frozen=True)
class Attributed:
    """A hit, and the canary it is (None if this run's mint never made that token)."""

    hit: Hit
    canary: Canary | None

    @property
    def foreign(self) -> bool:
        """True when the token is canary-shaped but was not minted by this run."""
        return self.canary is None


def attribute(hits: Iterable[Hit], mint: Mint) -> list[Attributed]:
    """Pair each hit with the canary ``mint`` made with its token, in the order given."""
    return [Attributed(hit, mint.origin(hit.token)) for hit in hits]


def scan_bytes(data: bytes, mint: Mint, where: str = "") -> list[Attributed]:
    """Attributed hits in ``data``, raw or encoded, and inside the compressed streams it holds wherever they
    start (``detect.carve``). Raises ``IncompleteScanError`` if a stream could not be opened or a bound of the
    carving was reached (a zstd frame: detect.py has no decoder; ``find_at_rest`` opens one), keeping the hits."""
    with looking_for(mint.run):  # the mint's run is the one looked for, here only
        carved = carve(data, where)
        found = attribute(find(data, where) + carved.hits, mint)
    if carved.problems:
        raise IncompleteScanError(where or "bytes", tuple(carved.problems), tuple(found))
    return found


def scan_dir(path: str | os.PathLike[str], mint: Mint, *, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> list[Attributed]:
    """Attributed hits in the regular files (and names) under ``path``; symlinks not followed.

    Raises ``IncompleteScanError`` if any file could not be read or was cut short at
    ``max_file_bytes``: an empty result must mean "nothing there", never "could not look". The
    error keeps the hits that were found in ``found``.
    """
    root = os.fspath(path)
    with looking_for(mint.run):  # the mint's run is the one looked for, here only
        hits, problems = scan_tree([root], max_file_bytes=max_file_bytes)
    found = attribute(hits, mint)
    if problems:
        raise IncompleteScanError(root, tuple(problems), tuple(found))
    return found


# -- at rest: stored bytes, opened layer by layer ------------------------------------------------------

# Bounds of one at-rest scan. Reaching one is a *problem* (``AtRest.problems``): the scan could not look at
# everything, so a caller must not read its silence as "clean". Data that is itself damaged (a truncated
# stream, an encrypted zip member) is not a problem of the scan: what could be decoded is scanned, and the
# rest is unreadable to the store's own restore too; it is listed in ``AtRest.partial``.
MAX_DEPTH = 6
MAX_EXPANDED_BYTES = 512 << 20
MAX_LAYERS = 4096
MAX_ATTEMPTS = 50000

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
GZIP_MAGIC = b"\x1f\x8b\x08"
XZ_MAGIC = b"\xfd7zXZ\x00"
LZMA_ALONE_MAGIC = b"\x5d\x00\x00"
BZ2_MAGIC = b"BZh"
BZ2_BLOCK = b"\x31\x41\x59\x26\x53\x59"
ZIP_END = b"PK\x05\x06"
TAR_MAGIC = b"ustar"
TAR_MAGIC_OFFSET = 257
# zlib has no magic, only a header: CMF 0x78 (deflate, 32K window) and an FLG that makes CMF*256+FLG a
# multiple of 31 without a preset dictionary; these four are every such header.
ZLIB_HEADERS = tuple(bytes([0x78, flg]) for flg in range(256) if (0x78 * 256 + flg) % 31 == 0 and not flg & 0x20)


class LayerSearch(Protocol):
    """Where ``find_at_rest`` sends the bytes of each layer it opened (and each member name and link target)
    to be searched, and from which it takes every hit once all are sent. ``where`` labels the bytes; each
    hit must carry it (with the searcher's own suffix if it looked inside, e.g. ``" (gzip)"``)."""

    def add(self, data: bytes, where: str) -> None: ...

    def hits(self) -> list[Hit]: ...


class FindInProcess:
    """The reference ``LayerSearch``: ``detect.find`` on each layer as it comes."""

    def __init__(self) -> None:
        self.found: list[Hit] = []

    def add(self, data: bytes, where: str) -> None:
        self.found.extend(find(data, where))

    def hits(self) -> list[Hit]:
        return list(self.found)


@dataclass(frozen=True)
class Layer:
    """One layer an at-rest scan opened: where it sits (``"snap > zstd@40 > tar@0:./memory.md"``), its size."""

    path: str
    size: int


@dataclass
class AtRest:
    """What one at-rest scan found and read: every hit (``Hit.where`` is its layer's path), every layer it
    opened, the bytes it scanned over all layers, how many candidate offsets it tried a decoder on, the
    limits it hit (``problems``: empty means it looked at everything) and the damaged data it met
    (``partial``)."""

    hits: list[Hit] = field(default_factory=list)
    layers: list[Layer] = field(default_factory=list)
    bytes_scanned: int = 0
    attempts: int = 0
    problems: list[str] = field(default_factory=list)
    partial: list[str] = field(default_factory=list)

    @property
    def tokens(self) -> set[str]:
        return {hit.token for hit in self.hits}

    def summary(self) -> str:
        """One line for a report: layers by kind, bytes, attempts, hits, problems."""
        kinds: dict[str, int] = {}
        for layer in self.layers[1:]:
            kind = layer.path.rsplit(" > ", 1)[-1].split("@", 1)[0].split(":", 1)[0]
            kinds[kind] = kinds.get(kind, 0) + 1
        opened = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "nothing"
        return (f"{len(self.layers)} layer(s) ({opened} opened inside), {self.bytes_scanned} bytes scanned, "
                f"{self.attempts} decoder attempts, {len(self.hits)} hit(s), {len(self.problems)} problem(s), "
                f"{len(self.partial)} damaged")


def find_at_rest(blob: bytes, where: str = "blob", *, max_depth: int = MAX_DEPTH,
                 max_expanded_bytes: int = MAX_EXPANDED_BYTES, search: LayerSearch | None = None) -> AtRest:
    """Every canary-shaped token in stored bytes, through every layer a store might leave readable.

    At every offset of every layer (a frame may sit behind a header of the store's own) it opens
    zstandard, gzip, zlib, xz, legacy lzma and bzip2 streams, and tar and zip archives, and scans each
    layer with ``search`` (default ``detect.find``: raw, base64, base64url, hex), member names and link
    targets included; it goes ``max_depth`` layers deep and decodes at most ``max_expanded_bytes`` in all. A
    candidate offset that does not decode is an attempt, not a layer; a content reached twice is scanned once.
    """
    scan = AtRest()
    searcher = search if search is not None else FindInProcess()
    _Unpacker(scan, max_depth, max_expanded_bytes, searcher).layer(bytes(blob), where, 0)
    scan.hits = searcher.hits()
    return scan


def scan_at_rest(blob: bytes, mint: Mint, where: str = "blob", *, max_depth: int = MAX_DEPTH,
                 max_expanded_bytes: int = MAX_EXPANDED_BYTES) -> list[Attributed]:
    """Attributed hits in stored bytes through every layer (``find_at_rest``); ``IncompleteScanError`` if
    the scan hit one of its limits, keeping what it found."""
    with looking_for(mint.run):  # the mint's run is the one looked for, here only
        scan = find_at_rest(blob, where, max_depth=max_depth, max_expanded_bytes=max_expanded_bytes)
    found = attribute(scan.hits, mint)
    if scan.problems:
        raise IncompleteScanError(where, tuple(scan.problems), tuple(found))
    return found


_Opened = tuple[bytes, bool, bool]  # decoded bytes, cut by the scan's bound, reached the stream's end


class _Unpacker:
    def __init__(self, scan: AtRest, max_depth: int, budget: int, search: LayerSearch) -> None:
        self.scan, self.max_depth, self.budget, self.search = scan, max_depth, budget, search
        self.expanded = 0
        # A member of an archive is also in the archive's own bytes, so one stream can be reached twice:
        # each distinct content is scanned once, which keeps nesting linear instead of doubling per level.
        self.seen: set[bytes] = set()

    def room(self) -> int:
        return max(0, self.budget - self.expanded)

    def layer(self, data: bytes, path: str, depth: int) -> None:
        digest = hashlib.sha256(data).digest()
        if digest in self.seen:
            return
        self.seen.add(digest)
        if len(self.scan.layers) >= MAX_LAYERS:
            self.scan.problems.append(f"{path}: not scanned, more than {MAX_LAYERS} layers")
            return
        self.scan.layers.append(Layer(path, len(data)))
        self.scan.bytes_scanned += len(data)
        self.search.add(data, path)
        if depth >= self.max_depth:
            if _looks_packed(data):
                self.scan.problems.append(f"{path}: looks packed but was not opened, {self.max_depth} layers deep")
            return
        for name, inner in self.children(data, path):
            self.layer(inner, f"{path} > {name}", depth + 1)

    def children(self, data: bytes, path: str) -> Iterator[tuple[str, bytes]]:
        view = memoryview(data)
        streams: list[tuple[str, bytes, Callable[[memoryview], _Opened | None]]] = [
            ("zstd", ZSTD_MAGIC, _zstd), ("gzip", GZIP_MAGIC, lambda d: _zlib(d, 31, self.room())),
            ("xz", XZ_MAGIC, lambda d: _lzma(d, lzma.FORMAT_XZ, self.room())),
            ("lzma", LZMA_ALONE_MAGIC, lambda d: _lzma(d, lzma.FORMAT_ALONE, self.room())),
            ("bz2", BZ2_MAGIC, lambda d: _bz2(d, self.room())),
        ] + [("zlib", header, lambda d: _zlib(d, 15, self.room())) for header in ZLIB_HEADERS]
        for kind, magic, open_at in streams:
            at = data.find(magic)
            while at != -1:
                if not self.attempt(f"{path} > {kind}@{at}"):
                    return
                try:
                    opened = open_at(view[at:]) if kind != "zstd" else _zstd(view[at:], self.room())
                except ImportError as error:
                    self.scan.problems.append(f"{path} > {kind}@{at}: {error}")
                    opened = None
                if opened is not None:
                    inner, cut, finished = opened
                    # zlib has no real magic: a stream that does not reach its end was a false start.
                    if inner and (finished or cut or kind != "zlib"):
                        yield self.took(f"{kind}@{at}", path, inner, cut, finished)
                at = data.find(magic, at + 1)
        yield from self.tars(data, path)
        yield from self.zips(data, path)

    def attempt(self, where: str) -> bool:
        if self.scan.attempts >= MAX_ATTEMPTS:
            self.scan.problems.append(f"{where}: not tried, the scan stopped after {MAX_ATTEMPTS} decoder attempts")
            return False
        self.scan.attempts += 1
        return True

    def took(self, name: str, path: str, inner: bytes, cut: bool, finished: bool) -> tuple[str, bytes]:
        self.expanded += len(inner)
        if cut:
            self.scan.problems.append(f"{path} > {name}: cut at the scan's bound of {self.budget} decoded bytes")
        elif not finished:
            self.scan.partial.append(f"{path} > {name}: ends early or is damaged; its first {len(inner)} bytes were scanned")
        return name, inner

    def tars(self, data: bytes, path: str) -> Iterator[tuple[str, bytes]]:
        at = data.find(TAR_MAGIC, TAR_MAGIC_OFFSET)
        while at != -1:
            start = at - TAR_MAGIC_OFFSET
            if not self.attempt(f"{path} > tar@{start}"):
                return
            try:
                with tarfile.open(fileobj=io.BytesIO(data[start:]), mode="r:") as tar:
                    for member in tar:
                        name = f"tar@{start}:{member.name}"
                        self.names(f"{path} > {name}", member.name, member.linkname)
                        if member.isfile():
                            content = tar.extractfile(member).read(min(member.size, self.room()))  # type: ignore[union-attr]
                            yield self.took(name, path, content, len(content) < member.size, True)
            except (tarfile.TarError, OSError, EOFError) as error:
                self.scan.partial.append(f"{path} > tar@{start}: ends early or is damaged ({error})")
            at = data.find(TAR_MAGIC, at + 1)

    def zips(self, data: bytes, path: str) -> Iterator[tuple[str, bytes]]:
        if ZIP_END not in data or not self.attempt(f"{path} > zip"):
            return
        try:
            archive = zipfile.ZipFile(io.BytesIO(data))
        except (zipfile.BadZipFile, OSError, ValueError):
            return
        with archive:
            for info in archive.infolist():
                name = f"zip:{info.filename}"
                self.names(f"{path} > {name}", info.filename, "")
                if info.is_dir():
                    continue
                if info.flag_bits & 0x1:
                    self.scan.partial.append(f"{path} > {name}: encrypted, its content was not scanned")
                    continue
                try:
                    with archive.open(info) as member:
                        content = member.read(self.room())
                        cut = bool(member.read(1))
                except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError, zlib.error) as error:
                    self.scan.partial.append(f"{path} > {name}: could not be read ({error})")
                    continue
                yield self.took(name, path, content, cut, True)

    def names(self, where: str, name: str, link: str) -> None:
        for text, label in ((name, "member name"), (link, "link target")):
            if text:
                self.search.add(text.encode(errors="surrogateescape"), f"{where} ({label})")


def _zlib(data: memoryview, wbits: int, room: int) -> _Opened | None:
    """A zlib (wbits 15) or gzip (31) stream at the start of ``data``; None if nothing decodes."""
    d = zlib.decompressobj(wbits)
    out = bytearray()
    pending: bytes | memoryview = data
    try:
        while len(out) < room:
            out += d.decompress(pending, room - len(out))
            if d.eof or not d.unconsumed_tail:
                break
            pending = d.unconsumed_tail
    except zlib.error:
        return (bytes(out), False, False) if out else None
    return bytes(out), not d.eof and len(out) >= room, d.eof


def _lzma(data: memoryview, form: int, room: int) -> _Opened | None:
    return _incremental(lzma.LZMADecompressor(form), data, room, (lzma.LZMAError, EOFError))


def _bz2(data: memoryview, room: int) -> _Opened | None:
    if len(data) < 10 or not 0x31 <= data[3] <= 0x39 or bytes(data[4:10]) != BZ2_BLOCK:
        return None
    return _incremental(bz2.BZ2Decompressor(), data, room, (OSError, EOFError, ValueError))


def _incremental(d, data: memoryview, room: int, errors: tuple[type[Exception], ...]) -> _Opened | None:
    """Drive an lzma or bz2 decompressor (``max_length``, ``needs_input``, ``eof``) over ``data``."""
    out = bytearray()
    pending: bytes | memoryview = data
    try:
        while len(out) < room and not d.eof:
            out += d.decompress(pending, room - len(out))
            pending = b""
            if d.needs_input:
                break
    except errors:
        return (bytes(out), False, False) if out else None
    if not out:
        return None
    return bytes(out), not d.eof and len(out) >= room, d.eof


def _zstd(data: memoryview, room: int) -> _Opened | None:
    try:
        import zstandard
    except ImportError:
        raise ImportError("a zstandard frame is here but the zstandard module is not installed, so it was "
                          "not opened: pip install zstandard") from None
    d = zstandard.ZstdDecompressor().decompressobj()
    out = bytearray()
    try:
        for start in range(0, len(data), 1 << 16):
            out += d.decompress(bytes(data[start:start + (1 << 16)]))
            if d.eof or len(out) >= room:
                break
    except zstandard.ZstdError:
        return (bytes(out[:room]), False, False) if out else None
    if not out:
        return None
    return bytes(out[:room]), len(out) > room or (len(out) == room and not d.eof), d.eof


def _looks_packed(data: bytes) -> bool:
    return any(magic in data for magic in (ZSTD_MAGIC, GZIP_MAGIC, XZ_MAGIC, BZ2_MAGIC, ZIP_END, TAR_MAGIC))
