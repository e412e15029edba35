"""Errors the harness raises (as opposed to the runtime under test).

::

    HarnessError
    ├── PairingError    the suite's declarations break the pairing rules (a usage error: fix the tests)
    ├── ProofError      a probe gave no valid proof that it ran inside the intended sandbox
    ├── TargetError     a target could not be loaded or failed an operation of the contract
    └── SetupError      the machine or the arguments cannot run a qualification (exit 2, one line)
"""

from __future__ import annotations


class HarnessError(Exception):
    """Base of every error of the harness."""


class PairingError(HarnessError):
    """A refusal declares a control that no test implements, or a test names an unknown case."""


class ProofError(HarnessError):
    """A probe's output lacked the run nonce, or its namespaces are not the instance's."""


class TargetError(HarnessError):
    """The target could not be loaded, or one of its operations failed."""


class SetupError(HarnessError):
    """Bad input or a missing machine feature; the message names the problem and the fix."""
