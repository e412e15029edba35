"""Unit tests for canaries.scan.find_at_rest: stored bytes opened layer by layer, each layer on its own,
nested, behind a header, within bounds; a bound that cuts the scan is a problem, damaged data is not."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import tarfile
import zipfile
import zlib

import pytest
import zstandard

from canaries import Mint
from canaries.errors import IncompleteScanError
from canaries.scan import find_at_rest, scan_at_rest

MINT = Mint("0123abcd")
TOKEN = MINT.mint("a", "mem").token
IN_NAME = MINT.mint("a", "vol").token


def tar(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def zipped(files: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as archive:
        for name, content in files.items():
            archive.writestr(name, content)
    return buffer.getvalue()


COMPRESSORS = {
    "zstd": lambda b: zstandard.ZstdCompressor(level=3).compress(b),
    "gzip": gzip.compress,
    "zlib": zlib.compress,
    "xz": lzma.compress,
    "lzma": lambda b: lzma.compress(b, format=lzma.FORMAT_ALONE),
    "bz2": bz2.compress,
}
VOLUME = tar({"./memory.md": b"my locker code is " + TOKEN.encode(), f"./files/{IN_NAME}.txt": b"x"})


@pytest.mark.parametrize("kind", sorted(COMPRESSORS))
def test_each_compression_is_opened_behind_a_header_and_before_trailing_bytes(kind: str) -> None:
    """A compressed tar behind a store's own header (and random bytes after it) is opened; the canary in a
    member and the one in a member's name are both found, each under the layer path that holds it."""
    blob = b"PPSNAP1\n" + os.urandom(64) + COMPRESSORS[kind](VOLUME) + os.urandom(33)
    scan = find_at_rest(blob, "snap")
    assert {TOKEN, IN_NAME} <= scan.tokens
    assert any(f"snap > {kind}@72" in h.where and "tar@0:./memory.md" in h.where for h in scan.hits if h.token == TOKEN)
    assert scan.problems == []


@pytest.mark.parametrize("method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
def test_zip_members_and_names_are_scanned(method: int) -> None:
    scan = find_at_rest(zipped({"memory.md": TOKEN.encode(), f"{IN_NAME}/x": b""}, method))
    assert {TOKEN, IN_NAME} <= scan.tokens and scan.problems == []


def test_layers_nest_recursively_and_each_is_listed() -> None:
    """zip > gzip > tar > xz > the canary, base64-encoded at the bottom: every layer is opened and listed."""
    import base64

    inner = tar({"deep.bin": lzma.compress(base64.b64encode(b"..." + TOKEN.encode()))})
    scan = find_at_rest(zipped({"backup.tgz": gzip.compress(inner)}), "b")
    assert TOKEN in scan.tokens
    assert {h.encoding for h in scan.hits if h.token == TOKEN} == {"base64"}
    assert any("xz@" in layer.path for layer in scan.layers)
    assert scan.bytes_scanned == sum(layer.size for layer in scan.layers)


def test_encrypted_or_random_bytes_hold_nothing_and_the_scan_says_what_it_tried() -> None:
    scan = find_at_rest(os.urandom(1 << 20))
    assert scan.tokens == set() and scan.problems == [] and scan.bytes_scanned == 1 << 20
    assert len(scan.layers) == 1


def test_a_bound_that_cuts_a_layer_is_a_problem_and_what_came_out_is_still_scanned() -> None:
    blob = zlib.compress(TOKEN.encode() + b"\0" * 100000)
    scan = find_at_rest(blob, max_expanded_bytes=1000)
    assert TOKEN in scan.tokens
    assert scan.problems and "bound" in scan.problems[0]
    with pytest.raises(IncompleteScanError) as raised:
        scan_at_rest(gzip.compress(TOKEN.encode() + b"\0" * 1000), MINT, max_expanded_bytes=100)
    assert [a.canary.token for a in raised.value.found if a.canary] == [TOKEN]


def test_depth_bound_is_a_problem_when_the_last_layer_still_looks_packed() -> None:
    blob = TOKEN.encode()
    for _ in range(4):
        blob = bz2.compress(blob)
    scan = find_at_rest(blob, max_depth=2)
    assert TOKEN not in scan.tokens and scan.problems


def test_truncated_stream_is_scanned_as_far_as_it_decodes_and_listed_as_damaged() -> None:
    data = TOKEN.encode() + b"".join(i.to_bytes(4, "big") for i in range(100000))
    blob = gzip.compress(data)
    blob = blob[:len(blob) // 2]
    scan = find_at_rest(blob)
    assert TOKEN in scan.tokens and scan.partial and scan.problems == []


def test_scan_at_rest_attributes_hits_to_the_mint() -> None:
    found = scan_at_rest(bz2.compress(VOLUME), MINT)
    assert {a.canary.token for a in found if a.canary} == {TOKEN, IN_NAME}
