"""Find canary-shaped tokens in bytes, streams and file trees, with the standard library only.

This is the probe. It is copied on its own into sandboxes that have nothing but a Python standard
library and run there as ``python3 -I detect.py ROOT...``, so it imports nothing from the rest of
``canaries`` and it holds the one definition of the token shape (``canaries.token`` imports
``RAW_PATTERN`` from here). It is never told which canaries to look for: a probe carrying its
secrets would plant them in its own ``/proc/self/cmdline``. It reports every canary-shaped token
it sees, raw or in standard base64, url-safe base64 or hex, and the host decides whose canary it
was with ``Mint.origin``. It only reads: no file is written, no symlink followed, no fifo opened.
"""

from __future__ import annotations

import argparse
import binascii
import errno
import json
import os
import re
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

PREFIX = b"ppcanary-"

# A token must survive as a DNS label, so nothing canary-shaped is longer than this; every
# window and overlap below is sized from it rather than from today's 48-character shape.
MAX_TOKEN_CHARS = 63

# Case-insensitive because a token that went through DNS may come back in any case; Hit.token is
# lower-cased. The lookahead makes a 17-hex-digit "entropy" a near miss instead of a hit on its
# first 16 digits; it is the narrowest boundary that does so (a token followed by "g" or "." is
# still found).
RAW_PATTERN = re.compile(
    rb"ppcanary-(?P<run>[0-9a-f]{8})-(?P<principal>[0-9a-z]{1,6})-(?P<location>[0-9a-z]{1,6})"
    rb"-(?P<entropy>[0-9a-f]{16})(?![0-9a-f])",
    re.IGNORECASE,
)

# re cannot search fast for a case-insensitive literal, so find() lower-cases the data (ASCII
# only, length-preserving) and runs the same pattern case-sensitively: ten times faster.
_RAW_LOWER = re.compile(RAW_PATTERN.pattern)

DEFAULT_MAX_FILE_BYTES = 8 << 20
DEFAULT_SKIP = ("/proc/kcore", "/sys")
PROC_FILES = ("environ", "cmdline")

_STD_TO_URL = bytes.maketrans(b"+/", b"-_")
_URL_TO_STD = bytes.maketrans(b"-_", b"+/")
# Both alphabets at once: the two differ in two characters only, and a span that uses neither is
# valid in both, so one pass decodes either and the span itself says which it was.
_BASE64_RUN = re.compile(rb"[A-Za-z0-9+/_-]*")
_HEX_RUN = re.compile(rb"[0-9A-Fa-f]*")
_LINE_BREAK = re.compile(rb"[\r\n]")

# Decoding starts up to 2 bytes before the token and needs the byte after it for the lookahead.
_BASE64_WINDOW = 4 * -(-(2 + MAX_TOKEN_CHARS + 1) // 3)
_HEX_WINDOW = 2 * (MAX_TOKEN_CHARS + 1)
# Chunks of a stream are scanned with this much of the previous chunk in front, so any encoded
# token (at most _HEX_WINDOW = 128 characters, 88 in base64 plus line breaks if wrapped) crossing
# a chunk boundary is seen whole in one window.
_OVERLAP = 512
# A base64 hit's offset can sit a few bytes after the group where decoding starts (2, plus line
# breaks when wrapped), so a window keeps that much before the first offset it reports.
_BACKUP = 16
_CHUNK_SIZE = 1 << 20


def _base64_anchors() -> tuple[tuple[bytes, int, int], ...]:
    """(anchor, alignment, lead) for each way ``ppcanary-`` can sit in a base64 stream.

    A prefix starting ``alignment`` bytes into a 3-byte group encodes to characters of which only
    some depend on the prefix alone; those are the anchor. ``lead`` is how many characters the
    anchor starts after its 4-character group, which is where decoding must begin.
    """
    anchors: set[tuple[bytes, int, int]] = set()
    for prefix in (PREFIX, PREFIX.upper()):
        for alignment in range(3):
            encoded = binascii.b2a_base64(bytes(alignment) + prefix + bytes(2), newline=False)
            lead = -(-8 * alignment // 6)
            end = 8 * (alignment + len(prefix)) // 6
            anchor = encoded[lead:end]
            anchors.add((anchor, alignment, lead))
            anchors.add((anchor.translate(_STD_TO_URL), alignment, lead))
    return tuple(sorted(anchors))


_BASE64_ANCHORS = _base64_anchors()
_HEX_ANCHORS = tuple(
    sorted(
        {
            spelled
            for prefix in (PREFIX, PREFIX.upper())
            for spelled in (binascii.hexlify(prefix), binascii.hexlify(prefix).upper())
        }
    )
)


@dataclass(frozen=True)
class Hit:
    """One canary-shaped token seen in scanned data.

    ``token`` is lower-cased; ``encoding`` is ``"raw"``, ``"base64"``, ``"base64url"`` or
    ``"hex"`` (``"base64url"`` only when the decoded run contains ``-`` or ``_``: a run without
    either alphabet's two special characters is valid in both and reported as ``"base64"``);
    ``offset`` is the byte offset in the scanned data of the first character of the
    encoded form (for base64, the first character carrying bits of the token); ``where`` labels
    the data (a path, or a path with `` (name)`` or `` (link target)`` when the token was in a
    file's name or a symlink's target rather than in its content).
    """

    token: str
    encoding: str
    offset: int
    where: str = ""


def find(data: bytes, where: str = "") -> list[Hit]:
    """Every canary-shaped token in ``data``, raw or encoded, ordered by offset.

    A token found twice at the same offset in the same encoding is reported once.
    """
    data = bytes(data)
    found: dict[tuple[str, str, int], Hit] = {}

    def add(token: bytes, encoding: str, offset: int) -> None:
        text = token.decode("ascii").lower()
        found.setdefault((text, encoding, offset), Hit(text, encoding, offset, where))

    for match in _RAW_LOWER.finditer(data.lower()):
        add(match.group(), "raw", match.start())
    for token, encoding, offset in _base64_tokens(data):
        add(token, encoding, offset)
    # `base64` (coreutils) wraps at 76 columns and MIME at 76 too, so a token inside a larger
    # blob is often split by a line break; look again with the breaks taken out.
    if b"\n" in data or b"\r" in data:
        joined = list(_base64_tokens(data.translate(None, b"\r\n")))
        if joined:
            breaks = [match.start() for match in _LINE_BREAK.finditer(data)]
            for token, encoding, offset in joined:
                add(token, encoding, _unjoin(offset, breaks))
    for token, encoding, offset in _hex_tokens(data):
        add(token, encoding, offset)
    return sorted(found.values(), key=lambda hit: (hit.offset, hit.encoding, hit.token))


def _base64_tokens(data: bytes) -> Iterator[tuple[bytes, str, int]]:
    for anchor, alignment, lead in _BASE64_ANCHORS:
        at = data.find(anchor)
        while at != -1:
            if at >= lead:
                decoded = _decode_base64_at(data, at - lead, alignment)
                if decoded is not None:
                    yield decoded
            at = data.find(anchor, at + 1)


def _decode_base64_at(data: bytes, start: int, alignment: int) -> tuple[bytes, str, int] | None:
    run = _BASE64_RUN.match(data, start, start + _BASE64_WINDOW)
    assert run is not None  # a pattern that can match empty always matches
    chars = run.group()
    whole = len(chars) - len(chars) % 4
    tail = chars[whole:]
    # Two or three trailing characters still hold one or two whole bytes; one holds none.
    tail = tail + b"=" * (4 - len(tail)) if len(tail) >= 2 else b""
    try:
        plain = binascii.a2b_base64((chars[:whole] + tail).translate(_URL_TO_STD))
    except binascii.Error:
        return None
    match = RAW_PATTERN.match(plain, alignment)
    if match is None:
        return None
    # A token's own bytes never encode to "+/" or "-_", so only the surrounding run can show
    # which alphabet was used; a run showing neither is valid in both and called "base64".
    encoding = "base64url" if b"-" in chars or b"_" in chars else "base64"
    # For alignments 0..2 the first character carrying token bits is at index `alignment`.
    return match.group(), encoding, start + alignment


def _hex_tokens(data: bytes) -> Iterator[tuple[bytes, str, int]]:
    for anchor in _HEX_ANCHORS:
        at = data.find(anchor)
        while at != -1:
            run = _HEX_RUN.match(data, at, at + _HEX_WINDOW)
            assert run is not None
            digits = run.group()
            match = RAW_PATTERN.match(binascii.unhexlify(digits[: len(digits) // 2 * 2]))
            if match is not None:
                yield match.group(), "hex", at
            at = data.find(anchor, at + 1)


def _unjoin(offset: int, breaks: list[int]) -> int:
    """Map an offset in data with its line breaks removed back to the original data."""
    for position in breaks:
        if position > offset:
            break
        offset += 1
    return offset


class Readable(Protocol):
    """What ``scan_stream`` needs: a blocking binary ``read``."""

    def read(self, size: int = ..., /) -> bytes | None: ...


def scan_stream(stream: Readable, where: str, chunk_size: int = _CHUNK_SIZE) -> list[Hit]:
    """Every canary-shaped token in a binary stream, read ``chunk_size`` bytes at a time.

    Tokens that cross a chunk boundary are found, and reported once; offsets count from the
    stream's position when the scan started.
    """
    hits, _ = _scan_reader(stream.read, where, chunk_size, None)
    return hits


def _scan_reader(read: Callable[[int], bytes | None], where: str, chunk_size: int, limit: int | None) -> tuple[list[Hit], bool]:
    """Scan what ``read`` yields, up to ``limit`` bytes; also say whether the limit cut it short.

    Each window is the carried tail of the previous one plus a new chunk. A window reports only
    hits whose offset lies between the previous window's horizon and its own (its end less
    _OVERLAP, or its end at EOF), so every offset is reported by exactly one window, and only by
    one that holds the whole encoded token.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be at least 1 byte, got {chunk_size}")
    hits: list[Hit] = []
    carry = b""
    base = 0
    reported_to = 0
    total = 0
    truncated = False
    while True:
        if limit is not None and total >= limit:
            # procfs files report size 0, so the only way to know there was more is to try.
            truncated = bool(read(1))
            chunk = b""
        else:
            chunk = read(chunk_size if limit is None else min(chunk_size, limit - total))
            if chunk is None:
                raise ValueError(
                    f"{where or 'stream'}: read() returned None, so the stream is non-blocking; pass a blocking binary stream"
                )
        total += len(chunk)
        at_end = not chunk
        window = carry + chunk
        end = base + len(window)
        horizon = end if at_end else end - _OVERLAP
        if horizon > reported_to:
            for hit in find(window, where):
                offset = base + hit.offset
                if reported_to <= offset < horizon:
                    hits.append(replace(hit, offset=offset))
            reported_to = horizon
        if at_end:
            return hits, truncated
        keep_from = max(reported_to - _BACKUP, base)
        carry = window[keep_from - base :]
        base = keep_from


def scan_tree(
    roots: Iterable[str],
    *,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    skip: Iterable[str] = DEFAULT_SKIP,
) -> tuple[list[Hit], list[str]]:
    """Scan the regular files under ``roots``; return the hits and the ``"path: reason"`` problems.

    Symlinks are never followed (a link's target text is scanned, not what it points to); fifos,
    sockets and devices are never opened; ``/sys`` is never entered; of ``/proc`` only
    ``/proc/<pid>/environ`` and ``/proc/<pid>/cmdline`` are read, whether ``/proc`` is a root or
    is reached from ``/``. File and directory names are scanned too. Anything that could not be
    read, and any file cut short at ``max_file_bytes``, is listed as a problem rather than raised,
    because a probe that stops at the first unreadable file would hide everything after it.
    """
    scan = _scan_tree(roots, max_file_bytes, skip)
    return scan.hits, scan.problems


def _scan_tree(roots: Iterable[str], max_file_bytes: int, skip: Iterable[str]) -> _TreeScan:
    if isinstance(roots, (str, bytes)):
        raise TypeError(f"roots must be a list of paths, not one path: pass [{roots!r}]")
    if max_file_bytes < 1:
        raise ValueError(f"max_file_bytes must be at least 1, got {max_file_bytes}")
    scan = _TreeScan(max_file_bytes, skip)
    for root in roots:
        scan.root(root)
    return scan


class _TreeScan:
    """One ``scan_tree`` call's state: what was found, what could not be read, where it went."""

    def __init__(self, max_file_bytes: int, skip: Iterable[str]) -> None:
        self.max_file_bytes = max_file_bytes
        self.skip = tuple(os.path.abspath(path) for path in skip)
        self.hits: list[Hit] = []
        self.problems: list[str] = []
        self.files = 0
        self.bytes = 0
        self.truncated = 0
        self._proc_done = False
        # Bind mounts can show one directory at two paths, or inside itself.
        self._dirs_seen: set[tuple[int, int]] = set()
        self._proc_dev = _mount_device("/proc")
        self._sys_dev = _mount_device("/sys")

    def root(self, root: str) -> None:
        path = os.path.abspath(root)
        if _within(path, "/sys"):
            self.note(path, "not scanned: /sys is never entered (kernel-made; some reads block)")
        elif path == "/proc":
            self.proc()
        elif _within(path, "/proc"):
            self.proc_path(path)
        elif self.skipped(path):
            self.note(path, "not scanned: it is in the skip list")
        else:
            try:
                info = os.lstat(path)
            except OSError as error:
                self.note(path, _reason(error))
                return
            if stat.S_ISLNK(info.st_mode):
                self.scan_link(path)
                self.note(path, "not scanned: it is a symbolic link and links are not followed")
            elif stat.S_ISDIR(info.st_mode):
                self._dirs_seen.add((info.st_dev, info.st_ino))
                self.walk(path)
            elif stat.S_ISREG(info.st_mode):
                self.read(path)
            else:
                self.note(path, "not scanned: not a regular file or directory")

    def walk(self, top: str) -> None:
        for dirpath, dirnames, filenames in os.walk(top, onerror=self.unlistable):
            # Pruning dirnames in place is how os.walk is told not to descend.
            dirnames[:] = [name for name in sorted(dirnames) if self.enter(os.path.join(dirpath, name), name)]
            for name in sorted(filenames):
                self.entry(os.path.join(dirpath, name), name)

    def enter(self, path: str, name: str) -> bool:
        """Whether the walk should descend into ``path``; scans its name either way."""
        self.scan_name(path, name)
        if self.skipped(path):
            return False
        try:
            info = os.lstat(path)
        except OSError as error:
            self.note(path, _reason(error))
            return False
        if stat.S_ISLNK(info.st_mode):
            self.scan_link(path)
            return False
        if not stat.S_ISDIR(info.st_mode):
            return False
        if path == "/proc" or info.st_dev == self._proc_dev:
            self.proc()
            return False
        if path == "/sys" or info.st_dev == self._sys_dev:
            return False
        key = (info.st_dev, info.st_ino)
        if key in self._dirs_seen:
            return False
        self._dirs_seen.add(key)
        return True

    def entry(self, path: str, name: str) -> None:
        self.scan_name(path, name)
        if self.skipped(path):
            return
        try:
            info = os.lstat(path)
        except OSError as error:
            self.note(path, _reason(error))
            return
        if stat.S_ISLNK(info.st_mode):
            self.scan_link(path)
        elif stat.S_ISREG(info.st_mode):
            self.read(path)
        # Fifos, sockets and devices are left alone: opening a fifo can block forever, and a
        # device's "content" is not something a principal wrote.

    def proc(self) -> None:
        if self._proc_done:
            return
        self._proc_done = True
        try:
            names = os.listdir("/proc")
        except OSError as error:
            self.note("/proc", _reason(error))
            return
        for name in sorted((name for name in names if name.isdigit()), key=int):
            self.process(name)

    def process(self, pid: str) -> None:
        for leaf in PROC_FILES:
            path = f"/proc/{pid}/{leaf}"
            if not self.skipped(path):
                self.read(path)

    def proc_path(self, path: str) -> None:
        parts = path.split("/")[2:]
        if len(parts) == 1 and parts[0].isdigit():
            self.process(parts[0])
        elif len(parts) == 2 and parts[0].isdigit() and parts[1] in PROC_FILES:
            self.read(path)
        else:
            self.note(path, "not scanned: of /proc only /proc/<pid>/environ and cmdline are read")

    def read(self, path: str) -> None:
        try:
            fd = _open_regular(path)
        except OSError as error:
            self.note(path, _reason(error))
            return
        if fd is None:
            self.note(path, "not scanned: it stopped being a regular file before it was opened")
            return
        try:
            with os.fdopen(fd, "rb", buffering=0) as stream:

                def counted(size: int, _read: Callable[[int], bytes] = stream.read) -> bytes:
                    chunk = _read(size)
                    self.bytes += len(chunk or b"")
                    return chunk

                hits, truncated = _scan_reader(counted, path, _CHUNK_SIZE, self.max_file_bytes)
        except OSError as error:
            self.note(path, _reason(error))
            return
        self.files += 1
        self.hits.extend(hits)
        if truncated:
            self.truncated += 1
            self.note(
                path,
                f"only the first {self.max_file_bytes} bytes were scanned (the file is larger than max_file_bytes)",
            )

    def scan_name(self, path: str, name: str) -> None:
        self.hits.extend(find(os.fsencode(name), f"{path} (name)"))

    def scan_link(self, path: str) -> None:
        try:
            target = os.readlink(os.fsencode(path))
        except OSError as error:
            self.note(path, _reason(error))
            return
        self.hits.extend(find(target, f"{path} (link target)"))

    def unlistable(self, error: OSError) -> None:
        self.note(str(error.filename), _reason(error))

    def skipped(self, path: str) -> bool:
        return any(_within(path, top) for top in self.skip)

    def note(self, path: str, reason: str) -> None:
        self.problems.append(f"{path}: {reason}")


def _open_regular(path: str) -> int | None:
    """Open ``path`` for reading if it is a regular file; None if it is not.

    The type is checked on the open descriptor, not by a stat beforehand, so a file swapped for
    a fifo or a symlink between listing and opening is neither blocked on nor followed.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        os.close(fd)
        raise
    if not regular:
        os.close(fd)
        return None
    return fd


def _mount_device(path: str) -> int | None:
    """The device of the filesystem mounted at ``path``; None if nothing is mounted there."""
    try:
        device = os.stat(path).st_dev
        parent = os.stat(os.path.dirname(path) or "/").st_dev
    except OSError:
        return None
    return device if device != parent else None


def _within(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _reason(error: OSError) -> str:
    code = errno.errorcode.get(error.errno or 0, "")
    if isinstance(error, FileNotFoundError):
        text = "vanished before it could be read"
    elif isinstance(error, ProcessLookupError):
        text = "the process exited before it could be read"
    elif isinstance(error, PermissionError):
        text = "permission denied"
    else:
        text = error.strerror or type(error).__name__
    return f"{text} [{code}]" if code else text


def main(argv: Sequence[str] | None = None) -> int:
    """Scan the roots; print one JSON object per hit, then a summary line. Problems go to stderr."""
    parser = argparse.ArgumentParser(
        prog="detect.py",
        description="Report every canary-shaped token under the given roots, one JSON object "
        'per line, then a summary {"scanned_files", "errors", "bytes", "truncated", "problems", "end"}. '
        "Unreadable paths go to stderr too.",
    )
    parser.add_argument("roots", nargs="+", metavar="ROOT", help="a file or directory to scan")
    parser.add_argument(
        "--max-file-bytes",
        type=int,
        default=DEFAULT_MAX_FILE_BYTES,
        help="read at most this many bytes of each file (default: %(default)s)",
    )
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="PATH",
        help="do not enter PATH (repeatable); /sys and /proc/kcore are always skipped",
    )
    args = parser.parse_args(argv)
    if args.max_file_bytes < 1:
        parser.error(f"--max-file-bytes must be at least 1, got {args.max_file_bytes}")
    scan = _scan_tree(args.roots, args.max_file_bytes, (*DEFAULT_SKIP, *args.skip))
    out = sys.stdout
    for hit in scan.hits:
        record = {"token": hit.token, "encoding": hit.encoding, "offset": hit.offset}
        out.write(json.dumps({**record, "where": hit.where}) + "\n")
    for problem in scan.problems:
        sys.stderr.write(problem + "\n")
    out.write(json.dumps(summary(scan)) + "\n")
    out.flush()
    return 0


# The summary line's last key: a reader that does not find it knows the report was cut off.
END_MARK = "pairproof-scan-end"
# How many problems the summary carries verbatim; the count is always exact.
SUMMARY_PROBLEMS = 200


def summary(scan: _TreeScan) -> dict:
    """What the scan read and what it could not: the completeness record a refusal is judged on."""
    return {"scanned_files": scan.files, "errors": len(scan.problems), "bytes": scan.bytes,
            "truncated": scan.truncated, "problems": scan.problems[:SUMMARY_PROBLEMS], "end": END_MARK}


if __name__ == "__main__":
    sys.exit(main())
