"""Write the parity test vectors: tests/vectors/canaries.bin (python3 tests/vectors/make_vectors.py).

Deterministic bytes holding canary-shaped tokens in every encoding detect.py knows (raw in three
cases, standard and url-safe base64 at each alignment, line-wrapped base64 with LF and CRLF, hex in
both cases), the boundaries of the token shape, and near misses that must not be hits. The
chunk-crossing cases are built by the test from this file (it is placed at offsets around the 1 MiB
read boundary), so the file itself stays small.
"""

from __future__ import annotations

import base64
import binascii
import pathlib
import random

OUT = pathlib.Path(__file__).with_name("canaries.bin")


def token(rng: random.Random, principal: str = "b", location: str = "mem") -> bytes:
    run = "".join(rng.choice("0123456789abcdef") for _ in range(8))
    entropy = "".join(rng.choice("0123456789abcdef") for _ in range(16))
    return f"ppcanary-{run}-{principal}-{location}-{entropy}".encode()


def build() -> bytes:
    rng = random.Random(14)
    parts: list[bytes] = []

    def add(label: str, data: bytes) -> None:
        parts.append(b"\n== " + label.encode() + b" ==\n" + data + b"\n")

    add("raw lower", token(rng))
    add("raw upper", token(rng).upper())
    add("raw mixed", b"".join(bytes([c]).upper() if i % 2 else bytes([c]) for i, c in enumerate(token(rng))))
    add("raw glued to text", b"xx" + token(rng) + b"g.")
    add("raw longest parts", token(rng, "abcdef", "012345"))
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
    add("near 17 hex entropy", t + b"a")
    add("near 15 hex entropy", t[:-1])
    add("near short run", b"ppcanary-1234567-b-mem-0123456789abcdef")
    add("near long principal", b"ppcanary-12345678-abcdefg-mem-0123456789abcdef")
    add("near empty location", b"ppcanary-12345678-b--0123456789abcdef")
    add("near prefix typo", b"ppcanarry-12345678-b-mem-0123456789abcdef")
    add("near non-hex entropy", b"ppcanary-12345678-b-mem-0123456789abcdeg")
    add("near base64 of near miss", base64.b64encode(t + b"f"))
    add("near hex of near miss", binascii.hexlify(t[:-2]))
    add("prefix alone", b"ppcanary- PPCANARY- cHBjYW5hcnkt 7070636160")
    add("non-ascii around", "ünïcødé ".encode() + token(rng) + b"\x00\xff\xfe")
    return b"".join(parts)


if __name__ == "__main__":
    OUT.write_bytes(build())
