"""Tokens for the suite's own tests: the run they belong to and deterministic ones of it.

A scan looks for one run's tokens (``canaries.detect.use_run``); the tests' conftests point every test at
``TEST_RUN`` before it starts, and a test that wants another run says so. ``token`` builds a token of the
real shape (``canaries.token``: a version-4 UUID whose first group is the run id) from a number, so a test
can spell the tokens it plants and expects.
"""

from __future__ import annotations

import hashlib

TEST_RUN = "0123abcd"


def token(n: int | str = 0, run: str = TEST_RUN) -> str:
    """The ``n``-th test token of ``run``: ``<run>-xxxx-4xxx-8xxx-xxxxxxxxxxxx``, the same for the same n."""
    digits = hashlib.sha256(f"{run}/{n}".encode()).hexdigest()
    return f"{run}-{digits[:4]}-4{digits[4:7]}-8{digits[7:10]}-{digits[10:22]}"


KNOWN = token("known")
