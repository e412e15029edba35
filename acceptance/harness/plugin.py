"""The pairproof pytest plugin: options and hooks, nothing else.

Registered through the ``pytest11`` entry point, so it loads in every pytest session on the machine; it
stays inert (no runtime started, no rule enforced) unless the session collects pairproof cases or is
given ``--target``. Fixtures live in ``fixtures.py``; the rules themselves in ``pairing.py``; reports in
the ``reports`` package. Collection-time rules run where collection happens (each xdist worker, which
turns a violation into a collection error the controller reports); report-time judgement runs where all
reports arrive (the xdist controller, or the single process).
"""

from __future__ import annotations

import re
import secrets

import pytest

from acceptance.harness.keys import (
    SESSION,
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pairproof", "pairproof qualification")
    group.addoption("--target", dest="pairproof_target", default=None,
                    help="target to qualify (default: reference when cases are collected)")
    group.addoption("--profile", dest="pairproof_profile", default=None, metavar="NAME|PATH",
                    help="agent profile the target runs: a name in acceptance/targets/profiles or a .toml file "
                         "(default: reference)")
    group.addoption("--pairproof-state-dir", dest="pairproof_state_dir", default="/var/lib/pairproof",
                    help="where the reference runtime keeps run state (default: /var/lib/pairproof)")
    group.addoption("--pairproof-verdict", dest="pairproof_verdict", default=None,
                    help="write the verdict JSON here at the end of the run")
    group.addoption("--case", dest="pairproof_cases", action="append", default=[], metavar="ID",
                    help="run only this catalogue case (repeatable), its controls included")
    group.addoption("--idle-seconds", dest="pairproof_idle_seconds", type=float, default=3.0,
                    help="NT-5's idle observation window in seconds (default 3; the seed observed 23 minutes)")
    group.addoption("--lf6-examples", dest="pairproof_lf6_examples", type=int, default=3,
                    help="LF-6: how many random interleavings hypothesis tries (default 3, derandomized)")
    group.addoption("--pairproof-run", dest="pairproof_run", default=None,
                    help="run id (8 lowercase hex); minted when absent")
    group.addoption("--pairproof-canaries", dest="pairproof_canaries", default=None, metavar="KEY",
                    help="the secret the canaries' run ids are made from (32 lowercase hex); a fresh one each session "
                         "when absent (give one to know the canaries' run ids before the run: a test's capture)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "case(id, role, pair=''): this test is the refusal or a control (P, X) of catalogue case `id`")
    from acceptance.harness import fixtures
    from acceptance.harness.session import PairproofSession

    # A case's refusals and controls must judge one platform run (DESIGN §5 rule 1), and the verdict
    # checks that they did. Under xdist a module's tests go to one worker (loadfile), and a case's tests
    # live in one module. (xdist's loadgroup would say it better, but it renames node ids through an
    # attribute pytest 9 no longer reads, so it groups nothing.)
    if getattr(config.option, "dist", None) == "load" and getattr(config, "workerinput", None) is None:
        config.option.dist = "loadfile"
    workerinput = getattr(config, "workerinput", None)

    given = config.getoption("pairproof_run")
    if given is not None and not re.fullmatch(r"[0-9a-f]{8}", given):
        # Every canary and label of the run is made from it: a malformed one would fail each test at setup.
        raise pytest.UsageError(f"--pairproof-run {given!r}: a run id is 8 lowercase hex characters (e.g. 1a2b3c4d); "
                                "give one of that form, or drop the option to have one minted")
    key = config.getoption("pairproof_canaries")
    if key is not None and not re.fullmatch(r"[0-9a-f]{32}", key):
        raise pytest.UsageError(f"--pairproof-canaries {key!r}: the key is 32 lowercase hex characters; give one of "
                                "that form, or drop the option to have one made")
    run = (workerinput or {}).get("pairproof_run") or given or secrets.token_hex(4)
    session = PairproofSession(config, run=run, is_worker=workerinput is not None)
    config.stash[SESSION] = session
    for part, name in ((fixtures, "pairproof-fixtures"), (session, "pairproof-session")):
        # register() returns None for a name blocked with -p no:NAME: without either part nothing is judged
        # (no pairing, no proof, no verdict) while the tests still run and pass.
        if config.pluginmanager.register(part, name) is None:
            raise pytest.UsageError(f"-p no:{name}: pairproof cannot judge a run with part of its plugin blocked; "
                                    "drop the option, or -p no:pairproof to leave pairproof out altogether")
