"""Targets that cannot serve, for the bad-input tests: given as ``--target broken_targets:NAME``."""

from __future__ import annotations


def raising(options):
    """A driver factory that raises, as one whose platform cannot start on this machine would."""
    raise RuntimeError("this platform cannot start here (a test factory that always raises)")


not_a_factory = 42
