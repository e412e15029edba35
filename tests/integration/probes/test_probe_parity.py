"""Parity: the static probe (probe/ppscan.c, built by tools/build-probe) against canaries/detect.py.

Both run on the same trees built from tests/vectors/canaries.bin (every encoding detect.py knows,
boundaries, near misses), placed so tokens cross the 1 MiB read chunks and the max-file-bytes cut,
plus names, link targets, fifos, missing paths and skip lists. stdout and stderr must be the same
bytes. Each case also checks the reference finds what it should, so two blind scanners cannot agree
their way to a pass.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import pathlib
import random
import shutil
import subprocess
import sys

import pytest
from support.tokens import TEST_RUN, token

REPO = pathlib.Path(__file__).resolve().parents[3]
DETECT_PY = REPO / "canaries" / "detect.py"
VECTORS = REPO / "tests" / "vectors" / "canaries.bin"
CHUNK = 1 << 20
TOKEN = token("parity").encode()  # of TEST_RUN, the run every scan here looks for (the vectors' too)




def run_both(probe: pathlib.Path, *args: str) -> tuple[list[dict], str]:
    args = ("--run", TEST_RUN, *args)
    reference = subprocess.run([sys.executable, "-I", str(DETECT_PY), *args], capture_output=True, timeout=600)
    static = subprocess.run([str(probe), "--run", TEST_RUN, *args], capture_output=True, timeout=600)
    assert static.returncode == reference.returncode == 0, static.stderr.decode(errors="replace")
    assert static.stdout == reference.stdout, _first_difference(reference.stdout, static.stdout)
    assert static.stderr == reference.stderr
    lines = reference.stdout.decode().splitlines()
    summary = json.loads(lines[-1])
    assert summary["end"] == "pairproof-scan-end"
    return [json.loads(line) for line in lines[:-1]], reference.stderr.decode()


def _first_difference(want: bytes, got: bytes) -> str:
    for number, (a, b) in enumerate(zip(want.splitlines(), got.splitlines())):
        if a != b:
            return f"line {number}: detect.py {a!r} != ppscan {b!r}"
    return f"detect.py has {len(want.splitlines())} lines, ppscan {len(got.splitlines())}"


def test_vectors_file_same_hits(probe, tmp_path):
    (tmp_path / "canaries.bin").write_bytes(VECTORS.read_bytes())
    hits, _ = run_both(probe, str(tmp_path))
    encodings = {hit["encoding"] for hit in hits}
    assert encodings == {"raw", "base64", "base64url", "hex"}
    assert len(hits) >= 45  # what the vectors plant; near misses add none
    assert not any(hit["token"].endswith("g") for hit in hits)


def test_tokens_crossing_read_chunks(probe, tmp_path):
    data = VECTORS.read_bytes()
    # The vector block slides across the first chunk boundary a byte at a time near tokens' lengths.
    for shift in [*range(0, 140, 7), 255, 511, 512, 513, 527, 528, 529, 1000, 4000, len(data)]:
        (tmp_path / f"at-{shift:05d}").write_bytes(b"x" * (CHUNK - shift) + data + b"y" * 3)
    hits, _ = run_both(probe, str(tmp_path))
    assert len({hit["where"] for hit in hits}) == 30  # every placement is found


def test_max_file_bytes_cut(probe, tmp_path):
    data = VECTORS.read_bytes()
    (tmp_path / "big").write_bytes(data * 3)
    (tmp_path / "exact").write_bytes(data[:1000])
    for limit in ("1", "999", "1000", "4096", str(len(data) + 17)):
        _, problems = run_both(probe, "--max-file-bytes", limit, str(tmp_path))
        assert "only the first" in problems


def test_tree_names_links_and_what_is_not_read(probe, tmp_path):
    root = tmp_path / "root"
    (root / "d" / TOKEN.decode()).mkdir(parents=True)
    (root / "d" / TOKEN.decode() / "f").write_bytes(base64.b64encode(b"." + TOKEN))
    (root / "link").symlink_to(TOKEN.decode())
    (root / "dirlink").symlink_to("d")
    (root / "skipme").mkdir()
    (root / "skipme" / "f").write_bytes(TOKEN)
    os.mkfifo(root / "fifo")
    (root / "\u00fcnic\u00f8de-x").write_bytes(binascii.hexlify(TOKEN).upper())
    (root / "e").write_bytes(b"")
    hits, problems = run_both(
        probe, "--skip", str(root / "skipme"), str(root), str(root / "link"), str(tmp_path / "missing"),
        "/sys/kernel", "/proc/self/status", str(root / "skipme"), str(root / "fifo"),
    )
    wheres = {hit["where"] for hit in hits}
    assert f"{root}/link (link target)" in wheres and f"{root}/d/{TOKEN.decode()} (name)" in wheres
    assert not any("skipme" in where for where in wheres)
    for reason in ("vanished", "/sys is never entered", "of /proc only", "skip list", "not a regular file", "symbolic link"):
        assert reason in problems


def test_random_alphabet_soup(probe, tmp_path):
    """Dense base64/hex-alphabet noise with tokens in every encoding at random places."""
    rng = random.Random(1414)
    for number in range(4):
        parts = []
        for _ in range(400):
            noise = bytes(rng.choice(b"ABCDEFabcdef0123456789+/-_=\n\r pP") for _ in range(rng.randrange(0, 300)))
            body = bytes(rng.randrange(256) for _ in range(rng.randrange(3))) + TOKEN
            form = rng.choice([lambda b: b, base64.b64encode, base64.urlsafe_b64encode, binascii.hexlify,
                               lambda b: binascii.hexlify(b).upper(), lambda b: b.upper()])
            parts.append(noise + form(body))
        (tmp_path / f"soup-{number}").write_bytes(b"".join(parts) * 2)
    hits, _ = run_both(probe, str(tmp_path))
    assert len(hits) > 1000


@pytest.mark.parametrize("isa", ["sse2", "avx2", "avx512bw", "vbmi"])
def test_base64_cut_by_line_breaks(probe, tmp_path, monkeypatch, isa):
    """Base64 cut by breaks of every kind at every place, between lines of words that end and start
    with base64 characters: the probe finds the cut anchors apart from Hyperscan, with a vector pass
    per instruction set (PPSCAN_ISA picks one; a CPU without it runs the next narrower)."""
    monkeypatch.setenv("PPSCAN_ISA", isa)
    rng = random.Random(1415)
    # Words of the prefix's own base64 (either case, three alignments), so the cuts fall among look-alikes.
    words = [b"the", b"x", *{blob[at:at + size] for text in (TEST_RUN, TEST_RUN.upper()) for lead in range(3)
                             for blob in [base64.b64encode(bytes(lead) + text.encode() + b"-")]
                             for size in (2, 3, 4, 5) for at in range(0, len(blob) - size, 3)}]
    words.sort()
    breaks = [b"\n", b"\r\n", b"\r", b"\n\n", b"\r\r\n", b"\n\r"]
    for number in range(3):
        parts = []
        for _ in range(300):
            parts.append(b" ".join(rng.choice(words) for _ in range(rng.randrange(1, 12))) + rng.choice(breaks))
            lead = bytes(rng.randrange(256) for _ in range(rng.randrange(4)))
            token = TOKEN.upper() if rng.random() < 0.3 else TOKEN
            blob = rng.choice([base64.b64encode, base64.urlsafe_b64encode])(lead + token)
            width = rng.choice([0, 1, 2, 3, 5, 11, 64, 76])
            if width:
                cut = [blob[at:at + width] for at in range(rng.randrange(width), len(blob), width)]
                blob = blob[: len(blob) - sum(map(len, cut))] + b"".join(piece + rng.choice(breaks) for piece in cut)
            parts.append(blob)
        (tmp_path / f"wrapped-{number}").write_bytes(b"".join(parts))
    hits, _ = run_both(probe, str(tmp_path))
    assert len(hits) > 600


def test_runs_in_a_root_with_nothing_but_itself(probe, tmp_path):
    """No Python, no shell, no libc: a root holding only the binary and data is scanned correctly."""
    if os.geteuid() != 0:
        raise RuntimeError("this test needs root to chroot (the suite's runtime needs root anyway)")
    root = tmp_path / "bare"
    (root / "data").mkdir(parents=True)
    (root / "ppscan").write_bytes(probe.read_bytes())
    (root / "ppscan").chmod(0o755)
    (root / "data" / "f").write_bytes(base64.b64encode(b"xy" + TOKEN) + b"\n" + binascii.hexlify(TOKEN))
    assert sorted(path.name for path in root.rglob("*")) == ["data", "f", "ppscan"]
    chroot = shutil.which("chroot") or "/usr/sbin/chroot"
    done = subprocess.run([chroot, str(root), "/ppscan", "--run", TEST_RUN, "/data"], capture_output=True, timeout=60, env={})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    hits = [json.loads(line) for line in lines[:-1]]
    assert [(hit["encoding"], hit["token"], hit["where"]) for hit in hits] == [
        ("base64", TOKEN.decode(), "/data/f"), ("hex", TOKEN.decode(), "/data/f")]
    assert json.loads(lines[-1])["scanned_files"] == 1


@pytest.mark.parametrize("isa", ["sse2", "native"])
def test_escapes_and_labels_both_find(probe, tmp_path, monkeypatch, isa):
    """Percent-encoding, JSON \\u escapes, DNS labels (any number of dots, the prefix's too): both find them,
    byte for byte. JSON escapes are looked for apart from Hyperscan, by memchr (sse2) or a vector loop (native)."""
    if isa != "native":
        monkeypatch.setenv("PPSCAN_ISA", isa)
    text = TOKEN.decode()
    forms = {
        "percent": "".join(f"%{ord(c):02X}" for c in text),
        "percent-partial": text[:2] + f"%{ord(text[2]):02x}" + text[3:],
        "percent-late": text[:9] + f"%{ord(text[9]):02x}" + text[10:],
        "json": json.dumps(text.upper()).replace("A", "\\u0041", 1).strip('"'),
        "json-all": "".join(f"\\u{ord(c):04x}" for c in text),
        "dns": f"{text[:20]}.{text[20:]}.evil.example",
        "dns-in-prefix": f"{text[:5]}.{text[5:30]}.{text[30:]}".upper(),
        "dns-two-dots-in-prefix": f"{text[:4]}.{text[4:6]}.{text[6:]}",
        "dns-every-two": ".".join(text[i:i + 2] for i in range(0, len(text), 2)) + ".x.example",
    }
    near = {
        "percent-17-hex": "".join(f"%{ord(c):02x}" for c in text + "a"),
        "json-non-ascii": text.replace("a", "\\u0170", 1),
        "percent-short": "".join(f"%{ord(c):02x}" for c in text[:2]) + text[2:-1],
        "dns-17-hex": f"{text[:30]}.{text[30:]}a.example",
    }
    for name, body in {**forms, **near}.items():
        (tmp_path / name).write_text(f"<{body}>\n")
    hits, _ = run_both(probe, str(tmp_path))
    # Each form's first hit is the token where it starts; a fully escaped one is also read from inside its first
    # escape ("%30%31..." holds "0" then "%31...": both scanners try every start).
    found: dict[str, list[tuple]] = {}
    for hit in hits:
        found.setdefault(pathlib.Path(hit["where"]).name, []).append((hit["encoding"], hit["token"], hit["offset"]))
    expected_encoding = {name: "percent" if name.startswith("percent") else "json-escape" if name.startswith("json")
                         else "dns-labels" for name in forms}
    assert {name: seen[0] for name, seen in found.items()} == {name: (expected_encoding[name], text, 1) for name in forms}
    assert all(token == text for seen in found.values() for _, token, _ in seen)


@pytest.mark.parametrize("isa", ["sse2", "native"])
def test_a_json_escape_at_every_place_in_a_block(probe, tmp_path, monkeypatch, isa):
    """A token whose only escape is its first character, at each offset of the 64-byte blocks the
    escape search goes through (and past the last whole block): each one is found, at its offset."""
    if isa != "native":
        monkeypatch.setenv("PPSCAN_ISA", isa)
    # A run starting with a letter: the escape of a digit ends with that digit ("\u0030"), which would make
    # the raw token appear too.
    run = "abcd0123"
    text = token("json", run).encode()
    body = b"\\u%04x" % text[0] + text[1:]
    for shift in range(130):
        (tmp_path / f"at-{shift:03d}").write_bytes(b"x" * shift + body + b" " * (200 - shift))
    static = subprocess.run([str(probe), "--run", run, str(tmp_path)], capture_output=True, timeout=60, check=True)
    hits = [json.loads(line) for line in static.stdout.decode().splitlines()[:-1]]
    found = {(pathlib.Path(hit["where"]).name, hit["encoding"], hit["token"], hit["offset"]) for hit in hits}
    assert found == {(f"at-{shift:03d}", "json-escape", text.decode(), shift) for shift in range(130)}


def test_compressed_streams_and_archive_members(probe, tmp_path):
    """gzip, zlib, xz, bz2, zstd streams and tar/zip members, nested: the probe looks inside."""
    import bz2
    import gzip
    import io
    import lzma
    import tarfile
    import zipfile
    import zlib

    plain = b"x " + base64.b64encode(b"." + TOKEN) + b" y\n"
    (tmp_path / "a.gz").write_bytes(gzip.compress(plain))
    (tmp_path / "b.zlib").write_bytes(zlib.compress(plain))
    (tmp_path / "c.xz").write_bytes(lzma.compress(plain))
    (tmp_path / "d.bz2").write_bytes(bz2.compress(plain))
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for name, data in (("inner.bz2", bz2.compress(plain)), ("other", b"nothing here")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (tmp_path / "e.tar.gz").write_bytes(gzip.compress(archive.getvalue()))
    with zipfile.ZipFile(tmp_path / "f.zip", "w", zipfile.ZIP_DEFLATED) as packed:
        packed.writestr("dir/m.txt", plain)
        packed.writestr("n.xz", lzma.compress(plain))
    (tmp_path / "g.gz").write_bytes(gzip.compress(b"no canary in here " * 100))
    (tmp_path / "h.gz").write_bytes(b"\x1f\x8b" + b"not really gzip" * 10)
    zstd = shutil.which("zstd")
    if zstd:
        (tmp_path / "i.txt").write_bytes(plain)
        subprocess.run([zstd, "-q", str(tmp_path / "i.txt"), "-o", str(tmp_path / "i.zst")], check=True)
        (tmp_path / "i.txt").unlink()
    done = subprocess.run([str(probe), "--run", TEST_RUN, str(tmp_path)], capture_output=True, timeout=60, check=True)
    lines = done.stdout.decode().splitlines()
    # A small stream may keep its input verbatim (zstd's raw blocks): that is a hit in the file itself.
    wheres = sorted(where for line in lines[:-1] if " (" in (where := json.loads(line)["where"][len(str(tmp_path)) + 1 :]))
    # A stream inside an archive is found twice: carved from the archive's bytes, and as its member.
    expected = ["a.gz (gzip)", "b.zlib (zlib)", "c.xz (xz)", "d.bz2 (bz2)", "e.tar.gz (gzip) (bz2@512)",
                "e.tar.gz (gzip) (member inner.bz2) (bz2)", "f.zip (member dir/m.txt)",
                "f.zip (member n.xz)",  # an LZMA2 chunk kept uncompressed (this plain text does not shrink)
                "f.zip (member n.xz) (xz)",
                ] + (["i.zst (zstd)"] if zstd else [])
    # The deflated member may keep the xz stream's bytes as they are (they do not shrink): carved from the zip then.
    at = (tmp_path / "f.zip").read_bytes().find(b"\xfd7zXZ\x00")
    expected = sorted(expected + ([f"f.zip (xz@{at})"] if at >= 0 else []))
    assert wheres == expected
    assert {json.loads(line)["token"] for line in lines[:-1]} == {TOKEN.decode()}
    assert json.loads(lines[-1])["errors"] == 0
    # A stream larger than max-file-bytes once decompressed is reported cut short.
    (tmp_path / "big.gz").write_bytes(gzip.compress(b"z" * 5000 + plain))
    cut = subprocess.run([str(probe), "--run", TEST_RUN, "--max-file-bytes", "4096", str(tmp_path / "big.gz")],
                         capture_output=True, timeout=60)
    summary = json.loads(cut.stdout.decode().splitlines()[-1])
    assert summary["truncated"] == 1 and "of the decompressed data were scanned" in summary["problems"][0]


def test_what_it_cannot_look_inside_is_said(probe, tmp_path):
    """Past the depth bound, an encrypted zip member, a zip method it does not read: each is a problem and
    counts as cut short (the scan is then judged incomplete), never a quiet skip that reads as "nothing
    found". bzip2 members of a zip are whole bz2 streams, and are read. Controls: at the bound it finds."""
    import bz2
    import gzip
    import io
    import zipfile

    def nested(levels: int) -> bytes:
        data = b"x " + TOKEN + b"\n"
        for _ in range(levels):
            data = gzip.compress(data)
        return data

    (tmp_path / "five.gz").write_bytes(nested(5))
    (tmp_path / "six.gz").write_bytes(nested(6))
    for name, method in (("bzip2.zip", zipfile.ZIP_BZIP2), ("lzma.zip", zipfile.ZIP_LZMA)):
        with zipfile.ZipFile(tmp_path / name, "w", method) as packed:
            packed.writestr("m.txt", b"x " + TOKEN + b"\n")
    stored = io.BytesIO()
    with zipfile.ZipFile(stored, "w", zipfile.ZIP_STORED) as packed:
        packed.writestr("m.bz2", bz2.compress(b"x " + TOKEN + b"\n"))
    encrypted = bytearray(stored.getvalue())
    encrypted[6] |= 1  # the local header's "encrypted" flag: its bytes are not the member's
    (tmp_path / "encrypted.zip").write_bytes(bytes(encrypted))
    done = subprocess.run([str(probe), "--run", TEST_RUN, str(tmp_path)], capture_output=True, timeout=60, check=True)
    lines = done.stdout.decode().splitlines()
    wheres = sorted(json.loads(line)["where"][len(str(tmp_path)) + 1:] for line in lines[:-1])
    # Carving finds the bzip2 streams in the zips' bytes too (an "encrypted" flag does not hide plain bytes), and
    # each inner gzip stream again where deflate kept it verbatim (a stored block, 15 bytes in).
    assert {"bzip2.zip (bz2@35)", "bzip2.zip (member m.txt) (bz2)", "encrypted.zip (bz2@35)",
            "five.gz" + " (gzip)" * 5} <= set(wheres)
    assert not [where for where in wheres if where.startswith(("lzma.zip", "six.gz (gzip) (gzip) (gzip) (gzip) (gzip)"))]
    summary = json.loads(lines[-1])
    said = sorted(p[len(str(tmp_path)) + 1:] for p in summary["problems"])
    assert said[:3] == [
        "encrypted.zip (member m.bz2): not looked inside: the member is encrypted",
        "lzma.zip (member m.txt): not looked inside: zip compression method 14 is not read",
        "six.gz" + " (gzip)" * 6 + ": not looked inside: packed deeper than the bound of 5 levels"]
    assert all(p.startswith("six.gz") and p.endswith("bound of 5 levels") for p in said[2:])
    assert summary["truncated"] == summary["errors"] == len(said)


SECCOMP_EIO_C = r"""
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
/* Run argv[1:] with every getdents64 failing with EIO: a folder that opens but cannot be listed. */
int main(int argc, char **argv) {
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_getdents64, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EIO),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof f / sizeof *f, f};
    if (argc < 2 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) return 111;
    execv(argv[1], argv + 1);
    return 112;
}
"""


def test_a_folder_whose_listing_fails_is_said_not_read_as_empty(probe, tmp_path):
    """readdir's failure used to end the listing quietly: a folder that could not be listed read as an empty
    one, and /proc as a pid namespace without processes. Each is a problem now (os.walk's onerror)."""
    wrapper = tmp_path / "eio"
    (tmp_path / "eio.c").write_text(SECCOMP_EIO_C)
    subprocess.run(["gcc", "-O1", "-o", str(wrapper), str(tmp_path / "eio.c")], check=True, capture_output=True)
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "planted").write_bytes(TOKEN)
    control = subprocess.run([str(probe), "--run", TEST_RUN, str(tree)], capture_output=True, timeout=60, check=True)
    assert json.loads(control.stdout.splitlines()[-1])["scanned_files"] == 1
    done = subprocess.run([str(wrapper), str(probe), "--run", TEST_RUN, str(tree), "/proc"], capture_output=True,
                          timeout=60, check=True)
    summary = json.loads(done.stdout.splitlines()[-1])
    assert summary["problems"] == [f"{tree}: Input/output error [EIO]", "/proc: Input/output error [EIO]"]
    assert summary["scanned_files"] == 0


def test_tokens_at_the_report_horizon(probe, tmp_path):
    """A window reports hits before its horizon (its end less the overlap); the next starts a little before
    that (the backup), so a token whose decoding starts before the horizon but whose offset is past it is
    still read whole. Each encoding, at each base64 alignment, is placed with its offset a few bytes either
    side of the first horizon (and of a line-wrapped run's): every file must show its token."""
    horizon = CHUNK - 512
    placed = 0
    for lead in range(3):
        payload = b"\x00" * lead + TOKEN
        forms = {"b64": base64.b64encode(payload), "url": base64.urlsafe_b64encode(b"\xfb" * lead + TOKEN),
                 "wrapped": b"\r\n".join(base64.b64encode(payload)[i:i + 3] for i in range(0, 64, 3)),
                 "hex": binascii.hexlify(payload), "raw": payload}
        for name, form in forms.items():
            for delta in range(-4, 5):
                offset = horizon + delta - lead * (2 if name == "hex" else 1)  # the form starts before the token
                (tmp_path / f"{name}-{lead}-{delta + 4}").write_bytes(b"." * offset + form + b"." * 900)
                placed += 1
    hits, _ = run_both(probe, str(tmp_path))
    assert len({hit["where"] for hit in hits if hit["token"] == TOKEN.decode()}) == placed


FORMS_VECTORS = REPO / "tests" / "vectors" / "forms.bin"


def test_issue_26_forms_same_hits(probe, tmp_path):
    """Issue 26's forms (tests/vectors/forms.bin: UTF-16, hex with separators, base32, HTML references,
    quoted-printable, DNS labels, base64 of base64, streams starting inside the file, near misses): byte for
    byte the same, whole and placed across the 1 MiB read boundary."""
    data = FORMS_VECTORS.read_bytes()
    (tmp_path / "forms.bin").write_bytes(data)
    for shift in (0, 100, 2000, 5200, len(data)):
        (tmp_path / f"at-{shift:05d}").write_bytes(b"x" * (CHUNK - shift) + data + b"y" * 3)
    hits, problems = run_both(probe, str(tmp_path))
    mine = [hit for hit in hits if hit["where"].startswith(str(tmp_path / "forms.bin"))]
    assert {hit["encoding"] for hit in mine} == {"utf-16", "hex-sep", "base32", "html-entity", "quoted-printable",
                                                  "dns-labels", "base64-base64", "raw", "base64"}
    assert {hit["where"][len(str(tmp_path / "forms.bin")):].split("@")[0] for hit in mine} == {
        "", " (gzip", " (zlib", " (xz", " (bz2", " (base64"}
    assert len(mine) >= 50 and problems == ""
    assert len(hits) == 6 * len(mine)  # every placement finds them all


def test_a_token_glued_after_an_escape_introducer(probe, tmp_path):
    """A run id starts with hex digits, so "key=<token>" or "?id=<token>" reads "=01" or "%01" as an escape when
    decoded left to right, and a token with an escape inside was missed by both scanners (the review's find). Each
    is found at the token's first byte; so is a \\U (capital) JSON escape, which ppscan did not read."""
    text = TOKEN.decode()
    forms = {
        "percent-after-equals": ("KEY=" + text[:8] + "%2D" + text[9:], "percent", 4),
        "percent-after-percent": ("100%" + text[:8] + "%2d" + text[9:], "percent", 4),
        "html-after-equals": ("href=/x?id=" + text[:8] + "&#45;" + text[9:], "html-entity", 11),
        "qp-soft-after-equals": ("KEY=" + text[:25] + "=\n" + text[25:], "quoted-printable", 4),
        "percent-after-json-u00": ("\\u00" + text[:8] + "%2D" + text[9:], "percent", 4),
        "json-capital-u": ("\\U" + f"{ord(text[0]):04X}" + text[1:], "json-escape", 0),
    }
    for name, (body, _, _) in forms.items():
        (tmp_path / name).write_text(body + "\n")
    hits, _ = run_both(probe, str(tmp_path))
    found = {(pathlib.Path(hit["where"]).name, hit["encoding"], hit["token"], hit["offset"]) for hit in hits}
    assert {(name, encoding, text, at) for name, (_, encoding, at) in forms.items()} <= found
