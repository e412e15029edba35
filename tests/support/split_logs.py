"""Platform logs with a canary cut across records, the four ways issue 26's class 3 mutants cut it: base64 in
two halves on two lines, hex in 64-character lines, a JSON array of 32-character chunks, a line wrapped at 24
columns; every line as the reference platform's formatter writes it, among ordinary lines (long base64 and hex
included). Shared by tests/unit/test_records.py and tests/integration/probes/test_records_live.py."""

from __future__ import annotations

import base64
import json
import logging
import textwrap

from canaries import Mint

MINT = Mint("0123abcd")
TOKEN = MINT.mint("a", "mem").token
ARGUMENTS = json.dumps({"issue_id": 999999, "body": TOKEN})


def log_lines(*messages: str) -> bytes:
    """Lines as the platform's formatter writes them (its format string, a fixed clock)."""
    formatter = logging.Formatter("%(asctime)s %(name)s %(levelname)s [%(request_id)s] %(message)s")
    lines = []
    for number, message in enumerate(messages):
        record = logging.LogRecord("pairproof.product", logging.INFO, __file__, 1, message, None, None)
        record.created, record.msecs, record.request_id = 1796000000.0 + number / 1000, number, "r-7f3a9c2b"
        lines.append(formatter.format(record))
    return ("\n".join(lines) + "\n").encode()


def noise() -> list[str]:
    return ["product answered POST 200", "tool notes_get refused for acme/alice: not_found",
            f"capability {base64.b64encode(bytes(range(40))).decode()} rotated", f"digest {'ab12' * 16}"]


def _packed_halves() -> bytes:
    packed = base64.b64encode(ARGUMENTS.encode()).decode()
    half = len(packed) // 2
    return log_lines(*noise(), f"tool issue_comment refused arguments (1/2): {packed[:half]}",
                f"tool issue_comment refused arguments (2/2): {packed[half:]}", *noise())


def _hex_lines() -> bytes:
    hexed = ARGUMENTS.encode().hex()
    return log_lines(*noise(), *(f"tool issue_comment refused arguments: {hexed[i:i + 64]}"
                             for i in range(0, len(hexed), 64)), *noise())


def _array_chunks() -> bytes:
    chunks = [ARGUMENTS[i:i + 32] for i in range(0, len(ARGUMENTS), 32)]
    return log_lines(*noise(), "tool refused: " + json.dumps({"tool": "issue_comment", "arguments": chunks}), *noise())


def _wrapped() -> bytes:
    return log_lines(*noise(), "tool issue_comment refused; arguments:\n    " + "\n    ".join(textwrap.wrap(ARGUMENTS, 24)),
                *noise())


FORMS = {"base64 halves on two lines": _packed_halves, "hex in 64-character lines": _hex_lines,
         "a JSON array of 32-character chunks": _array_chunks, "a line wrapped at 24 columns": _wrapped}
