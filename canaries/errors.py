"""Errors raised by the canaries package, and only by it.

Everything here derives from ``CanaryError`` so a caller can catch the package as a whole, while
each subclass says one specific thing went wrong and what to do about it. The standalone probe
``detect.py`` raises none of these: it is copied alone into sandboxes and reports its problems as
text, so it cannot import this module.

    CanaryError
     ├── CanaryFormatError      a token, run id, principal or location has the wrong shape
     ├── DuplicateCanaryError   a Mint was asked twice for the same (principal, location)
     └── IncompleteScanError    a host-side scan could not read everything it was pointed at
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from canaries.scan import Attributed


class CanaryError(Exception):
    """Base of every error this package raises; catch it to handle canary problems as one."""


class CanaryFormatError(CanaryError):
    """Raised when a token, run id, principal or location does not have the canary shape.

    Unlike ``DuplicateCanaryError`` the value itself is wrong, whatever else has been minted;
    the message names the value and the shape that was expected.
    """


class DuplicateCanaryError(CanaryError):
    """Raised when a ``Mint`` is asked for a second canary at the same (principal, location).

    The value is well-formed (that would be ``CanaryFormatError``); it is refused because each
    run plants one canary per principal and location, so a hit names exactly one planting.
    """


class IncompleteScanError(CanaryError):
    """Raised when a host-side scan skipped or cut short some files.

    A scan that found nothing proves nothing if it could not read everything, so this is an
    error rather than a log line. The hits found in what *was* read are kept in ``found`` and
    the unread paths, as ``"path: reason"`` strings, in ``problems``.
    """

    def __init__(self, path: str, problems: tuple[str, ...], found: tuple[Attributed, ...]) -> None:
        self.path = path
        self.problems = problems
        self.found = found
        first = problems[0] if problems else "no detail"
        super().__init__(
            f"scan of {path} is incomplete: {len(problems)} file(s) could not be fully read, "
            f"so finding no canary there proves nothing (first: {first}); "
            "fix the access problem or raise max_file_bytes, then scan again"
        )
