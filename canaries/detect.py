"""Find canary-shaped tokens in bytes, streams and file trees, with the standard library only.

This is the probe. It is copied on its own into sandboxes that have nothing but a Python standard
library and run there as ``python3 -I detect.py --run RUN ROOT...``, so it imports nothing from the rest
of ``canaries`` and it holds the one definition of the token shape (``token_pattern``; ``canaries.token``
mints by it). It is told the run it looks for, never which canaries: a probe carrying its secrets would
plant them in its own ``/proc/self/cmdline``; the run id alone is no token. It reports every token of the
run it sees, raw or in standard base64, url-safe base64 or hex, and (issue 26) percent, JSON \\u, HTML and
quoted-printable escapes, UTF-16, hex with separators, base32, base64 of base64, DNS labels, and inside
gzip, zlib, xz and bz2 streams wherever they start (``carve``; a zstd frame is said, not opened); the host
decides whose canary it was with ``Mint.origin``. It only reads: no file is written, no symlink followed,
no fifo opened. probe/ppscan.c decodes the same forms byte for byte (probe/README.md).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import bisect
import contextlib
import errno
import json
import os
import re
import stat
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

# A token must survive as a DNS label, so nothing canary-shaped is longer than this; every
# window and overlap below is sized from it rather than from today's 36-character shape.
MAX_TOKEN_CHARS = 63

# A run id: 8 lowercase hex digits. A run's tokens look like version-4 UUIDs whose first group is the run id,
# ``<run>-xxxx-4xxx-yxxx-xxxxxxxxxxxx``: ids of the kind any user's data is full of (an order, a key, a
# session), nothing that names pairproof. The run id is the anchor every form is found by, so a scan is told
# the run it looks for (``use_run``; the probe's ``--run``) and finds that run's tokens only.
RUN_ID = re.compile(r"[0-9a-f]{8}")
PREFIX_CHARS = 9  # the run id and its dash: what every anchor below is made of

# The part after the run id. Case-insensitive because a token that went through DNS may come back in any
# case; Hit.token is lower-cased. The lookahead makes a 13-hex-digit last group a near miss instead of a
# hit on its first 12 digits; it is the narrowest boundary that does so (a token followed by "g" or "."
# is still found). The scanner accepts any hex in the version and variant digits: it looks for what
# was minted, and anything of the shape is reported (the host decides whose it is).
_TAIL = rb"-(?P<rest>[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
_LOOKAHEAD = rb"(?![0-9a-f])"


def token_pattern(run: str) -> re.Pattern[bytes]:
    """The pattern of run ``run``'s tokens (case-insensitive; ``run`` is the group of that name)."""
    _check_run(run)
    return re.compile(rb"(?P<run>" + run.encode() + rb")" + _TAIL + _LOOKAHEAD, re.IGNORECASE)


def _check_run(run: str) -> None:
    if not (isinstance(run, str) and RUN_ID.fullmatch(run)):
        raise ValueError(f"run id {run!r} is not 8 lowercase hex characters (for example 'a3f09c1e'): "
                         "give the run whose canaries are looked for")

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


def _base64_anchors(PREFIX: bytes) -> tuple[tuple[bytes, int, int], ...]:  # noqa: N803
    """(anchor, alignment, lead) for each way the prefix (``<run>-``) can sit in a base64 stream.

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


def _hex_anchors(PREFIX: bytes) -> tuple[bytes, ...]:  # noqa: N803
    return tuple(sorted({spelled for prefix in (PREFIX, PREFIX.upper())
                         for spelled in (binascii.hexlify(prefix), binascii.hexlify(prefix).upper())}))


def walk_tree(top: str, onerror=None):
    """``os.walk(top)`` (top-down, links not followed, ``dirnames`` pruned in place to skip a folder) without its
    recursion: Python 3.11's dies of RecursionError below about a thousand nested folders, and what is walked
    (a sandbox's files, an instance's volume) nests as deep as its owner likes."""
    stack = [top]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as entries:
                listed = list(entries)
        except OSError as error:
            if onerror is not None:
                onerror(error)
            continue
        dirnames, filenames = [], []
        for entry in listed:
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            (dirnames if is_dir else filenames).append(entry.name)
        yield folder, dirnames, filenames
        stack.extend(os.path.join(folder, name) for name in reversed(dirnames))


@dataclass(frozen=True)
class Hit:
    """One canary-shaped token seen in scanned data.

    ``token`` is lower-cased; ``encoding`` is ``"raw"``, ``"base64"``, ``"base64url"``, ``"hex"``
    or one of issue 26's forms (``"percent"``, ``"json-escape"``, ``"html-entity"``, ``"quoted-printable"``,
    ``"utf-16"``, ``"hex-sep"``, ``"base32"``, ``"base64-base64"``, ``"dns-labels"``). ``"base64url"`` only
    when the decoded run contains ``-`` or ``_``: a run without either alphabet's two special characters is
    valid in both and reported as ``"base64"``;
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
    t = _tables()
    data = bytes(data)
    found: dict[tuple[str, str, int], Hit] = {}

    def add(token: bytes, encoding: str, offset: int) -> None:
        text = token.decode("ascii").lower()
        found.setdefault((text, encoding, offset), Hit(text, encoding, offset, where))

    lowered = data.lower()
    for match in t.raw_lower.finditer(lowered):
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
    for token, encoding, offset in _more_tokens(data, lowered):
        add(token, encoding, offset)
    return sorted(found.values(), key=lambda hit: (hit.offset, hit.encoding, hit.token))


def _base64_tokens(data: bytes) -> Iterator[tuple[bytes, str, int]]:
    t = _tables()
    for anchor, alignment, lead in t.base64_anchors:
        at = data.find(anchor)
        while at != -1:
            if at >= lead:
                decoded = _decode_base64_at(data, at - lead, alignment)
                if decoded is not None:
                    yield decoded
            at = data.find(anchor, at + 1)


def _decode_base64_at(data: bytes, start: int, alignment: int) -> tuple[bytes, str, int] | None:
    t = _tables()
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
    match = t.raw.match(plain, alignment)
    if match is None:
        return None
    # A token's own bytes never encode to "+/" or "-_", so only the surrounding run can show
    # which alphabet was used; a run showing neither is valid in both and called "base64".
    encoding = "base64url" if b"-" in chars or b"_" in chars else "base64"
    # For alignments 0..2 the first character carrying token bits is at index `alignment`.
    return match.group(), encoding, start + alignment


def _hex_tokens(data: bytes) -> Iterator[tuple[bytes, str, int]]:
    t = _tables()
    for anchor in t.hex_anchors:
        at = data.find(anchor)
        while at != -1:
            run = _HEX_RUN.match(data, at, at + _HEX_WINDOW)
            assert run is not None
            digits = run.group()
            match = t.raw.match(binascii.unhexlify(digits[: len(digits) // 2 * 2]))
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


# -- the other forms a token takes where leaks really sit (issue 26) ----------------------------------------
#
# Each is found by a cheap prefilter (the encoded prefix, or an escape character) and decoded only
# around its candidates. probe/ppscan.c decodes the same forms with the same rules (offsets included):
# tests/vectors/forms.bin holds both to it.

# UTF-16 (either byte order) of the lower-cased prefix: a big-endian token is the same bytes one
# byte earlier, so one anchor finds both; the offset is that of the token's first byte.
_WIDE_CHARS = MAX_TOKEN_CHARS + 1

# Hex with a separator or a per-byte prefix, searched on the lower-cased data, anchored on the prefix's first
# three bytes (for run 3f9a...: `33:66:39`, `33-66-39`, `33 66 39`, `33,66,39`, `33, 66, 39`, `\x33\x66\x39`,
# `0x33 0x66 0x39`, any of those separators or none between 0x bytes), for a lower-case or an upper-case prefix.
_HEX_SEPARATORS = (b":", b"-", b" ", b",", b", ")


def _hex_sep_anchors(PREFIX: bytes) -> tuple[bytes, ...]:  # noqa: N803
    anchors: set[bytes] = set()
    for prefix in (PREFIX, PREFIX.upper()):
        a, b, c = (b"%02x" % byte for byte in prefix[:3])
        for sep in _HEX_SEPARATORS:
            anchors.add(a + sep + b + sep + c)
        anchors.add(b"\\x" + a + b"\\x" + b + b"\\x" + c)
        for sep in (b"", *_HEX_SEPARATORS):
            anchors.add(b"0x" + a + sep + b"0x" + b + sep + b"0x" + c)
    return tuple(sorted(anchors))


def _hex_sep_by_pair(PREFIX: bytes, anchors: tuple[bytes, ...]) -> tuple[tuple[bytes, tuple[tuple[bytes, int], ...]], ...]:  # noqa: N803
    """The anchors searched by the hex of the prefix's first byte (a separator or a space in the needle keeps
    bytes.find from skipping ahead, which made the 22 searches cost twice the rest of find): (pair, ((anchor,
    where the pair first sits), ...)); an anchor holding both pairs is found twice, and reported once."""
    pairs = sorted({b"%02x" % prefix[0] for prefix in (PREFIX, PREFIX.upper())})
    return tuple((pair, tuple((anchor, anchor.index(pair)) for anchor in anchors if pair in anchor)) for pair in pairs)
_HEX_DIGITS = frozenset(b"0123456789abcdef")

# Base32 (RFC 4648, either case: it is case-blind) at each of the five alignments in a 5-byte group,
# like the base64 anchors: (anchor, alignment, lead), searched on the lower-cased data.
_B32_ALPHABET = b"abcdefghijklmnopqrstuvwxyz234567"
_B32_VALUE = {c: i for i, c in enumerate(_B32_ALPHABET)}
_BASE32_RUN = re.compile(rb"[a-z2-7]*")
_BASE32_WINDOW = 8 * -(-(4 + MAX_TOKEN_CHARS + 1) // 5)


def _base32_anchors(PREFIX: bytes) -> tuple[tuple[bytes, int, int], ...]:  # noqa: N803
    anchors = set()
    for prefix in (PREFIX, PREFIX.upper()):
        for alignment in range(5):
            encoded = base64.b32encode(bytes(alignment) + prefix + bytes(4)).lower()
            lead = -(-8 * alignment // 5)
            end = 8 * (alignment + len(prefix)) // 5
            anchors.add((encoded[lead:end], alignment, lead))
    return tuple(sorted(anchors))



# Escapes decoded in place: percent-encoding, JSON \\u00XX (ASCII only), HTML character references
# (decimal and hex; no named reference stands for a character a token can hold, see
# tests/unit/test_forms.py, so named ones are left as they are) and quoted-printable (=XX, and the soft
# line break `=` CRLF or LF, which stands for nothing). A hit needs an escape inside the token; its
# encoding is that of the token's first escaped character (a soft break marks the character after it).
_ESCAPE = re.compile(
    rb"%(?P<pct>[0-9a-f]{2})|\\u00(?P<json>[0-7][0-9a-f])|&#(?P<dec>[0-9]{1,7});|&#x(?P<hx>[0-9a-f]{1,6});"
    rb"|=(?P<qp>[0-9a-f]{2})|=(?P<soft>\r?\n)",
    re.IGNORECASE,
)
_ESCAPE_NAMES = {"pct": "percent", "json": "json-escape", "dec": "html-entity", "hx": "html-entity",
                 "qp": "quoted-printable", "soft": "quoted-printable"}


# Base64 of base64: the base64 anchors, themselves base64-encoded at each alignment.
_NESTED_WINDOW = 4 * -(-(3 + _BASE64_WINDOW + 3 + 2) // 3) + 4


def _nested_base64_anchors(base64_anchors: tuple[tuple[bytes, int, int], ...]) -> tuple[tuple[bytes, int, int, int, int], ...]:
    """(outer anchor, outer alignment, outer lead, inner alignment, inner lead) for base64 of base64."""
    anchors = set()
    for inner, inner_alignment, inner_lead in base64_anchors:
        for alignment in range(3):
            encoded = binascii.b2a_base64(bytes(alignment) + inner + bytes(2), newline=False)
            lead = -(-8 * alignment // 6)
            end = 8 * (alignment + len(inner)) // 6
            anchors.add((encoded[lead:end], alignment, lead, inner_alignment, inner_lead))
    return tuple(sorted(anchors))


class _Tables:
    """What finding one run's tokens needs: its patterns and every anchor, built from its prefix once."""

    def __init__(self, run: str) -> None:
        self.run = run
        self.prefix = prefix = run.encode() + b"-"
        self.raw = token_pattern(run)
        # re cannot search fast for a case-insensitive literal, so find() lower-cases the data (ASCII only,
        # length-preserving) and runs the same pattern case-sensitively: ten times faster.
        self.raw_lower = re.compile(self.raw.pattern)
        # A token cut into DNS labels (the dots anywhere in it, the prefix too) and the other forms whose
        # end is judged by hand.
        self.raw_no_lookahead = re.compile(self.raw.pattern[: -len(_LOOKAHEAD)])
        self.base64_anchors = _base64_anchors(prefix)
        self.hex_anchors = _hex_anchors(prefix)
        self.utf16_anchor = b"\0".join(bytes([c]) for c in prefix)
        self.hex_sep_anchors = _hex_sep_anchors(prefix)
        self.hex_sep_by_pair = _hex_sep_by_pair(prefix, self.hex_sep_anchors)
        self.base32_anchors = _base32_anchors(prefix)
        self.nested_anchors = _nested_base64_anchors(self.base64_anchors)


_BUILT: dict[str, _Tables] = {}
_T: _Tables | None = None


def use_run(run: str) -> None:
    """Look for run ``run``'s tokens from now on (every ``find``, ``scan_*`` and ``carve`` of this process)."""
    global _T
    _check_run(run)
    if run not in _BUILT:
        _BUILT[run] = _Tables(run)
    _T = _BUILT[run]


@contextlib.contextmanager
def looking_for(run: str) -> Iterator[None]:
    """Look for run ``run``'s tokens inside the block, and for what was looked for before after it (a scan for a
    mint's canaries must not retarget every later scan of the process)."""
    global _T
    before = _T
    use_run(run)
    try:
        yield
    finally:
        _T = before


def run_in_use() -> str:
    """The run whose tokens this process looks for; RuntimeError naming the fix before ``use_run``."""
    return _tables().run


def _tables() -> _Tables:
    if _T is None:
        raise RuntimeError("no run to look for: call canaries.detect.use_run(RUN) first (the probe: --run RUN); "
                           "a scan finds one run's tokens, anchored on its id")
    return _T


def _more_tokens(data: bytes, lowered: bytes) -> Iterator[tuple[bytes, str, int]]:
    if b"\0" in data:
        yield from _utf16_tokens(lowered)
    yield from _hex_sep_tokens(lowered)
    yield from _base32_tokens(lowered)
    yield from _escaped_tokens(data)
    if b"." in data:
        yield from _dns_tokens(data, lowered)
    yield from _nested_base64_tokens(data)


def _utf16_tokens(lowered: bytes) -> Iterator[tuple[bytes, str, int]]:
    t = _tables()
    n = len(lowered)
    at = lowered.find(t.utf16_anchor)
    while at != -1:
        match = t.raw_no_lookahead.match(lowered[at : at + 2 * _WIDE_CHARS : 2])
        if match is not None:
            end = at + 2 * match.end()
            # Little-endian: a zero after each character; big-endian: a zero before each. The token ends
            # where the next code unit is not a hex digit (or is not a whole code unit at all).
            little = not lowered[at + 1 : end : 2].strip(b"\0") and not (
                end + 1 < n and lowered[end + 1] == 0 and lowered[end] in _HEX_DIGITS)
            big = at > 0 and not lowered[at - 1 : end - 2 : 2].strip(b"\0") and not (
                end < n and lowered[end - 1] == 0 and lowered[end] in _HEX_DIGITS)
            if little or big:
                yield match.group(), "utf-16", at
        at = lowered.find(t.utf16_anchor, at + 1)


def _hex_sep_tokens(lowered: bytes) -> Iterator[tuple[bytes, str, int]]:
    t = _tables()
    for pair, anchors in t.hex_sep_by_pair:
        seen = lowered.find(pair)
        while seen != -1:
            for anchor, shift in anchors:
                at = seen - shift
                if at >= 0 and lowered.startswith(anchor, at):
                    match = t.raw.match(_unhex_separated(lowered, at))
                    if match is not None:
                        yield match.group(), "hex-sep", at
            seen = lowered.find(pair, seen + 1)


def _unhex_separated(lowered: bytes, at: int) -> bytes:
    """Bytes spelled from lowered[at] as hex pairs, each maybe behind `\\x` or `0x`, maybe followed by
    one separator; at most MAX_TOKEN_CHARS + 1 of them (the token and the byte after it)."""
    out = bytearray()
    i, n = at, len(lowered)
    while len(out) < _WIDE_CHARS and i < n:
        j = i + 2 if lowered[i : i + 2] in (b"\\x", b"0x") else i
        if j + 2 > n or lowered[j] not in _HEX_DIGITS or lowered[j + 1] not in _HEX_DIGITS:
            break
        out.append(int(lowered[j : j + 2], 16))
        i = j + 2
        if lowered[i : i + 2] == b", ":
            i += 2
        elif i < n and lowered[i] in b":- ,":
            i += 1
    return bytes(out)


def _base32_tokens(lowered: bytes) -> Iterator[tuple[bytes, str, int]]:
    t = _tables()
    for anchor, alignment, lead in t.base32_anchors:
        at = lowered.find(anchor)
        while at != -1:
            if at >= lead:
                start = at - lead
                run = _BASE32_RUN.match(lowered, start, start + _BASE32_WINDOW)
                assert run is not None
                match = t.raw.match(_unbase32(run.group()), alignment)
                if match is not None:
                    yield match.group(), "base32", start + 8 * alignment // 5
            at = lowered.find(anchor, at + 1)


def _unbase32(chars: bytes) -> bytes:
    """Whole bytes of a base32 run, bit by bit (a run cut short still gives the bytes it holds)."""
    out = bytearray()
    bits = value = 0
    for c in chars:
        value = (value << 5 | _B32_VALUE[c]) & 0xFFFF
        bits += 5
        if bits >= 8:
            bits -= 8
            out.append(value >> bits & 0xFF)
    return bytes(out)


def _escaped_tokens(data: bytes) -> Iterator[tuple[bytes, str, int]]:
    t = _tables()
    decoded, marks, starts = _decode_escapes(data)
    if not marks:
        return
    for match in t.raw_lower.finditer(decoded):
        start, end = match.span()
        first = _first_escape_inside(marks, starts, start, end)
        if first is not None:
            yield match.group(), first, _source_offset(marks, starts, start)
    # Decoding left to right reads "=01" or "%01" as one escape; a token glued after "=" or "%" (key=<token>,
    # ?id=<token>) starts at the "0" all the same. So a token is also looked for from each byte inside an
    # escape that could be its first (decoded from there on), as ppscan tries every start.
    first_char, second = t.prefix[0], t.prefix[1]
    for _, source, _, source_length, _ in marks:
        for at in range(source + 1, source + source_length):
            if data[at] | 0x20 != first_char or at + 1 >= len(data):
                continue
            following = data[at + 1]
            if following | 0x20 != second:
                escape = _ESCAPE.match(data, at + 1)
                if escape is None or _escape_value(escape) | 0x20 != second:
                    continue  # the token's second character is not next
            if not _decode_escapes(data[at : at + 10 * PREFIX_CHARS])[0].startswith(t.prefix):
                continue  # the prefix's spelling is not there: most starts end here, before the whole window
            window, window_marks, window_starts = _decode_escapes(data[at : at + _ESCAPE_WINDOW])
            match = t.raw_lower.match(window)
            if match is not None:
                first = _first_escape_inside(window_marks, window_starts, 0, match.end())
                if first is not None:
                    yield match.group(), first, at


# The longest a token's escapes can spell it: each character as "&#0000048;" at most (ten bytes).
_ESCAPE_WINDOW = 10 * _WIDE_CHARS


def _escape_value(escape: re.Match[bytes]) -> int:
    """The byte an _ESCAPE match stands for (0x80 for a non-ASCII reference: a token is ASCII, so any other character
    ends it; 0 for a soft break, which stands for nothing and so for no character of a token)."""
    kind = escape.lastgroup
    value = escape.group(kind)
    if kind == "soft":
        return 0
    code = int(value) if kind == "dec" else int(value, 16)
    return code if code < 128 else 0x80


def _decode_escapes(data: bytes) -> tuple[bytes, list[tuple[int, int, int, int, str]], list[int]]:
    """``data`` with its escapes decoded, lower-cased; (decoded position, source position, decoded length, source
    length, encoding) per escape; and the decoded positions alone."""
    marks: list[tuple[int, int, int, int, str]] = []
    pieces: list[bytes] = []
    last = decoded_at = 0
    for escape in _ESCAPE.finditer(data):
        kind = escape.lastgroup
        assert kind is not None
        plain = b"" if kind == "soft" else bytes([_escape_value(escape)])
        literal = data[last : escape.start()]
        pieces.append(literal)
        decoded_at += len(literal)
        marks.append((decoded_at, escape.start(), len(plain), escape.end() - escape.start(), _ESCAPE_NAMES[kind]))
        pieces.append(plain)
        decoded_at += len(plain)
        last = escape.end()
    pieces.append(data[last:])
    return b"".join(pieces).lower(), marks, [mark[0] for mark in marks]


def _first_escape_inside(marks: list[tuple[int, int, int, int, str]], starts: list[int], start: int,
                         end: int) -> str | None:
    """The encoding of the first escape inside decoded [start, end) (a soft break just before it counts:
    it marks the character after it), or None when the span holds none."""
    first = bisect.bisect_left(starts, start)
    inside = [mark for mark in marks[first:] if mark[0] < end and (mark[2] or mark[0] > start)]
    return inside[0][4] if inside else None


def _source_offset(marks: list[tuple[int, int, int, int, str]], starts: list[int], position: int) -> int:
    """Where decoded ``position`` came from: the escape that made it, or the literal byte it is."""
    # The last escape at or before it: a soft break just before a character (decoded length 0) puts that
    # character after the break.
    at = bisect.bisect_right(starts, position) - 1
    if at < 0:
        return position
    decoded, source, length, source_length, _ = marks[at]
    if position < decoded + length:
        return source
    return source + source_length + (position - decoded - length)


def _dns_tokens(data: bytes, lowered: bytes) -> Iterator[tuple[bytes, str, int]]:
    t = _tables()
    undotted = lowered.translate(None, b".")
    source = dotted = 0  # walking both texts together: lowered[source] is undotted[dotted]
    for match in t.raw_no_lookahead.finditer(undotted):
        start, end = match.span()
        source = _advance(lowered, source, dotted, start)
        dotted = start
        last = _advance(lowered, source, dotted, end - 1)
        after = last + 1
        if after - source == end - start:
            continue  # no dot inside: the raw pass's
        # The token ends where a label ends, or where the next character is not a hex digit.
        if after < len(lowered) and lowered[after] != 0x2E and lowered[after] in _HEX_DIGITS:
            continue
        yield match.group(), "dns-labels", source


def _advance(lowered: bytes, source: int, dotted: int, target: int) -> int:
    """The position in ``lowered`` of the ``target``-th byte that is not a dot, from a known pair."""
    while dotted < target:
        stop = source + (target - dotted)
        dotted += stop - source - lowered.count(b".", source, stop)
        source = stop
    while lowered[source] == 0x2E:
        source += 1
    return source


def _nested_base64_tokens(data: bytes) -> Iterator[tuple[bytes, str, int]]:
    t = _tables()
    for anchor, alignment, lead, inner_alignment, inner_lead in t.nested_anchors:
        at = data.find(anchor)
        while at != -1:
            group = at - lead
            if group >= 0:
                found = _decode_nested_at(data, group, alignment, inner_alignment, inner_lead)
                if found is not None:
                    yield found, "base64-base64", group
            at = data.find(anchor, at + 1)


def _decode_nested_at(data: bytes, group: int, alignment: int, inner_alignment: int, inner_lead: int) -> bytes | None:
    # The inner run may start in the outer group before this one (its lead is up to 3 characters).
    earlier = group >= 4 and _BASE64_RUN.match(data, group - 4, group).end() == group  # type: ignore[union-attr]
    start = group - 4 if earlier else group
    inner = _unbase64_run(data, start, start + _NESTED_WINDOW)
    inner_start = alignment + (3 if earlier else 0) - inner_lead
    if inner_start < 0:
        return None
    decoded = _decode_base64_at(inner, inner_start, inner_alignment)
    return decoded[0] if decoded is not None else None


def _unbase64_run(data: bytes, start: int, stop: int) -> bytes:
    run = _BASE64_RUN.match(data, start, stop)
    assert run is not None
    chars = run.group()
    whole = len(chars) - len(chars) % 4
    tail = chars[whole:]
    tail = tail + b"=" * (4 - len(tail)) if len(tail) >= 2 else b""
    try:
        return binascii.a2b_base64((chars[:whole] + tail).translate(_URL_TO_STD))
    except binascii.Error:
        return b""


# -- compressed streams, carved wherever they start (issue 26) ---------------------------------------------
#
# A database page, a capture or a log line can hold a compressed blob at any offset, so a file's bytes are
# searched for every stream's magic (and for the base64 spelling of the start of one) and each candidate is
# decoded there; what comes out is scanned like a file and carved again, MAX_STREAM_DEPTH deep. The work is
# bounded per stream (max_file_bytes out), per file (MAX_FILE_ATTEMPTS candidates, FILE_DECODED_FACTOR x
# max_file_bytes out in all) and per scan (MAX_SCAN_ATTEMPTS, MAX_SCAN_DECODED_BYTES): a bound reached is a
# problem and counts as truncated, never a quiet skip. ppscan carves with the same magics and bounds.

MAX_STREAM_DEPTH = 5
MAX_FILE_ATTEMPTS = 4096
FILE_DECODED_FACTOR = 4
MAX_SCAN_ATTEMPTS = 1 << 18
MAX_SCAN_DECODED_BYTES = 1 << 30

# zlib has no magic, only a header: 0x78 (deflate, 32K window) and one of the four FLG bytes that make the
# pair a multiple of 31 without a preset dictionary.
STREAM_MAGICS = (
    ("gzip", b"\x1f\x8b\x08"), ("xz", b"\xfd7zXZ\x00"), ("zstd", b"\x28\xb5\x2f\xfd"), ("bz2", b"BZh"),
    ("zlib", b"\x78\x01"), ("zlib", b"\x78\x5e"), ("zlib", b"\x78\x9c"), ("zlib", b"\x78\xda"),
)
# The base64 (either alphabet) of a stream's first bytes, for a stream base64-encoded from its first byte
# (a blob in a JSON field or a log line). zlib's two-byte header has no base64 spelling rare enough in text.
BASE64_STREAM_ANCHORS = (
    ("gzip", b"H4sI"), ("xz", b"/Td6WFo"), ("xz", b"_Td6WFo"), ("zstd", b"KLUv/"), ("zstd", b"KLUv_"),
    ("bz2", b"Qlpo"),
)
_BZ2_BLOCK = b"1AY&SY"
_BASE64_LINES = re.compile(rb"[A-Za-z0-9+/_\r\n-]*")


class ScanBudget:
    """What one scan may still spend decoding streams, over all its files."""

    def __init__(self, attempts: int = MAX_SCAN_ATTEMPTS, decoded_bytes: int = MAX_SCAN_DECODED_BYTES) -> None:
        self.attempts = attempts
        self.decoded_bytes = decoded_bytes
        self.limit_attempts = attempts
        self.limit_bytes = decoded_bytes


@dataclass
class Carved:
    """What carving one file's bytes found: hits inside streams (``where`` names the stream, offsets are in
    its decoded bytes), the bounds reached and streams not looked inside (``problems``, ``"where: reason"``)
    and how many of those cut the scan short (``truncated``)."""

    hits: list[Hit]
    problems: list[str]
    truncated: int


def carve(data: bytes, where: str, *, max_stream_bytes: int = DEFAULT_MAX_FILE_BYTES,
          budget: ScanBudget | None = None) -> Carved:
    """Every canary-shaped token inside the compressed streams in ``data``, wherever each starts.

    A stream at offset 0 is labelled ``where (gzip)``, one further in ``where (gzip@OFFSET)``, a base64-encoded
    one ``where (base64@OFFSET) (gzip)``; nested ones add their own label. The bytes of ``data`` itself are not
    searched here (``find`` does that).
    """
    carver = _Carver(max_stream_bytes, budget if budget is not None else ScanBudget())
    carver.layer(bytes(data), where, 1)
    return Carved(carver.hits, carver.problems, carver.truncated)


class _Carver:
    def __init__(self, max_stream_bytes: int, budget: ScanBudget) -> None:
        self.max_stream = max_stream_bytes
        self.budget = budget
        self.hits: list[Hit] = []
        self.problems: list[str] = []
        self.truncated = 0
        self.attempts = 0
        self.decoded = 0
        self.file_decoded = FILE_DECODED_FACTOR * max_stream_bytes
        self.stopped = False

    def layer(self, data: bytes, where: str, depth: int) -> None:
        candidates: list[tuple[int, str, bool]] = []
        for kind, magic in STREAM_MAGICS:
            at = data.find(magic)
            while at != -1:
                candidates.append((at, kind, False))
                at = data.find(magic, at + 1)
        for kind, anchor in BASE64_STREAM_ANCHORS:
            at = data.find(anchor)
            while at != -1:
                candidates.append((at, kind, True))
                at = data.find(anchor, at + 1)
        for at, kind, encoded in sorted(candidates):
            if self.stopped:
                return
            label = f"{where} (base64@{at}) ({kind})" if encoded else f"{where} ({kind})" if at == 0 else f"{where} ({kind}@{at})"
            if not self.attempt(label):
                return
            stream = _unbase64_lines(data, at, self.room() * 4 // 3 + 8) if encoded else memoryview(data)[at:]
            if depth > MAX_STREAM_DEPTH:
                try:
                    deeper = _open_stream(kind, stream, 1)
                except _NoDecoder:
                    deeper = b"?"
                if deeper:
                    self.not_inside(label, f"not looked inside: packed deeper than the bound of {MAX_STREAM_DEPTH} levels")
                continue
            room = self.room()
            try:
                opened = _open_stream(kind, stream, room + 1)
            except _NoDecoder as error:
                self.not_inside(label, f"not looked inside: {error}")
                continue
            if not opened:
                continue
            inner = opened[:room]
            self.spend(len(inner))
            if len(opened) > room:
                self.cut(label, room)
            self.hits.extend(find(inner, label))
            self.layer(inner, label, depth + 1)

    def room(self) -> int:
        return max(0, min(self.max_stream, self.file_decoded - self.decoded, self.budget.decoded_bytes))

    def attempt(self, label: str) -> bool:
        if self.attempts >= MAX_FILE_ATTEMPTS:
            self.stop(label, f"not looked inside: the bound of {MAX_FILE_ATTEMPTS} stream candidates a file was reached")
            return False
        if self.budget.attempts <= 0:
            self.stop(label, f"not looked inside: the scan's bound of {self.budget.limit_attempts} stream candidates was reached")
            return False
        self.attempts += 1
        self.budget.attempts -= 1
        return True

    def spend(self, size: int) -> None:
        self.decoded += size
        self.budget.decoded_bytes -= size

    def cut(self, label: str, room: int) -> None:
        if room >= self.max_stream:
            self.not_inside(label, f"only the first {self.max_stream} bytes of the decompressed data were scanned")
        elif self.budget.decoded_bytes <= 0:
            self.stop(label, f"only the first {room} bytes of the decompressed data were scanned: the scan's bound of "
                             f"{self.budget.limit_bytes} decoded bytes was reached")
        else:
            self.stop(label, f"only the first {room} bytes of the decompressed data were scanned: the bound of "
                             f"{self.file_decoded} decoded bytes a file was reached")

    def stop(self, label: str, reason: str) -> None:
        self.not_inside(label, reason)
        self.stopped = True

    def not_inside(self, label: str, reason: str) -> None:
        self.problems.append(f"{label}: {reason}")
        self.truncated += 1


class _NoDecoder(Exception):
    """A stream this probe cannot decode (zstd, or xz and bzip2 on a minimal Python): said in problems, never
    skipped quietly."""


def _open_stream(kind: str, data: bytes | memoryview, room: int) -> bytes | None:
    """Up to ``room`` bytes decoded from the stream of ``kind`` at the start of ``data``; None if none is there."""
    if kind in ("gzip", "zlib"):
        return _inflate(data, 31 if kind == "gzip" else 15, room)
    # lzma and bz2 are imported here: a minimal Python (Debian's python3-minimal) has neither, and a probe
    # that cannot open one kind of stream must still scan, and say what it could not open.
    if kind == "xz":
        try:
            import lzma
        except ImportError:
            raise _NoDecoder("an xz stream, and this Python has no lzma module") from None
        return _drive(lzma.LZMADecompressor(lzma.FORMAT_XZ), data, room, (lzma.LZMAError, EOFError))
    if kind == "bz2":
        if len(data) < 10 or not 0x31 <= data[3] <= 0x39 or bytes(data[4:10]) != _BZ2_BLOCK:
            return None
        try:
            import bz2
        except ImportError:
            raise _NoDecoder("a bzip2 stream, and this Python has no bz2 module") from None
        return _drive(bz2.BZ2Decompressor(), data, room, (OSError, EOFError, ValueError))
    if len(data) < 5 or data[4] & 0x08:  # zstd: the frame header's reserved bit is zero
        return None
    raise _NoDecoder("a zstandard frame, which detect.py does not decode (the standard library has no zstd "
                     "decoder before Python 3.14); probe/ppscan reads it")


def _inflate(data: bytes | memoryview, wbits: int, room: int) -> bytes | None:
    out = bytearray()
    pending = data
    while len(out) < room:
        d = zlib.decompressobj(wbits)
        try:
            out += d.decompress(pending, room - len(out))
        except zlib.error:
            break
        # A gzip file may hold several members one after another.
        if not (wbits == 31 and d.eof and d.unused_data[:2] == b"\x1f\x8b"):
            break
        pending = d.unused_data
    return bytes(out) if out else None


def _drive(d, data: bytes | memoryview, room: int, errors: tuple[type[Exception], ...]) -> bytes | None:  # noqa: ANN001
    try:
        out = d.decompress(data, room)
    except errors:
        return None
    return out or None


def _unbase64_lines(data: bytes, at: int, limit: int) -> bytes:
    """The bytes of the base64 run (either alphabet, line breaks skipped) starting at ``data[at]``."""
    run = _BASE64_LINES.match(data, at, at + limit + limit // 38)
    assert run is not None
    chars = run.group().translate(None, b"\r\n")[:limit]
    chars = chars[: len(chars) - len(chars) % 4]
    try:
        return binascii.a2b_base64(chars.translate(_URL_TO_STD))
    except binascii.Error:
        return b""


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
        self.budget = ScanBudget()
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
        for dirpath, dirnames, filenames in walk_tree(top, onerror=self.unlistable):
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
                # The chunks are kept (at most max_file_bytes) for carving the streams in them afterwards.
                kept: list[bytes] = []

                def counted(size: int, _read: Callable[[int], bytes] = stream.read) -> bytes:
                    chunk = _read(size)
                    self.bytes += len(chunk or b"")
                    kept.append(chunk or b"")
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
        carved = carve(b"".join(kept)[: self.max_file_bytes], path, max_stream_bytes=self.max_file_bytes,
                       budget=self.budget)
        self.hits.extend(carved.hits)
        self.problems.extend(carved.problems)
        self.truncated += carved.truncated

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
        # One line, as probe/ppscan.c prints it (argparse would wrap it).
        usage="detect.py [-h] --run RUN [--max-file-bytes MAX_FILE_BYTES] [--skip PATH] ROOT [ROOT ...]",
        description="Report every token of run RUN under the given roots, one JSON object "
        'per line, then a summary {"scanned_files", "errors", "bytes", "truncated", "problems", "end"}. '
        "Unreadable paths go to stderr too.",
    )
    parser.add_argument("roots", nargs="+", metavar="ROOT", help="a file or directory to scan")
    parser.add_argument("--run", required=True, help="the run whose tokens are looked for (8 lowercase hex)")
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
    if not RUN_ID.fullmatch(args.run):
        parser.error(f"argument --run: {args.run!r} is not a run id (8 lowercase hex characters, e.g. a3f09c1e)")
    use_run(args.run)
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
