"""detect.py's forms where leaks really sit (issue 26): UTF-16, hex with separators, base32, HTML references,
quoted-printable, DNS labels with any number of dots, base64 of base64, and compressed streams carved wherever
they start, within bounds on the total work. Each form: a token at a random place in random bytes is found, and
random bytes with no token give no hit (the control). ppscan's parity on the same forms is in
tests/integration/probes/test_probe_parity.py (vectors: tests/vectors/forms.bin)."""

from __future__ import annotations

import base64
import bz2
import gzip
import html.entities
import lzma
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.tokens import token

from canaries import detect
from canaries.detect import ScanBudget, carve, find, scan_tree

TOKEN = token("forms").encode()  # of TEST_RUN, the run the scans look for (tests/conftest.py)

# (encoding reported, how the token is written)
FORMS: dict[str, tuple[str, Callable[[bytes], bytes]]] = {
    "utf-16-le": ("utf-16", lambda t: t.decode().encode("utf-16-le")),
    "utf-16-be": ("utf-16", lambda t: t.upper().decode().encode("utf-16-be")),
    "hex-colon": ("hex-sep", lambda t: b":".join(b"%02x" % c for c in t)),
    "hex-dash": ("hex-sep", lambda t: b"-".join(b"%02X" % c for c in t)),
    "hex-space": ("hex-sep", lambda t: b" ".join(b"%02x" % c for c in t)),
    "hex-backslash-x": ("hex-sep", lambda t: b"".join(b"\\x%02x" % c for c in t)),
    "hex-0x-comma": ("hex-sep", lambda t: b", ".join(b"0x%02x" % c for c in t)),
    "hex-0x": ("hex-sep", lambda t: b"".join(b"0X%02X" % c for c in t)),
    "base32": ("base32", lambda t: base64.b32encode(t)),
    "base32-aligned-3": ("base32", lambda t: base64.b32encode(b"\x01\x02\x03" + t)),
    "base32-lower": ("base32", lambda t: base64.b32encode(b"\x07" + t).lower()),
    "html-decimal": ("html-entity", lambda t: b"".join(b"&#%d;" % c for c in t)),
    "html-hex-one": ("html-entity", lambda t: t[:12] + b"&#x%X;" % t[12] + t[13:]),
    "html-leading-zeros": ("html-entity", lambda t: b"&#0048;" + t[1:]),
    "qp-every-byte": ("quoted-printable", lambda t: b"".join(b"=%02X" % c for c in t)),
    "qp-soft-break": ("quoted-printable", lambda t: t[:30] + b"=\r\n" + t[30:]),
    "qp-soft-break-in-prefix": ("quoted-printable", lambda t: t[:4] + b"=\n" + t[4:]),
    "dns-three-labels": ("dns-labels", lambda t: t[:14] + b"." + t[14:30] + b"." + t[30:] + b".exfil.example"),
    "dns-dots-in-prefix": ("dns-labels", lambda t: t[:2] + b"." + t[2:5] + b"." + t[5:] + b".x"),
    "dns-every-byte": ("dns-labels", lambda t: b".".join(bytes([c]) for c in t)),
    "base64-of-base64": ("base64-base64", lambda t: base64.b64encode(base64.b64encode(t))),
    "base64-of-base64-aligned": ("base64-base64", lambda t: base64.b64encode(b"zz" + base64.b64encode(b"x" + t))),
}
# Bytes that end any form (none is in any alphabet above), so a random neighbour cannot extend the token.
FENCE = b"\n!\n"


@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_form_is_found_where_it_is(form: str) -> None:
    encoding, write = FORMS[form]
    start = len(b"lead ") + len(FENCE)
    data = b"lead " + FENCE + write(TOKEN) + FENCE + b" tail"
    hits = find(data)
    # One reading of the bytes, but a fully escaped token is also read from inside its first escape ("=30=31..."
    # holds "0" then "=31...": every start is tried), a second hit of the same token and encoding.
    assert {(hit.token, hit.encoding) for hit in hits} == {(TOKEN.decode(), encoding)}
    # The offset is where the form starts, or (base32, base64 of base64) where its characters start carrying
    # the token's bits (after the bytes in front of it in the group).
    assert start <= hits[0].offset < start + 8


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(form=st.sampled_from(sorted(FORMS)), before=st.binary(max_size=600), after=st.binary(max_size=600))
def test_a_token_in_each_form_at_a_random_place_in_random_bytes_is_found(form: str, before: bytes, after: bytes) -> None:
    encoding, write = FORMS[form]
    data = before + FENCE + write(TOKEN) + FENCE + after
    assert (TOKEN.decode(), encoding) in {(hit.token, hit.encoding) for hit in find(data)}


@settings(max_examples=100, deadline=None)
@given(noise=st.binary(max_size=2000))
def test_random_bytes_hold_no_token(noise: bytes) -> None:
    """The control: random bytes (any of them may be a separator, an escape, a magic) give no hit."""
    assert find(noise) == [] and carve(noise, "noise").hits == []


@pytest.mark.parametrize("near", [
    b":".join(b"%02x" % c for c in TOKEN + b"a"),  # a last group of 13 hex digits
    TOKEN.decode().encode("utf-16-le") + "a".encode("utf-16-le"),
    b"".join(b"=%02X" % c for c in TOKEN[:-1]),
    TOKEN[:30] + b"." + TOKEN[30:] + b"a.example",
    base64.b32encode(TOKEN[:-1]),
    b"&#48;" + TOKEN[1:-1],
])
def test_near_misses_are_not_hits(near: bytes) -> None:
    assert find(b"<" + near + b">") == []


def test_no_named_html_reference_stands_for_a_character_a_token_holds() -> None:
    """Why named references are left undecoded: none of them is a letter, a digit or '-' (so none can be part
    of a token); decimal and hex references are the only way to spell a token's characters."""
    token_characters = set("abcdefghijklmnopqrstuvwxyz0123456789-ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    assert [name for name, text in html.entities.html5.items() if text in token_characters] == []


# -- streams carved wherever they start -----------------------------------------------------------------------

PACKERS = {"gzip": gzip.compress, "zlib": zlib.compress, "xz": lzma.compress, "bz2": bz2.compress}


def _sqlite_page(filler: bytes) -> bytes:
    return b"SQLite format 3\x00" + struct.pack(">HBBBBBB", 4096, 1, 1, 0, 64, 32, 32) + filler


def _pcap(filler: bytes) -> bytes:
    return struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1) + struct.pack("<IIII", 1, 2, 60, 60) + filler


def _log_line(filler: bytes) -> bytes:
    return b"2026-12-03T13:00:00Z INFO request done blob=" + filler


@settings(max_examples=25, deadline=None)
@given(kind=st.sampled_from(sorted(PACKERS)), host=st.sampled_from([_sqlite_page, _pcap, _log_line]),
       before=st.binary(max_size=700), after=st.binary(max_size=700))
def test_a_stream_at_a_random_offset_in_a_page_a_capture_or_a_log_line_is_opened(kind, host, before, after) -> None:
    head = host(before)
    data = head + PACKERS[kind](b"payload " + TOKEN + b" end") + after
    found = carve(data, "f")
    assert (TOKEN.decode(), f"f ({kind}@{len(head)})", len(b"payload ")) in {
        (hit.token, hit.where, hit.offset) for hit in found.hits}
    # Random bytes may hold a zstd frame's magic (hypothesis found b"KLUv/", its base64): detect.py says it cannot
    # look inside one (test_a_zstd_frame_is_said_not_looked_inside), which is right, and no other problem.
    assert [p for p in found.problems if "not looked inside: a zstandard frame" not in p] == []


def test_base64_of_a_stream_is_opened_and_nested_streams_are_labelled() -> None:
    inner = zlib.compress(b"x" + TOKEN)
    data = b'{"note": "' + base64.b64encode(gzip.compress(b"y" * 7 + inner)) + b'"}'
    assert {(hit.where, hit.offset) for hit in carve(data, "row").hits} == {
        ("row (base64@10) (gzip) (zlib@7)", 1)}


def test_a_zstd_frame_is_said_not_looked_inside() -> None:
    """detect.py has no zstd decoder (the standard library has none before 3.14): a frame is a problem and a
    truncation, never a quiet skip. probe/ppscan decodes it."""
    frame = b"\x28\xb5\x2f\xfd\x20\x05" + b"hello"
    found = carve(b"row:" + frame, "f")
    assert found.problems == ["f (zstd@4): not looked inside: a zstandard frame, which detect.py does not decode "
                              "(the standard library has no zstd decoder before Python 3.14); probe/ppscan reads it"]
    assert found.truncated == 1


def test_many_small_streams_stop_at_the_bound_of_candidates_a_file_and_say_so() -> None:
    one = zlib.compress(b"nothing")  # zlib: one stream a candidate (a gzip one would run on to the members after it)
    found = carve(one * (detect.MAX_FILE_ATTEMPTS + 10), "f")
    assert found.truncated == 1 and len(found.problems) == 1
    assert found.problems[0].endswith(f"the bound of {detect.MAX_FILE_ATTEMPTS} stream candidates a file was reached")


def test_a_decompression_bomb_is_cut_per_stream_and_per_file_and_says_so() -> None:
    bomb = zlib.compress(bytes(1 << 20))
    found = carve(bomb * 6 + zlib.compress(TOKEN), "f", max_stream_bytes=1 << 18)
    cut = [p for p in found.problems if "only the first 262144 bytes of the decompressed data were scanned" in p]
    assert len(cut) == 4  # four streams of 1 MiB, each cut at 256 KiB: the file's bound of 4 x 256 KiB is spent
    assert found.problems[-1].endswith(f"the bound of {4 << 18} decoded bytes a file was reached")
    assert found.truncated == len(found.problems) == 5
    assert TOKEN.decode() not in {hit.token for hit in found.hits}  # past the bound: not looked at, and said


def test_the_scans_budget_is_shared_by_its_files() -> None:
    budget = ScanBudget(attempts=3)
    first = carve(zlib.compress(TOKEN) * 2, "a", budget=budget)
    second = carve(zlib.compress(TOKEN) * 2, "b", budget=budget)
    assert len(first.hits) == 2 and first.problems == []
    assert len(second.hits) == 1
    assert second.problems == ["b (zlib@" + str(len(zlib.compress(TOKEN))) + "): not looked inside: the scan's bound "
                               "of 3 stream candidates was reached"]


def test_scan_tree_carves_files_and_counts_what_it_could_not_open(tmp_path: Path) -> None:
    (tmp_path / "page.db").write_bytes(_sqlite_page(b"\x00" * 100) + bz2.compress(TOKEN) + b"\x00" * 50)
    (tmp_path / "frame.bin").write_bytes(b"x" + b"\x28\xb5\x2f\xfd\x20\x05hello")
    hits, problems = scan_tree([str(tmp_path)])
    assert [(hit.token, hit.where) for hit in hits] == [(TOKEN.decode(), f"{tmp_path}/page.db (bz2@124)")]
    assert problems == [f"{tmp_path}/frame.bin (zstd@1): not looked inside: a zstandard frame, which detect.py "
                        "does not decode (the standard library has no zstd decoder before Python 3.14); "
                        "probe/ppscan reads it"]


def test_the_host_side_scanner_finds_every_form_and_says_what_it_could_not_open() -> None:
    """canaries.scan (in process, detect.py's engine): every form of FORMS and a stream inside a row; a zstd frame
    it cannot open makes the scan incomplete (the error keeps what it found)."""
    from canaries.errors import IncompleteScanError
    from canaries.scan import scan_bytes
    from canaries.token import Mint

    mint = Mint("0123abcd")
    canary = mint.mint("b", "mem")
    for encoding, write in FORMS.values():
        found = scan_bytes(FENCE + write(canary.bytes) + FENCE, mint, "row")
        assert {(hit.canary, hit.hit.encoding) for hit in found} == {(canary, encoding)}
    row = b"id=7 blob=" + bz2.compress(canary.bytes)
    assert [(hit.canary, hit.hit.where) for hit in scan_bytes(row, mint, "row")] == [(canary, "row (bz2@10)")]
    with pytest.raises(IncompleteScanError) as caught:
        scan_bytes(row + b"\x28\xb5\x2f\xfd\x20\x05hello", mint, "row")
    assert [hit.canary for hit in caught.value.found] == [canary]
