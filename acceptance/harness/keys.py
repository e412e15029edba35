"""The names the plugin, its session and its fixtures share: user-property keys a report carries and the
stash keys of the session's objects. A module of their own, so the three import it and not each other."""

from __future__ import annotations

import pytest

CASE_KEY = "pairproof_case"
PROOF_KEY = "pairproof_proofs"
BROKEN_KEY = "pairproof_broken"
EVIDENCE_KEY = "pairproof_evidence"
PLATFORM_RUN_KEY = "pairproof_platform_run"
INTERRUPTED_KEY = "pairproof_interrupted"  # the test ended after an interrupt: nothing of it is judged
FULL_COLLECTION = pytest.StashKey[list]()
SESSION = pytest.StashKey["object"]()
PROBE_LOG = pytest.StashKey["object"]()  # the test's ProbeLog, for the plugin to judge its proofs
LACKS_KEY = "pairproof_lacks"  # the facets of the test's case that the target lacks (the test did not run)
TARGET_VIEW = pytest.StashKey["object"]()  # the test's view of the target, for the facets it reached undeclared
