"""Canaries: unique fake secrets planted in one principal's private memory, and finding them.

``token`` defines and mints canaries; ``detect`` finds one run's tokens in bytes, streams and
file trees and is also a standalone, standard-library-only probe run inside sandboxes; ``scan``
pairs what was found with what was minted. Planting canaries and judging whether a sighting is a
leak belong to the harness that uses this package, not to it.
"""

from __future__ import annotations

from canaries.detect import Hit, find, scan_stream, scan_tree
from canaries.errors import (
    CanaryError,
    CanaryFormatError,
    DuplicateCanaryError,
    IncompleteScanError,
)
from canaries.scan import Attributed, attribute, scan_bytes, scan_dir
from canaries.token import Canary, Mint, new_run_id, token_pattern

__all__ = [
    "Attributed",
    "Canary",
    "CanaryError",
    "CanaryFormatError",
    "DuplicateCanaryError",
    "Hit",
    "IncompleteScanError",
    "Mint",
    "attribute",
    "find",
    "new_run_id",
    "scan_bytes",
    "scan_dir",
    "scan_stream",
    "scan_tree",
    "token_pattern",
]
