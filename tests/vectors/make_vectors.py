"""Write the parity test vectors: tests/vectors/canaries.bin and forms.bin (python3 tests/vectors/make_vectors.py).

Deterministic bytes holding tokens of run RUN (the scanners are run with --run RUN) in every encoding
detect.py knows (raw in three cases, standard and url-safe base64 at each alignment, line-wrapped base64 with LF and CRLF, hex in
both cases), the boundaries of the token shape, and near misses that must not be hits. The
chunk-crossing cases are built by the test from this file (it is placed at offsets around the 1 MiB
read boundary), so the file itself stays small.

forms.bin holds issue 26's forms, which detect.py and ppscan both decode: UTF-16 either way round, hex with
separators, \\x or 0x, base32 at each alignment and in either case, HTML references, quoted-printable (escaped,
soft line breaks), DNS labels with any number of dots, base64 of base64, and gzip, zlib, xz and bz2 streams
(raw and base64-encoded) starting inside the file, with near misses of each. (zstd is left out: detect.py
says it cannot open it, which ppscan does.)
"""

from __future__ import annotations

import base64
import binascii
import bz2
import gzip
import lzma
import pathlib
import random
import zlib

OUT = pathlib.Path(__file__).with_name("canaries.bin")
FORMS_OUT = pathlib.Path(__file__).with_name("forms.bin")


# The run every vector's tokens belong to: the tests' run (tests/support/tokens.py), with letters in it so
# that its upper-case spellings differ from the lower.
RUN = "0123abcd"


def token(rng: random.Random, run: str = RUN) -> bytes:
    """A token of ``run``: a version-4 UUID whose first group is the run id (canaries.token)."""
    digits = "".join(rng.choice("0123456789abcdef") for _ in range(22))
    return f"{run}-{digits[:4]}-4{digits[4:7]}-{rng.choice('89ab')}{digits[7:10]}-{digits[10:22]}".encode()


def build() -> bytes:
    rng = random.Random(14)
    parts: list[bytes] = []

    def add(label: str, data: bytes) -> None:
        parts.append(b"\n== " + label.encode() + b" ==\n" + data + b"\n")

    add("raw lower", token(rng))
    add("raw upper", token(rng).upper())
    add("raw mixed", b"".join(bytes([c]).upper() if i % 2 else bytes([c]) for i, c in enumerate(token(rng))))
    add("raw glued to text", b"xx" + token(rng) + b"g.")
    add("raw after hex digits", b"0123" + token(rng))
    add("raw in json", b'{"k": "' + token(rng) + b'"}')
    for lead in range(3):
        for pad in (b"", b"?", b"\xfb\xff"):
            body = bytes(range(lead)) + token(rng) + pad
            add(f"base64 lead {lead} pad {pad!r}", base64.b64encode(body))
            add(f"base64url lead {lead} pad {pad!r}", base64.urlsafe_b64encode(body + b"\xfb\xff\xfe"))
            add(f"base64 upper token lead {lead}", base64.b64encode(bytes(range(lead)) + token(rng).upper()))
    for width in (76, 64, 20, 7):
        blob = base64.b64encode(b"header-bytes:" + token(rng) + b":trailer" * 5)
        wrapped = b"\n".join(blob[i : i + width] for i in range(0, len(blob), width))
        add(f"base64 wrapped {width} LF", wrapped)
        add(f"base64 wrapped {width} CRLF", wrapped.replace(b"\n", b"\r\n"))
    add("hex lower", binascii.hexlify(token(rng)))
    add("hex upper", binascii.hexlify(token(rng)).upper())
    add("hex of upper token", binascii.hexlify(token(rng).upper()))
    add("hex odd tail", binascii.hexlify(token(rng)) + b"a")
    add("two tokens adjacent", token(rng) + token(rng))
    add("token twice same place raw+hex", token(rng) + b" " + binascii.hexlify(token(rng)))
    # Near misses: none of these is a hit.
    t = token(rng)
    add("near 13 hex last group", t + b"a")
    add("near 11 hex last group", t[:-1])
    add("near another run", token(rng, "0123abce"))
    add("near run typo", RUN.encode()[:7] + b"-" + t[9:])
    add("near short group", t[:13] + t[14:])
    add("near no dash", t[:8] + t[9:])
    add("near non-hex group", t[:-1] + b"g")
    add("near a plain uuid", b"123e4567-e89b-42d3-a456-426614174000")
    add("near base64 of near miss", base64.b64encode(t + b"f"))
    add("near hex of near miss", binascii.hexlify(t[:-2]))
    add("prefix alone", RUN.encode() + b"- " + RUN.upper().encode() + b"- " + base64.b64encode(RUN.encode() + b"-")
        + b" " + binascii.hexlify(RUN.encode()))
    add("non-ascii around", "ünïcødé ".encode() + token(rng) + b"\x00\xff\xfe")
    return b"".join(parts)


def build_forms() -> bytes:
    rng = random.Random(26)
    parts: list[bytes] = []

    def add(label: str, data: bytes) -> None:
        parts.append(b"\n== " + label.encode() + b" ==\n" + data + b"\n")

    add("utf-16-le", token(rng).decode().encode("utf-16-le") + "!".encode("utf-16-le"))
    add("utf-16-be upper", token(rng).upper().decode().encode("utf-16-be") + "!".encode("utf-16-be"))
    add("utf-16-le at file end of a block", b"\xff\xfe" + token(rng).decode().encode("utf-16-le"))
    for sep in (b":", b"-", b" ", b",", b", "):
        add(f"hex sep {sep!r}", sep.join(b"%02x" % c for c in token(rng)))
    add("hex sep upper", b":".join(b"%02X" % c for c in token(rng).upper()))
    add("hex \\x", b"".join(b"\\x%02x" % c for c in token(rng)))
    add("hex 0x comma", b", ".join(b"0x%02x" % c for c in token(rng)))
    add("hex 0X glued", b"".join(b"0X%02X" % c for c in token(rng)))
    for lead in range(5):
        add(f"base32 lead {lead}", base64.b32encode(bytes(range(1, lead + 1)) + token(rng)))
        add(f"base32 lower lead {lead}", base64.b32encode(bytes(range(1, lead + 1)) + token(rng) + b"?").lower())
    add("html decimal", b"".join(b"&#%d;" % c for c in token(rng)))
    add("html hex mixed", b"".join(b"&#x%x;" % c if i % 3 == 0 else bytes([c]) for i, c in enumerate(token(rng))))
    add("html leading zeros", b"&#%04d;&#x%05x;" % tuple((t := token(rng))[:2]) + t[2:])
    add("html late", (t := token(rng))[:18] + b"&#45;" + t[19:])
    add("qp every byte", b"".join(b"=%02X" % c for c in token(rng)))
    for cut in (3, 9, 30):
        add(f"qp soft break at {cut} LF", (t := token(rng))[:cut] + b"=\n" + t[cut:])
        add(f"qp soft break at {cut} CRLF", (t := token(rng))[:cut] + b"=\r\n" + t[cut:])
    add("dns one dot", (t := token(rng))[:20] + b"." + t[20:] + b".evil.example")
    add("dns three labels", (t := token(rng))[:3] + b"." + t[3:6] + b"." + t[6:] + b".evil.example")
    add("dns every two", b".".join((t := token(rng))[i:i + 2] for i in range(0, len(t), 2)) + b".x.example")
    for outer in range(3):
        for inner in range(3):
            add(f"base64 of base64 {outer}/{inner}",
                base64.b64encode(bytes(range(outer)) + base64.b64encode(bytes(range(inner)) + token(rng))))
    for name, pack in (("gzip", gzip.compress), ("zlib", zlib.compress), ("xz", lzma.compress), ("bz2", bz2.compress)):
        add(f"{name} inside a line", b"record blob=" + pack(b"k=" + token(rng)) + b" end")
    add("base64 of gzip", b'{"blob": "' + base64.b64encode(gzip.compress(b"v " + token(rng))) + b'"}')
    blob = base64.b64encode(gzip.compress(bytes(rng.randrange(256) for _ in range(200)) + token(rng)))
    add("base64 of gzip wrapped", b"\n".join(blob[i:i + 76] for i in range(0, len(blob), 76)))
    add("gzip in gzip", b"x" * 7 + gzip.compress(b"y" * 9 + gzip.compress(b"z " + token(rng))))
    # Near misses: none of these is a hit.
    add("near hex sep 13 hex", b":".join(b"%02x" % c for c in token(rng) + b"a"))
    add("near utf-16 13 hex", (token(rng) + b"a").decode().encode("utf-16-le"))
    add("near base32 short", base64.b32encode(token(rng)[:-1]))
    add("near qp short", b"".join(b"=%02X" % c for c in token(rng)[:-1]))
    add("near dns 13 hex", (t := token(rng))[:30] + b"." + t[30:] + b"a.example")
    add("near html non-ascii", b"&#368;" + token(rng)[1:])
    add("near gzip of near miss", b"z" + gzip.compress(token(rng)[:-1]))
    add("not a stream", b"x^ x\x9c BZh9 \x1f\x8b\x08 H4sI Qlpo /Td6WFo")
    return b"".join(parts)


if __name__ == "__main__":
    OUT.write_bytes(build())
    FORMS_OUT.write_bytes(build_forms())
