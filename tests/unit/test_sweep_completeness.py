"""NT-3's socket sweep judged complete (``acceptance/cases/judges/netprobes.py``, ``sweep_problems``) on
completeness records shaped as ``listeners.walk_record`` makes them: a walk cut at its limit, a folder it could
not list for an odd reason, or could not list but may search, leaves the sweep unjudged (ProofError, broken);
a denial of a folder it cannot search either does not."""

from __future__ import annotations

import pytest

from acceptance.cases.judges import netprobes
from acceptance.errors import ProofError

COMPLETE = {"limit": 100000, "entries": 4812, "cut": "", "unlisted": {"/root": {"error": "errno 13", "searchable": False}}}


def test_a_complete_walk_has_no_problem():
    assert netprobes.sweep_problems({"walk": COMPLETE}) == []


@pytest.mark.parametrize("walk, problem", [
    (None, "the sweep gave no completeness record of its filesystem walk"),
    (dict(COMPLETE, cut="stopped after 100000 entries, in /data/many (under /)"),
     "the sweep's filesystem walk stopped after 100000 entries, in /data/many (under /): the sockets after it are unseen"),
    (dict(COMPLETE, unlisted={"/srv/x": {"error": "errno 5", "searchable": True}}),
     "the sweep could not list 1 folders for a reason other than a denial: {'/srv/x': {'error': 'errno 5', 'searchable': True}}"),
    (dict(COMPLETE, unlisted={"/run/shared": {"error": "errno 13", "searchable": True}}),
     "the sweep could not list 1 folders it may search (a socket in one is reachable by a name the walk cannot "
     "see): ['/run/shared']"),
])
def test_an_incomplete_walk_is_refused(walk, problem, monkeypatch):
    """Each way of not looking everywhere is named, and the sweep's report is refused before anything is
    judged from its knocks (the probe itself is not run: its report is given)."""
    report = {"knocks": {}, "connected": [], "entries": {}} | ({"walk": walk} if walk is not None else {})
    assert netprobes.sweep_problems(report) == [problem]
    monkeypatch.setattr(netprobes, "run_probe", lambda host, script, args: report)
    with pytest.raises(ProofError, match="did not look everywhere"):
        netprobes.sweep_report(object(), [])
