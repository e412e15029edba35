"""Errors of the mutant machinery.

::

    MutantError
    └── PatchDoesNotApply   an edit's text is not found exactly once in the runtime copy
"""

from __future__ import annotations


class MutantError(Exception):
    """Base of the mutant machinery's errors."""


class PatchDoesNotApply(MutantError):
    """The runtime changed and a catalogue entry no longer describes it: fix the entry, never skip it."""
