"""Benchmark: the static probe (build/probe/ppscan) against ``rg -i -F RUN-`` on one ~1 GiB corpus.

The corpus (under /var/tmp, removed afterwards) is 256 files of 4 MiB of line-broken text with
canaries planted in every encoding the probe decodes: raw in mixed case, standard and url-safe base64
at each alignment, base64 wrapped at 76 columns, hex in both cases, percent-encoding, JSON \\u
escapes, DNS labels (one dot, and three or more labels), UTF-16 either way round, hex with separators or
\\x / 0x, base32, HTML character references, quoted-printable (escaped, and cut by a soft line break),
base64 of base64, base64 of gzip, and gzip, zlib, xz and bz2 streams starting inside a line (issue 26);
every PAIRPROOF_BENCH_GZIP_EVERY-th file (default 64) is gzipped whole (inflating costs the probe
time ripgrep does not spend: about 0.34 of rg's throughput with every 16th file gzipped, here).
Both tools scan it the same number of times in this run, alternating, after one warm-up each (so both read from the page
cache); medians, throughputs and the ratio are printed and kept in extra_info. The probe must also
find every planted token (ripgrep finds only the raw ones). Goal: the probe at >= 0.5 of ripgrep's
throughput (PAIRPROOF_BENCH_MIN_RATIO sets the bar the test enforces; 0 to only report).
"""

from __future__ import annotations

import base64
import binascii
import bz2
import gzip
import json
import lzma
import os
import pathlib
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zlib

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
FILES = int(os.environ.get("PAIRPROOF_BENCH_FILES", "256"))
FILE_BYTES = 4 << 20
# raw, base64, base64url, wrapped base64, hex, percent, JSON \\u escapes, DNS labels, then issue 26's forms
FORMS = 20
GZIP_EVERY = int(os.environ.get("PAIRPROOF_BENCH_GZIP_EVERY", "64"))
ROUNDS = int(os.environ.get("PAIRPROOF_BENCH_ROUNDS", "5"))
MIN_RATIO = float(os.environ.get("PAIRPROOF_BENCH_MIN_RATIO", "0.5"))
WORDS = b"the of agent memory transcript volume request response token model user org task note file data".split()


# The run the corpus's tokens belong to, and that both tools look for (the probe by --run, rg by its prefix).
BENCH_RUN = "5eed0b17"


def _token(rng: random.Random) -> bytes:
    """A token of BENCH_RUN: a version-4 UUID whose first group is the run id (canaries.token)."""
    digits = "".join(rng.choice("0123456789abcdef") for _ in range(22))
    return f"{BENCH_RUN}-{digits[:4]}-4{digits[4:7]}-{rng.choice('89ab')}{digits[7:10]}-{digits[10:22]}".encode()


def _plant(rng: random.Random, token: bytes, form: int) -> bytes:
    lead = bytes(rng.randrange(1, 256) for _ in range(rng.randrange(3)))
    if form == 0:
        return token.upper() if rng.random() < 0.5 else token
    if form == 1:
        return base64.b64encode(lead + token)
    if form == 2:
        return base64.urlsafe_b64encode(lead + token + b"\xfb\xff")
    if form == 3:
        blob = base64.b64encode(b"x" * 40 + lead + token)
        return b"\n".join(blob[i : i + 76] for i in range(0, len(blob), 76))
    if form == 4:
        return binascii.hexlify(token).upper() if rng.random() < 0.5 else binascii.hexlify(token)
    if form == 5:
        return "".join(f"%{c:02X}" for c in token).encode()
    if form == 6:
        return b"".join(b"\\u%04x" % c if i % 3 == 0 else bytes([c]) for i, c in enumerate(token))
    if form == 7:
        return token[:20] + b"." + token[20:] + b".exfil.example"
    if form == 8:
        return (b"\xff\xfe" + token.decode().encode("utf-16-le") + b"\0\0" if rng.random() < 0.5
                else b"\xfe\xff" + token.decode().encode("utf-16-be"))
    if form == 9:
        sep = rng.choice([":", "-", " ", "\\x", "0x", ", 0x"])
        pairs = [f"{c:02x}" for c in token]
        if sep in ("\\x", "0x"):
            return "".join(sep + pair for pair in pairs).encode()
        if sep == ", 0x":
            return ("0x" + sep.join(pairs)).encode()
        return sep.join(pairs).encode()
    if form == 10:
        return base64.b32encode(lead + token)
    if form == 11:
        return b"".join((b"&#%d;" % c if rng.random() < 0.5 else b"&#x%x;" % c) if i % 2 else bytes([c])
                        for i, c in enumerate(token))
    if form == 12:
        if rng.random() < 0.5:
            return b"".join(b"=%02X" % c for c in token)
        cut = rng.randrange(1, len(token))
        return token[:cut] + b"=\n" + token[cut:]
    if form == 13:
        return base64.b64encode(base64.b64encode(lead + token))
    if form == 14:
        return base64.b64encode(gzip.compress(b"payload " + token))
    if form == 15:
        cuts = sorted(rng.sample(range(1, len(token)), 3))
        return b".".join(token[a:b] for a, b in zip([0, *cuts], [*cuts, len(token)])) + b".exfil.example"
    blob = b"args=" + token
    packed = {16: gzip.compress, 17: zlib.compress, 18: lzma.compress, 19: bz2.compress}[form](blob)
    return b"blob:" + packed + b" end"


@pytest.fixture(scope="module")
def corpus():
    rng = random.Random(14)
    root = pathlib.Path(tempfile.mkdtemp(prefix="pairproof-probe-bench-", dir="/var/tmp"))
    try:
        line_words = [b" ".join(rng.choice(WORDS) for _ in range(rng.randrange(4, 16))) for _ in range(4096)]
        text = bytearray()
        while len(text) < FILE_BYTES:
            text += rng.choice(line_words) + b"\n"
        base = bytes(text[:FILE_BYTES])
        planted = []
        for number in range(FILES):
            data = bytearray(base)
            # Line starts in the original text, filled from the end so that no planted form (a
            # wrapped one has line breaks of its own) is split by a later one.
            starts = sorted({base.rfind(b"\n", 0, rng.randrange(FILE_BYTES - 400)) + 1 for _ in range(FORMS)}, reverse=True)
            for form, at in enumerate(starts):
                token = _token(rng)
                data[at:at] = b" " + _plant(rng, token, form) + b" "
                planted.append(token.decode())
            if number % GZIP_EVERY == GZIP_EVERY - 1:
                # Some files gzip-compressed: the probe looks inside, ripgrep does not.
                (root / f"f{number:04d}.txt.gz").write_bytes(gzip.compress(bytes(data), compresslevel=1))
            else:
                (root / f"f{number:04d}.txt").write_bytes(bytes(data))
        yield root, planted
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def probe() -> pathlib.Path:
    binary = REPO / "build" / "probe" / "ppscan"
    built = subprocess.run([str(REPO / "tools" / "build-probe"), str(binary)], capture_output=True, text=True)
    if built.returncode != 0:
        raise RuntimeError(f"tools/build-probe failed: {built.stderr.strip()}")
    return binary


def _timed(argv: list[str]) -> tuple[float, bytes]:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, timeout=600)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):  # rg exits 1 when nothing matched
        raise RuntimeError(f"{argv[0]} exited {done.returncode}: {done.stderr[:500]!r}")
    return elapsed, done.stdout


def test_probe_vs_ripgrep(benchmark, corpus, probe):
    root, planted = corpus
    rg = shutil.which("rg")
    if rg is None:
        raise RuntimeError("rg (ripgrep) is not installed: tools/setup-machine installs it")
    size = sum(path.stat().st_size for path in root.iterdir())
    probe_argv = [str(probe), "--run", BENCH_RUN, str(root)]
    # -a: read binary files whole, as the probe does (without it rg stops at a file's first NUL byte, and the
    # corpus's UTF-16 and compressed forms put one in every file)
    rg_argv = [rg, "-a", "-i", "-F", "-c", f"{BENCH_RUN}-", str(root)]
    _, out = _timed(probe_argv)
    _timed(rg_argv)
    lines = out.decode().splitlines()
    summary = json.loads(lines[-1])
    assert summary["end"] == "pairproof-scan-end" and summary["bytes"] == size and summary["errors"] == 0, summary
    found = {json.loads(line)["token"] for line in lines[:-1]}
    missing = set(planted) - found
    assert not missing, f"the probe missed {len(missing)} of {len(planted)} planted tokens, e.g. {sorted(missing)[:3]}"
    probe_times, rg_times = [], []
    for _ in range(ROUNDS):
        probe_times.append(_timed(probe_argv)[0])
        rg_times.append(_timed(rg_argv)[0])
    probe_median, rg_median = statistics.median(probe_times), statistics.median(rg_times)
    ratio = rg_median / probe_median
    report = {
        "corpus_bytes": size,
        "planted": len(planted),
        "probe_median_s": round(probe_median, 4),
        "rg_median_s": round(rg_median, 4),
        "probe_MBps": round(size / probe_median / 1e6, 1),
        "rg_MBps": round(size / rg_median / 1e6, 1),
        "probe_over_rg_throughput": round(ratio, 3),
    }
    benchmark.extra_info.update(report)
    print("\nprobe vs ripgrep:", json.dumps(report))
    benchmark.pedantic(lambda: _timed(probe_argv), rounds=1, iterations=1)
    assert ratio >= MIN_RATIO, f"the probe ran at {ratio:.2f} of ripgrep's throughput (goal {MIN_RATIO})"


PY_FILES = int(os.environ.get("PAIRPROOF_BENCH_PY_FILES", "8"))
PY_MIN_RATIO = float(os.environ.get("PAIRPROOF_BENCH_PY_MIN_RATIO", "0"))


def test_detect_py_vs_ripgrep(benchmark, corpus):
    """The reference (canaries/detect.py: what sandboxes without the static probe run, and what canaries.scan's
    in-process search is) on the first PAIRPROOF_BENCH_PY_FILES files of the same corpus, against rg on the same
    files: medians and ratio reported (PAIRPROOF_BENCH_PY_MIN_RATIO sets a bar; 0, the default, only reports).
    It must find every token planted in those files."""
    root, planted = corpus
    rg = shutil.which("rg")
    if rg is None:
        raise RuntimeError("rg (ripgrep) is not installed: tools/setup-machine installs it")
    files = sorted(str(path) for path in root.iterdir())[:PY_FILES]
    size = sum(os.path.getsize(path) for path in files)
    detect_argv = [sys.executable, "-I", str(REPO / "canaries" / "detect.py"), "--run", BENCH_RUN, *files]
    rg_argv = [rg, "-a", "-i", "-F", "-c", f"{BENCH_RUN}-", *files]
    _, out = _timed(detect_argv)
    lines = out.decode().splitlines()
    summary = json.loads(lines[-1])
    assert summary["end"] == "pairproof-scan-end" and summary["errors"] == 0, summary
    found = {json.loads(line)["token"] for line in lines[:-1]}
    mine = set(planted[: len(files) * FORMS])
    assert not mine - found, f"detect.py missed {len(mine - found)} of {len(mine)}, e.g. {sorted(mine - found)[:3]}"
    detect_times, rg_times = [], []
    for _ in range(ROUNDS):
        detect_times.append(_timed(detect_argv)[0])
        rg_times.append(_timed(rg_argv)[0])
    detect_median, rg_median = statistics.median(detect_times), statistics.median(rg_times)
    ratio = rg_median / detect_median
    report = {"corpus_bytes": size, "detect_py_median_s": round(detect_median, 4), "rg_median_s": round(rg_median, 4),
              "detect_py_MBps": round(size / detect_median / 1e6, 1), "rg_MBps": round(size / rg_median / 1e6, 1),
              "detect_py_over_rg_throughput": round(ratio, 3)}
    benchmark.extra_info.update(report)
    print("\ndetect.py vs ripgrep:", json.dumps(report))
    benchmark.pedantic(lambda: _timed(detect_argv), rounds=1, iterations=1)
    assert ratio >= PY_MIN_RATIO, f"detect.py ran at {ratio:.3f} of ripgrep's throughput (bar {PY_MIN_RATIO})"
