"""Unit tests for canaries/: the token shape and Mint, the standalone detector, host-side scanning.

Detection tests each carry a control (the same framing with a real token is found) so that a
"no hits" assertion cannot pass merely because the detector is blind. Property tests run with a
derandomized Hypothesis profile so every run sees the same examples.
"""

from __future__ import annotations

import ast
import base64
import binascii
import io
import json
import os
import re
import string
import sys
import threading
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.tokens import KNOWN, TEST_RUN, token

import canaries
from canaries import detect
from canaries import token as token_module
from canaries.detect import Hit, find, scan_stream, scan_tree
from canaries.errors import (
    CanaryError,
    CanaryFormatError,
    DuplicateCanaryError,
    IncompleteScanError,
)
from canaries.scan import Attributed, attribute, scan_bytes, scan_dir
from canaries.token import Canary, Mint, new_run_id

REPO = Path(__file__).resolve().parents[2]
DETECT_PY = REPO / "canaries" / "detect.py"

DETERMINISTIC = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=40,
    suppress_health_check=[HealthCheck.too_slow],
)

HEX = "0123456789abcdef"
ALNUM = string.ascii_lowercase + string.digits
NOT_HEX = bytes(b for b in range(256) if chr(b) not in string.hexdigits)
DNS_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")

fields = st.text(ALNUM, min_size=1, max_size=6)
# Tokens of the test run (the scans look for it: tests/conftest.py), any hex in their four groups.
tokens = st.builds(
    lambda a, b, c, d: f"{TEST_RUN}-{a}-{b}-{c}-{d}",
    st.text(HEX, min_size=4, max_size=4),
    st.text(HEX, min_size=4, max_size=4),
    st.text(HEX, min_size=4, max_size=4),
    st.text(HEX, min_size=12, max_size=12),
)
# What follows a token decides where it ends: a hex digit would make its last group longer than 12,
# so embedded tokens are followed by a non-hex byte and then anything.
after_token = st.builds(lambda first, rest: bytes([first]) + rest, st.sampled_from(NOT_HEX), st.binary(max_size=40))
surroundings = st.binary(max_size=64)



def _framed_forms(token: bytes) -> dict[str, bytes]:
    """The token in each encoding, each framed by spaces as it might sit in a log line."""
    return {
        "raw": b" " + token + b" ",
        "base64": b" " + base64.b64encode(b"x" + token + b" ") + b" ",
        "base64url": b" " + base64.urlsafe_b64encode(b"xy" + token + b"\xff\xfe") + b" ",
        "hex": b" " + binascii.hexlify(token + b" ") + b" ",
        "HEX": b" " + binascii.hexlify(token + b" ").upper() + b" ",
    }


# --- token shape and Mint ---------------------------------------------------------------------


@DETERMINISTIC
@given(st.lists(st.tuples(fields, fields), unique=True, max_size=20))
def test_minted_tokens_are_unique_well_formed_dns_labels(places: list[tuple[str, str]]) -> None:
    """Every minted token is unique, has the run's shape (a version-4 UUID), fits in 63 chars and is a DNS label."""
    mint = Mint("0123abcd")
    minted = [mint.mint(principal, location) for principal, location in places]
    assert len({canary.token for canary in minted}) == len(places)
    for canary, (principal, location) in zip(minted, places):
        assert detect.token_pattern("0123abcd").fullmatch(canary.bytes)
        assert str(uuid.UUID(canary.token)) == canary.token and uuid.UUID(canary.token).version == 4
        assert len(canary.token) <= 63
        assert DNS_LABEL.fullmatch(canary.token)
        f"{canary.token}.example.org".encode("idna")  # raises if the label is not valid
        assert (canary.run, canary.principal, canary.location) == ("0123abcd", principal, location)
        assert mint.origin(canary.token) == canary
        assert mint.origin(canary.token) == canary
    assert mint.all() == tuple(minted)


def test_the_same_place_in_two_mints_of_one_run_gets_different_tokens() -> None:
    """The entropy makes tokens unique even across mints that share a run id and a place."""
    minted = {Mint("0123abcd").mint("a", "mem").token for _ in range(200)}
    assert len(minted) == 200


def test_minting_the_same_place_twice_is_refused() -> None:
    """A second canary for the same (principal, location) in one run is refused, saying why."""
    mint = Mint("0123abcd")
    first = mint.mint("a", "mem")
    second = mint.mint("b", "mem")  # control: another principal at the same location is fine
    with pytest.raises(DuplicateCanaryError) as refused:
        mint.mint("a", "mem")
    assert "one canary per run, principal and location" in str(refused.value)
    assert first.token in str(refused.value)
    assert mint.all() == (first, second)


@pytest.mark.parametrize("run", ["", "0123abc", "0123abcd0", "0123ABCD", "0123abcg", "٠١٢٣abcd"])
def test_mint_refuses_a_bad_run_id_naming_it(run: str) -> None:
    """A run id that is not 8 lowercase hex characters is refused with the input and the fix."""
    with pytest.raises(CanaryFormatError) as refused:
        Mint(run)
    assert repr(run) in str(refused.value)
    assert "8 lowercase hex" in str(refused.value)
    assert "new_run_id()" in str(refused.value)


@pytest.mark.parametrize("field", ["", "Alice", "toolong", "a-b", "a_b", "é"])
def test_mint_refuses_a_bad_principal_or_location(field: str) -> None:
    """Principal and location must be 1-6 of [a-z0-9]; the error names which one and the value."""
    mint = Mint("0123abcd")
    with pytest.raises(CanaryFormatError, match="principal") as refused:
        mint.mint(field, "mem")
    assert repr(field) in str(refused.value)
    with pytest.raises(CanaryFormatError, match="location"):
        mint.mint("a", field)
    assert mint.all() == ()


def test_new_run_id_is_accepted_by_mint() -> None:
    """new_run_id() makes ids that Mint accepts."""
    run = new_run_id()
    assert re.fullmatch("[0-9a-f]{8}", run)
    assert Mint(run).run == run


def test_origin_is_case_insensitive_and_none_for_strangers() -> None:
    """origin() finds a minted token in any case, and returns None for tokens it never minted."""
    mint = Mint("0123abcd")
    canary = mint.mint("op", "key")
    assert mint.origin(canary.token.upper()) == canary
    assert mint.origin(KNOWN) is None
    assert Mint("0123abcd").origin(canary.token) is None  # same run id, different mint


def test_a_canary_must_be_a_token_of_its_run() -> None:
    """A Canary is built only from a lower-case token of its own run's shape; near shapes are refused by name."""
    assert Canary(KNOWN, TEST_RUN, "a", "mem").bytes == KNOWN.encode()
    for bad in (KNOWN[:-1], KNOWN + "0", KNOWN[2:], " " + KNOWN, KNOWN + "\n", "", "ppcanary-x",
                KNOWN.replace("-", "", 1), "ffffffff" + KNOWN[8:]):
        with pytest.raises(CanaryFormatError) as refused:
            Canary(bad, TEST_RUN, "a", "mem")
        assert repr(bad) in str(refused.value)
    with pytest.raises(CanaryFormatError, match="lower"):
        Canary(KNOWN.upper(), TEST_RUN, "a", "mem")
    with pytest.raises(CanaryFormatError, match="run"):
        Canary(KNOWN, "0123ABCD", "a", "mem")


def test_a_token_says_nothing_of_pairproof_nor_of_where_it_was_planted() -> None:
    """Issue 28: an agent must not tell a canary from its user's ordinary ids. A minted token is a plain version-4
    UUID whose first group is the run id: no marker, no principal, no location in it; only the mint knows where
    each went."""
    mint = Mint("5e1f0a2b")
    made = [mint.mint(principal, location) for principal in ("a", "op", "plat") for location in ("mem", "vol", "env")]
    for canary in made:
        assert str(uuid.UUID(canary.token)) == canary.token and uuid.UUID(canary.token).version == 4
        assert canary.token.startswith("5e1f0a2b-") and set(canary.token) <= set("0123456789abcdef-")
        assert mint.origin(canary.token) == canary
    assert len({canary.token[9:] for canary in made}) == len(made)


def test_errors_form_one_hierarchy() -> None:
    """Every canaries error is a CanaryError."""
    for error in (CanaryFormatError, DuplicateCanaryError, IncompleteScanError):
        assert issubclass(error, CanaryError)


def test_the_token_shape_is_defined_once_in_detect() -> None:
    """token.token_pattern is detect.token_pattern, so the probe and the mint cannot drift apart."""
    assert token_module.token_pattern is detect.token_pattern


def test_package_exports_every_name_in_all() -> None:
    """Every name in canaries.__all__ exists, and the public record types are among them."""
    assert [name for name in canaries.__all__ if not hasattr(canaries, name)] == []
    assert {"Canary", "Mint", "Hit", "Attributed", "find", "scan_tree"} <= set(canaries.__all__)


# --- detect.find --------------------------------------------------------------------------------


@DETERMINISTIC
@given(tokens, surroundings, after_token)
def test_raw_token_is_found_at_its_offset(token: str, before: bytes, after: bytes) -> None:
    """A raw token anywhere in random bytes is found once, at its offset."""
    data = before + token.encode() + after
    assert find(data, "w") == [Hit(token, "raw", len(before), "w")]


@DETERMINISTIC
@given(tokens, surroundings, after_token, st.data())
def test_raw_token_in_any_case_is_found_and_lowered(token: str, before: bytes, after: bytes, data: st.DataObject) -> None:
    """DNS may change any letter's case (0x20 randomisation); the hit reports lower case."""
    flips = data.draw(st.lists(st.booleans(), min_size=len(token), max_size=len(token)))
    mixed = "".join(c.upper() if flip else c for c, flip in zip(token, flips))
    assert find(before + mixed.encode() + after) == [Hit(token, "raw", len(before))]
    assert find(token.upper().encode()) == [Hit(token, "raw", 0)]


@pytest.mark.parametrize("alignment", [0, 1, 2])
@pytest.mark.parametrize("alphabet", ["base64", "base64url"])
@DETERMINISTIC
@given(
    token=tokens,
    groups=st.integers(0, 20),
    filler=st.binary(min_size=2 + 3 * 20, max_size=2 + 3 * 20),
    after=after_token,
    outside=st.tuples(surroundings, surroundings),
)
def test_base64_token_is_found_at_every_alignment(
    alignment: int,
    alphabet: str,
    token: str,
    groups: int,
    filler: bytes,
    after: bytes,
    outside: tuple[bytes, bytes],
) -> None:
    """A token at any offset inside a base64 blob, itself inside random bytes, is found."""
    before = filler[: 3 * groups + alignment]
    encode = base64.b64encode if alphabet == "base64" else base64.urlsafe_b64encode
    # The quote ends the blob, as in JSON; without an end a decoder cannot tell blob from bytes.
    data = outside[0] + encode(before + token.encode() + after) + b'"' + outside[1]
    hits = find(data)
    assert [(hit.token, hit.offset) for hit in hits] == [(token, len(outside[0]) + 4 * groups + alignment)]
    # A url-safe blob that happens to use neither "-" nor "_" is also valid standard base64.
    expected = {"base64"} if alphabet == "base64" else {"base64url", "base64"}
    assert hits[0].encoding in expected


@pytest.mark.parametrize("upper", [False, True])
@DETERMINISTIC
@given(tokens, surroundings, after_token, st.tuples(surroundings, surroundings))
def test_hex_token_is_found_in_either_case(
    upper: bool, token: str, before: bytes, after: bytes, outside: tuple[bytes, bytes]
) -> None:
    """A hex-encoded token, lower- or upper-case digits, inside random bytes, is found."""
    spelled = binascii.hexlify(before + token.encode() + after)
    spelled = spelled.upper() if upper else spelled
    data = outside[0] + spelled + outside[1]
    assert find(data) == [Hit(token, "hex", len(outside[0]) + 2 * len(before))]


def test_base64_alphabet_is_named_when_the_blob_shows_it() -> None:
    """A blob using "-" or "_" is base64url, one using "+" or "/" is base64; each found once."""
    plain = b"\xfb\xff" + KNOWN.encode() + b"\xfb\xff\xfe"
    assert [hit.encoding for hit in find(base64.urlsafe_b64encode(plain))] == ["base64url"]
    assert [hit.encoding for hit in find(base64.b64encode(plain))] == ["base64"]


def test_token_ending_a_blob_is_found() -> None:
    """A token as the very last bytes of base64 or hex data, with or without padding, is found."""
    for plain in (KNOWN.encode(), b"a" + KNOWN.encode(), b"ab" + KNOWN.encode()):
        offset = len(plain) - len(KNOWN)
        assert find(base64.b64encode(plain)) == [Hit(KNOWN, "base64", offset // 3 * 4 + offset)]
        assert find(binascii.hexlify(plain)) == [Hit(KNOWN, "hex", 2 * offset)]


def test_token_split_by_base64_line_wrapping_is_found() -> None:
    """`base64` wraps lines at 76 columns; a token split across a line break, or starting a line,
    is found once, at its offset in the wrapped text."""
    for before in range(120):
        wrapped = base64.encodebytes(bytes(before) + KNOWN.encode() + b" ")
        unwrapped_at = 4 * (before // 3) + before % 3
        at = unwrapped_at + unwrapped_at // 76  # one "\n" after every 76 characters
        assert find(wrapped) == [Hit(KNOWN, "base64", at)], before
    # The sweep really does split tokens: for this one the break falls inside the encoded token.
    assert b"\n" in base64.encodebytes(bytes(50) + KNOWN.encode())[66 : 66 + 54]


@DETERMINISTIC
@given(st.binary(max_size=2048))
def test_random_bytes_hold_no_canary(data: bytes) -> None:
    """Random bytes, and their base64 and hex encodings, produce no hits."""
    for form in (data, base64.b64encode(data), base64.urlsafe_b64encode(data), data.hex().encode()):
        assert find(form) == []


@pytest.mark.parametrize(
    "near_miss",
    [
        KNOWN[:-1],  # a last group of 11 hex digits
        KNOWN + "0",  # a last group of 13 hex digits
        KNOWN[1:],  # part of the run id missing
        KNOWN[9:],  # the run id missing
        KNOWN[:8] + KNOWN[9:],  # the run id's dash missing
        "f" + KNOWN[1:],  # another run's
        KNOWN[:13] + KNOWN[14:],  # a second group of 3 hex digits
        KNOWN[:10] + "g" + KNOWN[11:],  # a second group with a non-hex digit
        KNOWN.replace("-", "_"),  # underscores for dashes
    ],
)
def test_near_miss_shapes_are_not_hits(near_miss: str) -> None:
    """Shapes close to a token are not reported, in any encoding; a real token in the same
    framing is (the control)."""
    for encoding, framed in _framed_forms(near_miss.encode()).items():
        assert find(framed) == [], encoding
    for encoding, framed in _framed_forms(KNOWN.encode()).items():
        assert [hit.token for hit in find(framed)] == [KNOWN], encoding


def test_same_token_at_two_offsets_is_two_hits() -> None:
    """Deduplication is by (token, encoding, offset): a token repeated is reported each time."""
    data = KNOWN.encode() + b" " + KNOWN.encode()
    assert find(data) == [Hit(KNOWN, "raw", 0), Hit(KNOWN, "raw", len(KNOWN) + 1)]


# --- detect.scan_stream -------------------------------------------------------------------------


def test_token_at_every_position_across_chunk_boundaries_is_found_exactly_once() -> None:
    """For every encoding and every position over three chunks (so across each chunk boundary,
    and across each point where one window hands over to the next), one hit, right offset."""
    chunk = 256
    for encoding, framed in _framed_forms(KNOWN.encode()).items():
        (expected,) = find(framed)
        for position in range(3 * chunk):
            data = b" " * position + framed + b" " * (3 * chunk)
            hits = scan_stream(io.BytesIO(data), "s", chunk_size=chunk)
            offset = position + expected.offset
            assert hits == [Hit(KNOWN, expected.encoding, offset, "s")], (encoding, position)


class ShortReads(io.RawIOBase):
    """A stream that returns at most `most` bytes per read, as pipes and sockets may."""

    def __init__(self, data: bytes, most: int) -> None:
        self._data = io.BytesIO(data)
        self._most = most

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        return self._data.read(min(size, self._most) if size >= 0 else self._most)


@DETERMINISTIC
@given(
    parts=st.lists(
        st.one_of(
            st.binary(max_size=300),
            st.builds(lambda t: t.encode() + b" ", tokens),
            st.builds(lambda t: base64.b64encode(b"\x00" + t.encode() + b"!") + b" ", tokens),
            st.builds(lambda t: binascii.hexlify(t.encode() + b" "), tokens),
        ),
        max_size=8,
    ),
    chunk_size=st.integers(32, 700),
    most=st.integers(1, 1000),
)
def test_scan_stream_reports_what_find_reports(parts: list[bytes], chunk_size: int, most: int) -> None:
    """Scanning in chunks, even with short reads, gives exactly the hits of one find() on it all."""
    data = b"".join(parts)
    streamed = scan_stream(ShortReads(data, most), "s", chunk_size=chunk_size)
    assert streamed == find(data, "s")


def test_scan_stream_refuses_a_zero_chunk_size() -> None:
    """A chunk size below 1 would never advance; it is refused by name."""
    with pytest.raises(ValueError, match="chunk_size"):
        scan_stream(io.BytesIO(b""), "s", chunk_size=0)


# --- detect.scan_tree ---------------------------------------------------------------------------


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_scan_tree_finds_tokens_in_nested_files(tmp_path: Path) -> None:
    """Tokens in files at any depth are found, each labelled with its file's path."""
    a, b = Mint("0123abcd").mint("a", "mem"), Mint("0123abcd").mint("b", "vol")
    deep = _write(tmp_path / "x" / "y" / "z" / "notes.txt", b"remember " + a.bytes + b"\n")
    blob = _write(tmp_path / "x" / "blob.b64", base64.b64encode(b"{" + b.bytes + b"}"))
    _write(tmp_path / "empty", b"")
    hits, problems = scan_tree([str(tmp_path)])
    assert problems == []
    assert {(hit.token, hit.encoding, hit.where) for hit in hits} == {
        (a.token, "raw", str(deep)),
        (b.token, "base64", str(blob)),
    }


def test_scan_tree_refuses_a_bare_string_of_roots() -> None:
    """Passing one path instead of a list would scan each character; it is refused."""
    with pytest.raises(TypeError, match=r"pass \['/tmp'\]"):
        scan_tree("/tmp")  # type: ignore[arg-type]


def test_scan_tree_does_not_follow_symlinks(tmp_path: Path) -> None:
    """Symlinks to a directory or file outside the root are not followed; scanning the outside
    directly finds its token (the control)."""
    outside = tmp_path / "outside"
    secret = _write(outside / "secret.txt", KNOWN.encode())
    root = tmp_path / "root"
    root.mkdir()
    (root / "to-dir").symlink_to(outside, target_is_directory=True)
    (root / "to-file").symlink_to(secret)
    (root / "dangling").symlink_to(tmp_path / "nowhere")
    assert scan_tree([str(root)]) == ([], [])
    assert [hit.where for hit in scan_tree([str(outside)])[0]] == [str(secret)]


def test_scan_tree_scans_names_and_link_targets(tmp_path: Path) -> None:
    """A token used as a file or directory name, or written into a symlink's target, is found."""
    (tmp_path / f"dir-{KNOWN}").mkdir()
    link = tmp_path / "link"
    link.symlink_to(f"/nonexistent/{KNOWN}")
    hits, problems = scan_tree([str(tmp_path)])
    assert problems == []
    assert {(hit.token, hit.where) for hit in hits} == {
        (KNOWN, f"{tmp_path / f'dir-{KNOWN}'} (name)"),
        (KNOWN, f"{link} (link target)"),
    }


def test_scan_tree_does_not_hang_on_a_fifo(tmp_path: Path) -> None:
    """A fifo with no writer is skipped, not opened (opening it to read would block forever)."""
    os.mkfifo(tmp_path / "pipe")
    _write(tmp_path / "file.txt", KNOWN.encode())
    result: list[tuple[list[Hit], list[str]]] = []
    worker = threading.Thread(target=lambda: result.append(scan_tree([str(tmp_path)])), daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), "scan_tree blocked on the fifo"
    ((hits, problems),) = result
    assert [hit.token for hit in hits] == [KNOWN]
    assert problems == []


def test_open_regular_neither_blocks_on_nor_follows_a_swapped_in_path(tmp_path: Path) -> None:
    """If a listed file is replaced by a fifo or symlink before it is opened, it is not read."""
    os.mkfifo(tmp_path / "pipe")
    assert detect._open_regular(str(tmp_path / "pipe")) is None
    (tmp_path / "link").symlink_to(_write(tmp_path / "real", b"x"))
    with pytest.raises(OSError):
        detect._open_regular(str(tmp_path / "link"))
    fd = detect._open_regular(str(tmp_path / "real"))  # control: a regular file opens
    assert fd is not None
    os.close(fd)


def test_scan_tree_reports_a_file_that_vanishes_before_it_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file deleted between listing and opening is reported as a problem, not raised, and the
    scan goes on to the other files."""
    doomed = _write(tmp_path / "a-doomed.txt", b"x")
    kept = _write(tmp_path / "b-kept.txt", KNOWN.encode())
    real_open = detect._open_regular

    def delete_then_open(path: str) -> int | None:
        if path == str(doomed):
            doomed.unlink()  # the real race, made to happen at the worst moment
        return real_open(path)

    monkeypatch.setattr(detect, "_open_regular", delete_then_open)
    hits, problems = scan_tree([str(tmp_path)])
    assert problems == [f"{doomed}: vanished before it could be read [ENOENT]"]
    assert [hit.where for hit in hits] == [str(kept)]


def test_scan_tree_reports_a_missing_root() -> None:
    """A root that does not exist is a problem, not an exception."""
    assert scan_tree(["/nonexistent/pairproof"]) == (
        [],
        ["/nonexistent/pairproof: vanished before it could be read [ENOENT]"],
    )


def test_scan_tree_notes_files_cut_short_at_max_file_bytes(tmp_path: Path) -> None:
    """A file beyond max_file_bytes is read up to the limit and noted; the default finds both
    tokens (the control)."""
    late = token("late")
    big = _write(tmp_path / "big.log", KNOWN.encode() + b" " * 5000 + late.encode())
    hits, problems = scan_tree([str(tmp_path)], max_file_bytes=4096)
    assert [hit.token for hit in hits] == [KNOWN]
    assert problems == [f"{big}: only the first 4096 bytes were scanned (the file is larger than max_file_bytes)"]
    assert [hit.token for hit in scan_tree([str(tmp_path)])[0]] == [KNOWN, late]


def test_scan_tree_never_enters_sys() -> None:
    """/sys is not walked even when given as a root; that is reported, not silent."""
    hits, problems = scan_tree(["/sys/kernel"])
    assert hits == []
    assert problems == ["/sys/kernel: not scanned: /sys is never entered (kernel-made; some reads block)"]


def test_detect_main_skips_what_it_is_told_to_skip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--skip PATH` keeps the walk out of PATH and says so for a skipped root; without it the
    same tree's token is found (the control)."""
    secret = _write(tmp_path / "skipped" / "secret.txt", KNOWN.encode())
    assert detect.main(["--run", TEST_RUN, str(tmp_path)]) == 0
    assert [json.loads(line).get("where") for line in capsys.readouterr().out.splitlines()] == [str(secret), None]
    assert detect.main(["--run", TEST_RUN, "--skip", str(tmp_path / "skipped"), str(tmp_path), str(secret)]) == 0
    captured = capsys.readouterr()
    assert [json.loads(line) for line in captured.out.splitlines()] == [
        {"scanned_files": 0, "errors": 1, "bytes": 0, "truncated": 0,
         "problems": [f"{secret}: not scanned: it is in the skip list"], "end": detect.END_MARK}]
    assert captured.err == f"{secret}: not scanned: it is in the skip list\n"


def _foreign_imports(source: str) -> list[str]:
    """Imports in `source` that are relative or not from the standard library."""
    foreign = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level or (node.module or "").split(".")[0] not in sys.stdlib_module_names:
                foreign.append("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            foreign += [alias.name for alias in node.names if alias.name.split(".")[0] not in sys.stdlib_module_names]
    return foreign


def test_detect_imports_only_the_standard_library() -> None:
    """detect.py is copied alone into sandboxes, so it imports only the standard library; the
    checker itself flags package and relative imports (the control)."""
    assert _foreign_imports(DETECT_PY.read_text()) == []
    sample = "import os\nimport canaries.token\nfrom . import errors\nfrom hypothesis import given\n"
    assert _foreign_imports(sample) == ["canaries.token", ".", "hypothesis"]


# --- canaries.scan ------------------------------------------------------------------------------


def test_attribute_pairs_hits_with_their_canary_or_none() -> None:
    """Minted tokens are traced to their canary; canary-shaped strangers are marked foreign."""
    mint = Mint("0123abcd")
    ours = mint.mint("a", "mem")
    data = base64.b64encode(ours.bytes.upper() + b" ") + b" " + KNOWN.encode()
    found = scan_bytes(data, mint, "chat")
    assert found == [
        Attributed(Hit(ours.token, "base64", 0, "chat"), ours),
        Attributed(Hit(KNOWN, "raw", len(data) - len(KNOWN), "chat"), None),
    ]
    assert [item.foreign for item in found] == [False, True]
    assert attribute([], mint) == []


def test_scan_dir_returns_attributed_hits(tmp_path: Path) -> None:
    """scan_dir attributes what it finds under a directory."""
    mint = Mint("0123abcd")
    canary = mint.mint("b", "vol")
    where = _write(tmp_path / "v" / "data", b"k=" + canary.bytes)
    assert scan_dir(tmp_path, mint) == [Attributed(Hit(canary.token, "raw", 2, str(where)), canary)]


def test_scan_dir_raises_when_it_could_not_read_everything(tmp_path: Path) -> None:
    """An incomplete scan raises, so "no hits" never means "could not look"; hits found so far
    travel with the error."""
    mint = Mint("0123abcd")
    canary = mint.mint("b", "vol")
    _write(tmp_path / "big", canary.bytes + b" " * 100)
    with pytest.raises(IncompleteScanError) as incomplete:
        scan_dir(tmp_path, mint, max_file_bytes=64)
    assert [item.canary for item in incomplete.value.found] == [canary]
    assert len(incomplete.value.problems) == 1
    assert "max_file_bytes" in str(incomplete.value)


def test_a_scan_must_be_told_its_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scan looks for one run's tokens: before it is told which, it refuses (naming the fix) rather than find
    nothing; a bad run id is refused by name; another run's token is not this run's hit."""
    monkeypatch.setattr(detect, "_T", None)
    with pytest.raises(RuntimeError, match=r"use_run\(RUN\)"):
        detect.find(KNOWN.encode())
    with pytest.raises(ValueError, match="'0123ABCD' is not 8 lowercase hex"):
        detect.use_run("0123ABCD")
    detect.use_run("89abcdef")
    assert detect.find(KNOWN.encode()) == []
    detect.use_run(TEST_RUN)
    assert [hit.token for hit in detect.find(KNOWN.encode())] == [KNOWN]
