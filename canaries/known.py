"""Find *known* secrets (strings that are not canary-shaped, such as a platform's capabilities) in bytes,
raw or encoded: standard and url-safe base64 at each of the three byte alignments, and hex.

The canary detector (``detect``) hunts by shape and is told nothing; this one is told exactly what to look
for, so it runs on the host only, over bytes a probe carried out of a sandbox, never inside one.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable


def _base64_cores(secret: bytes) -> list[tuple[str, bytes]]:
    """The part of the base64 of ``secret`` that does not depend on its neighbours, per alignment."""
    cores = []
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + secret)
        # Characters mixing pad bytes or the unknown byte after the secret are unstable: drop them.
        start = (shift * 8 + 5) // 6
        end = ((shift + len(secret)) * 8) // 6
        core = encoded[start:end]
        if len(core) >= 8:
            cores.append(("base64", core))
            cores.append(("base64url", core.translate(bytes.maketrans(b"+/", b"-_"))))
    return cores


def find_known(data: bytes, secrets: Iterable[str]) -> set[tuple[str, str]]:
    """``(secret, encoding)`` for every secret found in ``data``."""
    found = set()
    for secret in secrets:
        raw = secret.encode()
        if raw in data:
            found.add((secret, "raw"))
        hexed = binascii.hexlify(raw)
        if hexed in data or hexed.upper() in data:
            found.add((secret, "hex"))
        for encoding, core in _base64_cores(raw):
            if core in data:
                found.add((secret, encoding))
    return found
