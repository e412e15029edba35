"""Records joined before they are judged: a canary split across records is still a canary.

A store writes records (log lines, the strings of a JSON array, rows, frames) and a payload can be cut
across them: a base64 argument logged in two halves, hex in fixed-width lines, a long line wrapped at a
column, a value chunked into an array. No record alone holds a whole token, so a scanner that judges the
records one by one finds nothing. ``join_records`` builds *views* of the same bytes in which what was cut is
adjacent again; the caller's scanner searches them beside the bytes themselves (which it still scans alone).
A join cannot make a canary out of nothing (a token carries 16 random hex digits), so a view adds sight,
never a sighting that was not in the bytes.

=========  ==============================================================================================
view       what it joins
=========  ==============================================================================================
lines      each record to the next, line breaks taken out (a line wrapped with nothing in front)
stripped   all whitespace taken out (a line wrapped with its continuation indented)
strings    adjacent quoted strings made one (``"ab", "cd"`` is ``"abcd"``: a value chunked into an array)
pieces     each record's payload pieces (runs of 7 or more base64 and hex characters it does not share with
           the record before or after it: a log format's template is shared, a cut payload is not) joined
           across records, for the scanner to decode: joined, then decoded
pairs      the pieces of each record and of the next on a line of their own, so a token that ends a join is
           not run into by the pieces after it
base64     each piece decoded as base64 on its own, then joined (halves encoded separately); ``hex`` likewise
=========  ==============================================================================================

The work is bounded: every view is at most about the size of the bytes (``pairs`` twice), and all of them
together at most ``max_view_bytes``; a view that could go past the bound is not built and says so in
``Joined.problems`` (the caller must not read silence as clean). ``BLIND`` names what no view joins.
Standard library only; it imports nothing of the harness.
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["BLIND", "MAX_VIEW_BYTES", "MIN_PIECE", "VIEWS", "Joined", "join_records", "records", "split_forms"]

# All views of one call together; past it a view is not built (a problem, never a silent skip).
MAX_VIEW_BYTES = 256 << 20

# The views, in the order they are built (the module's table).
VIEWS = ("lines", "stripped", "strings", "pieces", "pairs", "base64", "hex")

# A payload piece: a run of the characters base64 (either alphabet, with padding) and hex are written in.
_PIECE = re.compile(rb"[A-Za-z0-9+/=_-]+")
# Runs shorter than this are a log line's words, counters ("1/2") and a timestamp's fields: they differ from
# record to record without being payload, and kept they would sit between the parts of a cut payload.
MIN_PIECE = 7
_WHITESPACE = re.compile(rb"\s+")
# The close of one quoted string and the open of the next, with what may stand between two array items or
# two concatenated literals (a comma, a plus, whitespace).
_STRING_SEAM = re.compile(rb"""(?P<q>["'])\s*[,+]?\s*(?P=q)""")
_HEX = re.compile(rb"[0-9A-Fa-f]+")
_URL_TO_STD = bytes.maketrans(b"-_", b"+/")

# What no view joins: said in every completeness record, so a reader knows what a clean result does not cover.
BLIND = (
    "a payload cut across records that are not next to each other (another record between the parts)",
    "parts written in another order than the payload's (rows a page holds last-first)",
    "a record boundary that is not a line break or a quoted-string seam (binary frames, rows in a page)",
    "a part shorter than 7 characters with something other than whitespace or a quoted-string seam around it",
)


@dataclass
class Joined:
    """The views of one call (``(label, bytes)``, each label ``"<where> (joined <view>)"``) and its record:
    how many records and pieces it read, the bytes of every view, and what it could not build (``problems``)."""

    where: str
    views: list[tuple[str, bytes]] = field(default_factory=list)
    records: int = 0
    pieces: int = 0
    view_bytes: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, object]:
        return {"where": self.where, "records": self.records, "pieces": self.pieces,
                "views": dict(self.view_bytes), "problems": list(self.problems), "not joined": list(BLIND)}


def records(data: bytes) -> list[bytes]:
    """The lines of ``data`` (``\\r\\n`` or ``\\n``), the last one even if it has no line break."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [line[:-1] if line.endswith(b"\r") else line for line in lines]


def join_records(data: bytes, where: str = "records", *, max_view_bytes: int = MAX_VIEW_BYTES) -> Joined:
    """Views of ``data`` in which a payload cut across adjacent records is whole again (the module's table)."""
    data = bytes(data)
    joined = Joined(where)
    lines = records(data)
    joined.records = len(lines)
    pieces = _payload_pieces(lines)
    joined.pieces = sum(len(p) for p in pieces)
    # Each view is built only if its most (the bytes, twice for pairs) still fits: the bound holds on the work
    # done, not only on what is kept.
    build: dict[str, Callable[[], bytes]] = {
        "lines": lambda: b"".join(lines),
        "stripped": lambda: _WHITESPACE.sub(b"", data),
        "strings": lambda: _STRING_SEAM.sub(b"", data),
        "pieces": lambda: b"".join(b"".join(p) for p in pieces),
        "pairs": lambda: b"\n".join(b"".join(a) + b"".join(b) for a, b in zip(pieces, pieces[1:])),
        "base64": lambda: b"".join(_decoded(p, _base64) for p in pieces),
        "hex": lambda: b"".join(_decoded(p, _hex) for p in pieces),
    }
    total = 0
    for name in VIEWS:
        most = len(data) * (2 if name == "pairs" else 1) + len(lines)
        if total + most > max_view_bytes:
            joined.problems.append(f"{where}: the {name} view (up to {most} bytes) was not built, past the bound of "
                                   f"{max_view_bytes} bytes of views")
            continue
        view = build[name]()
        if view == data:
            joined.view_bytes[name] = 0  # nothing joined: the bytes themselves, which the caller scans alone
            continue
        total += len(view)
        joined.view_bytes[name] = len(view)
        joined.views.append((f"{where} (joined {name})", view))
    return joined


def _payload_pieces(lines: list[bytes]) -> list[list[bytes]]:
    """For each record, its pieces of ``MIN_PIECE`` characters or more that neither neighbour has."""
    found = [_PIECE.findall(line) for line in lines]
    shared = [set(p) for p in found]
    kept = []
    for i, own in enumerate(found):
        near = (shared[i - 1] if i else set()) | (shared[i + 1] if i + 1 < len(found) else set())
        kept.append([p for p in own if p not in near and len(p) >= MIN_PIECE])
    return kept


def _decoded(pieces: list[bytes], decode) -> bytes:
    # A piece that does not decode ends the chain: a line break, so nothing is joined across it.
    return b"".join(decode(p) or b"\n" for p in pieces)


def _base64(piece: bytes) -> bytes | None:
    body = piece.rstrip(b"=")
    if len(body) % 4 == 1 or b"=" in body:
        return None
    try:
        return binascii.a2b_base64((body + b"=" * (-len(body) % 4)).translate(_URL_TO_STD))
    except binascii.Error:
        return None


def _hex(piece: bytes) -> bytes | None:
    if len(piece) % 2 or not _HEX.fullmatch(piece):
        return None
    return binascii.unhexlify(piece)


# -- split forms: a token cut across records, the way stores cut them (the sentinels and the unit tests) ----

def split_forms(token: bytes, prefix: bytes = b"2026-01-01 00:00:00,000 app INFO [-] ") -> dict[str, bytes]:
    """``token`` cut across records in each way a view joins, each behind a log line's ``prefix``: what a
    joined scan must find (its control) and nothing of it whole in any one record."""
    import base64
    import json

    around = b'{"id": 7, "body": "' + token + b'"}'
    packed = base64.b64encode(around)
    hexed = binascii.hexlify(around)
    # Cut inside the token, not at a group boundary, so no record decodes to a whole one on its own.
    cut = len(b'{"id": 7, "body": "') * 4 // 3 + 5
    chunks = [around[i:i + 11].decode() for i in range(0, len(around), 11)]
    words = b"value " + token[:20] + b"\n        " + token[20:]
    # Cut so the first half is padded: only decoded on its own does it join the second.
    first, second = around[:23], around[23:]
    return {
        "base64 halves": prefix + b"value 1/2: " + packed[:cut] + b"\n" + prefix + b"value 2/2: " + packed[cut:] + b"\n",
        "hex lines": b"".join(prefix + b"value: " + hexed[i:i + 37] + b"\n" for i in range(0, len(hexed), 37)),
        "array chunks": prefix + json.dumps({"value": chunks}).encode() + b"\n",
        "wrapped": prefix + words + b"\n",
        "halves encoded apart": prefix + b"value 1/2: " + base64.b64encode(first) + b"\n"
        + prefix + b"value 2/2: " + base64.b64encode(second) + b"\n",
    }
