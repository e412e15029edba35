"""Errors the harness raises (as opposed to the runtime under test).

::

    HarnessError
    ├── PairingError    the suite's declarations break the pairing rules (a usage error: fix the tests)
    ├── ProofError      a probe gave no valid proof that it ran inside the intended sandbox, or a scan
    │                   did not prove it looked (incomplete, or blind to the prober's own canaries)
    ├── HarnessTimeout  a wait for a condition ran out of time (the harness could not observe)
    ├── UnexpectedRedirect  a platform answered 3xx to the harness's HTTP client (never followed, never judged)
    ├── TargetError     a target could not be loaded or failed an operation of the contract
    │   └── CapacityRefusedError   the platform's capacity model refused a wake or provision (the reason)
    ├── SetupError      the machine or the arguments cannot run a qualification (exit 2, one line)
    └── ScriptError     a script given to the lab's fake provider, or its own setup, is malformed
"""

from __future__ import annotations


class HarnessError(Exception):
    """Base of every error of the harness."""


class PairingError(HarnessError):
    """A refusal declares a control that no test implements, or a test names an unknown case."""


class ProofError(HarnessError):
    """A probe's output lacked the run nonce, or its namespaces are not the instance's."""


class HarnessTimeout(HarnessError):
    """A wait for something the test needed to observe ran past its deadline: the harness could not
    judge, so the test is broken (unlike an assertion, which is a finding about the property). Raised by
    ``acceptance/harness/wait.until``, the harness's one deadline loop. Not a TargetError: cases read a
    TargetError as the platform refusing, and a wait that ran out is no refusal."""


class TargetError(HarnessError):
    """The target could not be loaded, or one of its operations failed."""


class CapacityRefusedError(TargetError):
    """The platform refused a wake or a provision because it would not fit the host; unlike a plain
    TargetError this is the platform doing its job. ``reason`` names the resource and the MB."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class SetupError(HarnessError):
    """Bad input or a missing machine feature; the message names the problem and the fix."""


class ScriptError(HarnessError):
    """A script the harness gives the lab's fake provider (``harness/lab/provider.py``) is malformed, or the
    provider was set up wrongly (no key, already serving); the message names the field."""


class UnexpectedRedirect(HarnessError):
    """A platform answered a harness request with a redirect (``harness/http.py``). The harness follows none
    and judges none: a refusal checking ``status != 200`` would take "303, see elsewhere" for a refusal, so
    the test is broken instead (DESIGN §5 rule 6)."""
