"""``pairproof scan`` (the CLI, run as a subprocess) with the static probe as its engine, on generated corpora.

Every planted token is found, in every encoding the probe decodes (raw in any case; standard and url-safe
base64 at every alignment, also line-wrapped; hex in either case; percent; JSON ``\\u`` escapes; DNS labels),
inside gzip, zlib, zstd, xz and bz2 streams and tar and zip members, nested; each hit names its encoding and
the layer it was in. A corpus of near misses (a token one character short or long, another run's id, a non-hex
character, a group of the wrong length, a dash dropped, broken base64 alignment, a broken hex or percent escape) gives no hit
at all and exit code 0. Bad input is exit code 2 with one line on stderr. The token shape is
``canaries.token``'s (``detect.token_pattern``: a version-4 UUID whose first group is the run id; every scan here
looks for tests/support/tokens.TEST_RUN); tests/vectors/ holds the byte-level parity vectors.
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
import subprocess
import sys
import tarfile
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.tokens import TEST_RUN, token

from canaries import detect

REPO = Path(__file__).resolve().parents[3]
HEX = "0123456789abcdef"
ALNUM = "0123456789abcdefghijklmnopqrstuvwxyz"
NOT_HEX = "ghijklmnopqrstuvwxyz"




def pairproof_scan(probe: Path | str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PAIRPROOF_PROBE": str(probe)}
    return subprocess.run([sys.executable, "-m", "acceptance.cli", "scan", "--run", TEST_RUN, *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def parsed(done: subprocess.CompletedProcess[str], probe: Path) -> tuple[list[dict], dict]:
    """The --json output: every line parses; hits first, the completeness record (naming the engine) last."""
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    summary = lines[-1]
    assert summary["end"] == detect.END_MARK and summary["engine"] == f"static probe {probe}"
    for hit in lines[:-1]:
        assert set(hit) == {"token", "encoding", "offset", "where"}
    return lines[:-1], summary


# -- tokens and their encodings ---------------------------------------------------------------------------

@st.composite
def tokens(draw: st.DrawFn) -> str:
    """A token of the test run, as ``canaries.token.Mint`` makes them (any hex in its four groups)."""
    groups = [draw(st.text(HEX, min_size=size, max_size=size)) for size in (4, 4, 4, 12)]
    token = "-".join([TEST_RUN, *groups])
    assert detect.token_pattern(TEST_RUN).fullmatch(token.encode())
    return token


def _wrap(blob: bytes, width: int, newline: bytes) -> bytes:
    return newline.join(blob[i:i + width] for i in range(0, len(blob), width))


@dataclass(frozen=True)
class Form:
    """A way to write a token as text, the encoding the probe must name for it, and whether it keeps the token's
    case (base64 and hex are found for a token in lower or upper case, raw in any mix)."""

    name: str
    encoding: str
    write: Callable[[bytes, st.DrawFn], bytes]
    any_case: bool = False


def _escaped(token: bytes, draw: st.DrawFn, escape: Callable[[int, bool], bytes]) -> bytes:
    """``token`` with a drawn, non-empty set of its characters escaped, hex digits in a drawn case."""
    chosen = draw(st.sets(st.integers(0, len(token) - 1), min_size=1))
    upper = draw(st.booleans())
    return b"".join(escape(c, upper) if i in chosen else bytes([c]) for i, c in enumerate(token))


def _percent(c: int, upper: bool) -> bytes:
    return (b"%%%02X" if upper else b"%%%02x") % c


def _json(c: int, upper: bool) -> bytes:
    return (b"\\u%04X" if upper else b"\\u%04x") % c


def _dns(token: bytes, draw: st.DrawFn, within: int | None = None) -> bytes:
    """``token`` cut into labels: dots anywhere after its prefix (at most one inside the prefix, as the probe
    documents), never two together. ``within`` keeps the dots before that index."""
    end = within if within is not None else len(token)
    cuts = draw(st.sets(st.integers(9, end - 1), min_size=0, max_size=3))
    if draw(st.booleans()) or not cuts:
        cuts.add(draw(st.integers(1, 8)))
    out, last = [], 0
    for cut in sorted(cuts):
        out.append(token[last:cut])
        last = cut
    out.append(token[last:])
    return b".".join(out) + b".lab.example"


FORMS = (
    Form("raw", "raw", lambda t, d: t, any_case=True),
    Form("base64 at alignment 0", "base64", lambda t, d: base64.b64encode(t)),
    Form("base64 at alignment 1", "base64", lambda t, d: base64.b64encode(d(st.binary(min_size=1, max_size=1)) + t)),
    Form("base64 at alignment 2", "base64", lambda t, d: base64.b64encode(d(st.binary(min_size=2, max_size=2)) + t)),
    Form("base64 line-wrapped", "base64", lambda t, d: _wrap(
        base64.b64encode(d(st.binary(min_size=0, max_size=60)) + t), d(st.sampled_from((76, 64, 20))),
        d(st.sampled_from((b"\n", b"\r\n"))))),
    # The bytes after it make the run show "-" or "_": only then is it told from standard base64.
    Form("url-safe base64", "base64url", lambda t, d: base64.urlsafe_b64encode(
        d(st.binary(min_size=0, max_size=2)) + t + b"\xfb\xff\xfe")),
    Form("hex, lower digits", "hex", lambda t, d: binascii.hexlify(t)),
    Form("hex, upper digits", "hex", lambda t, d: binascii.hexlify(t).upper()),
    Form("percent", "percent", lambda t, d: _escaped(t, d, _percent)),
    Form("JSON \\u escapes", "json-escape", lambda t, d: b'"' + _escaped(t, d, _json) + b'"'),
    Form("DNS labels", "dns-labels", lambda t, d: _dns(t, d), any_case=True),
)


# -- layers: a stream or archive around the bytes, and the suffix the probe adds to the hit's where ----------

def _tar(name: str, content: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo(name)
        info.size = len(content)
        archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def _zip(name: str, content: bytes, method: int) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as archive:
        archive.writestr(name, content)
    return buffer.getvalue()


@dataclass(frozen=True)
class Layer:
    name: str
    pack: Callable[[bytes], bytes]
    # The suffix of the hit's where, given the suffix inside. A member stored as it is (a tar member, a stored
    # zip member) holding plain text is found in the archive's own bytes: no suffix of its own.
    suffix: Callable[[str], str]


def _stream(kind: str, pack: Callable[[bytes], bytes]) -> Layer:
    return Layer(kind, pack, lambda inner: f" ({kind})" + inner)


LAYERS = (
    _stream("gzip", gzip.compress),
    _stream("zlib", zlib.compress),
    _stream("zstd", lambda b: zstandard.ZstdCompressor().compress(b)),
    _stream("xz", lzma.compress),
    _stream("bz2", bz2.compress),
    Layer("tar", lambda b: _tar("dir/member.bin", b), lambda inner: inner and " (member dir/member.bin)" + inner),
    Layer("zip", lambda b: _zip("member.txt", b, zipfile.ZIP_DEFLATED), lambda inner: " (member member.txt)" + inner),
    Layer("zip stored", lambda b: _zip("stored.txt", b, zipfile.ZIP_STORED),
          lambda inner: inner and " (member stored.txt)" + inner),
)


def packed(data: bytes, layers: list[Layer]) -> tuple[bytes, str]:
    """``data`` inside ``layers`` (innermost first) and the suffix the hit's where must end with."""
    suffix = ""
    for layer in layers:
        data, suffix = layer.pack(data), layer.suffix(suffix)
    return data, suffix


def in_text(encoded: bytes, before: bytes, after: bytes) -> bytes:
    """The encoded token between unrelated text, a line break and a space on each side: the text cannot touch it
    (base64 is also read across line breaks, so a break alone would let the text after it continue the run)."""
    return before + b"\n " + encoded + b" \n" + after


# -- every encoding, every layer: one generated corpus, one run --------------------------------------------

CHAINS = ([], *([layer] for layer in LAYERS), [LAYERS[0], LAYERS[5]], [LAYERS[6], LAYERS[5], LAYERS[0]],
          [LAYERS[2], LAYERS[6]], [LAYERS[5], LAYERS[3]], [LAYERS[1], LAYERS[7], LAYERS[4]])


def _planted(token: str, upper: bool) -> bytes:
    return (token.upper() if upper else token).encode()


@pytest.mark.parametrize("form", FORMS, ids=[form.name for form in FORMS])
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                               HealthCheck.large_base_example, HealthCheck.too_slow])
@given(data=st.data())
def test_every_encoding_in_every_layer_is_found_and_named(probe, tmp_path_factory, form, data):
    """One file per chain of layers (none, each stream and archive alone, nested ones), each with its own token
    in this encoding, all scanned in one run: each token is found with its encoding and the layer path it was
    in, no other token is found, and the exit code is 1."""
    folder = tmp_path_factory.mktemp("corpus")
    expected = {}
    for c, chain in enumerate(CHAINS):
        token = data.draw(tokens())
        text = form.write(_planted(token, data.draw(st.booleans())), data.draw)
        blob, suffix = packed(in_text(text, b"lead text", b"trailing text"), list(chain))
        path = folder / f"c{c}.bin"
        path.write_bytes(blob)
        expected[token] = (form.encoding, f"{path}{suffix}")
    done = pairproof_scan(probe, str(folder), "--json")
    assert done.returncode == 1, done.stderr
    hits, summary = parsed(done, probe)
    assert summary["scanned_files"] == len(CHAINS) and summary["truncated"] == summary["errors"] == 0
    seen = {(hit["token"], hit["encoding"], hit["where"]) for hit in hits}
    missing = {token: want for token, want in expected.items() if (token, *want) not in seen}
    assert missing == {}
    assert {hit["token"] for hit in hits} == set(expected)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), token=tokens(), form=st.sampled_from(FORMS),
       chain=st.lists(st.sampled_from(LAYERS), max_size=3),
       before=st.binary(max_size=300), after=st.binary(max_size=300))
def test_a_token_in_any_encoding_and_layers_is_found(probe, tmp_path, data, token, form, chain, before, after):
    """A token written in a drawn encoding and case, between drawn bytes, inside a drawn chain of streams and
    archives, is found by ``pairproof scan`` with its encoding and layer path; exit code 1."""
    folder = tmp_path / "one"
    folder.mkdir(exist_ok=True)
    path = folder / "blob"
    if form.any_case:
        planted = "".join(c.upper() if data.draw(st.booleans()) else c for c in token).encode()
    else:
        planted = _planted(token, data.draw(st.booleans()))
    blob, suffix = packed(in_text(form.write(planted, data.draw), before, after), chain)
    path.write_bytes(blob)
    done = pairproof_scan(probe, str(path), "--json")
    assert done.returncode == 1, done.stderr
    hits, _ = parsed(done, probe)
    assert (token, form.encoding, f"{path}{suffix}") in {(h["token"], h["encoding"], h["where"]) for h in hits}
    assert {h["token"] for h in hits} == {token}


# -- near misses: nothing is found ------------------------------------------------------------------------

def _replace(token: str, at: int, char: str) -> str:
    return token[:at] + char + token[at + 1:]


@st.composite
def near_tokens(draw: st.DrawFn) -> str:
    """A token broken in one way the shape forbids (it must not be a hit in any encoding)."""
    token = draw(tokens())
    how = draw(st.sampled_from(("short", "long", "run", "not-hex", "group", "dash")))
    if how == "short":  # one character short
        return token[:-1]
    if how == "long":  # a last group of 13 hex digits
        return token + draw(st.sampled_from(HEX))
    if how == "run":  # another run's id: a digit changed, dropped or doubled
        at = draw(st.integers(0, 7))
        change = draw(st.sampled_from(("swap", "drop", "double")))
        if change == "swap":
            return _replace(token, at, draw(st.sampled_from([c for c in HEX if c != token[at]])))
        if change == "drop":
            return token[:at] + token[at + 1:]
        at = max(at, 1)  # "00123abcd-" holds "0123abcd-": double a digit after the first
        return token[:at] + token[at] + token[at:]
    if how == "not-hex":  # a non-hex character anywhere but a dash
        at = draw(st.sampled_from([i for i, c in enumerate(token) if c != "-"]))
        return _replace(token, at, draw(st.sampled_from(NOT_HEX)))
    if how == "group":  # a group after the run id one digit short
        at = draw(st.sampled_from([9, 14, 19, 24]))
        return token[:at] + token[at + 1:]
    at = draw(st.sampled_from([8, 13, 18, 23]))  # a dash dropped
    return token[:at] + token[at + 1:]


@st.composite
def broken_encodings(draw: st.DrawFn) -> bytes:
    """A well-formed token in an encoding broken in one way: base64 decoded out of alignment or with a character
    lost inside the token, hex shifted by a nibble or with a non-hex digit, a percent escape broken."""
    token = draw(tokens()).encode()
    how = draw(st.sampled_from(("b64-shift", "b64-lost", "hex-shift", "hex-digit", "percent")))
    if how == "b64-shift":  # 1 to 3 characters dropped in front: 6, 12 or 18 bits, never a byte boundary
        return base64.b64encode(token)[draw(st.integers(1, 3)):]
    if how == "b64-lost":  # a character inside the token's encoding lost (what comes after is shifted)
        encoded = base64.b64encode(token)
        at = draw(st.integers(14, len(encoded) - 8))
        return encoded[:at] + encoded[at + 1:]
    if how == "hex-shift":
        return binascii.hexlify(token)[1:]
    if how == "hex-digit":  # a digit of the hex replaced by a letter that is no hex digit
        encoded = binascii.hexlify(token)
        at = draw(st.integers(0, len(encoded) - 1))
        return encoded[:at] + draw(st.sampled_from(NOT_HEX)).encode() + encoded[at + 1:]
    escaped = b"".join(b"%%%02x" % c for c in token)  # one escape's second digit made no hex digit
    at = 3 * draw(st.integers(0, len(token) - 1)) + 2
    return escaped[:at] + draw(st.sampled_from(NOT_HEX)).encode() + escaped[at + 1:]


@st.composite
def near_misses(draw: st.DrawFn) -> bytes:
    if draw(st.booleans()):
        return draw(broken_encodings())
    token = draw(near_tokens()).encode()
    form = draw(st.sampled_from([f for f in FORMS if f.name != "DNS labels"] + ["dns"]))
    if form == "dns":  # cut outside its last 17 characters: a label ending before a 17th hex digit ends a token
        return _dns(token, draw, within=len(token) - 17)
    return form.write(token, draw)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(misses=st.lists(near_misses(), min_size=1, max_size=6), chain=st.lists(st.sampled_from(LAYERS), max_size=2))
def test_near_misses_give_no_hit_and_exit_0(probe, tmp_path, misses, chain):
    """Near misses of every kind, in any encoding and layers, give no hit: exit code 0, nothing reported."""
    path = tmp_path / "near"
    blob, _ = packed(b"".join(in_text(m, b"..", b"..") for m in misses), chain)
    path.write_bytes(blob)
    done = pairproof_scan(probe, str(path), "--json")
    hits, summary = parsed(done, probe)
    assert (done.returncode, hits) == (0, [])
    assert summary["scanned_files"] == 1 and summary["errors"] == 0


def test_near_miss_corpus_of_the_vectors_gives_no_hit(probe, tmp_path):
    """The near misses of tests/vectors/ (every one of them written there on purpose) give no hit."""
    vectors = (REPO / "tests" / "vectors" / "canaries.bin").read_bytes()
    near = [part for part in vectors.split(b"\n== ") if part.startswith((b"near ", b"prefix alone"))]
    assert len(near) >= 10
    for n, part in enumerate(near):
        (tmp_path / f"near{n}").write_bytes(part.split(b" ==\n", 1)[1])
        (tmp_path / f"near{n}.gz").write_bytes(gzip.compress(part.split(b" ==\n", 1)[1]))
    done = pairproof_scan(probe, str(tmp_path), "--json")
    hits, summary = parsed(done, probe)
    assert (done.returncode, hits, summary["scanned_files"]) == (0, [], 2 * len(near))


# -- exit codes and bad input -----------------------------------------------------------------------------

def test_exit_codes_and_one_line_for_bad_input(probe, tmp_path):
    """0 nothing found, 1 found, 2 bad input with one line on stderr and nothing on stdout."""
    (tmp_path / "clean").write_text("nothing here\n")
    (tmp_path / "found").write_text(token("found") + "\n")
    assert pairproof_scan(probe, str(tmp_path / "clean")).returncode == 0
    assert pairproof_scan(probe, str(tmp_path / "found")).returncode == 1
    not_a_probe = tmp_path / "not-a-probe"
    not_a_probe.write_text("")
    for done in (pairproof_scan(probe, str(tmp_path / "absent")), pairproof_scan(not_a_probe, str(tmp_path / "clean"))):
        assert done.returncode == 2 and done.stdout == ""
        assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("pairproof: ")
