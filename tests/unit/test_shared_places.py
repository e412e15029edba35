"""FS-2's judging (``acceptance/cases/judges/sharing.py``) on write-then-look reports shaped as ``shared_probe.py``
makes them: what counts as shared, what leaves the case unproven, what the owner's own look must find."""

from __future__ import annotations

import pytest

from acceptance.cases.judges.sharing import (
    Exchange,
    findings_both_ways,
    require,
    required_problems,
    shared_findings,
    unseen_own,
    walk_problems,
)
from acceptance.errors import ProofError

OK = {"shm": "ok", "msg": "ok", "sem": "ok"}
WALKED = {"limit": 100000, "folders": 812, "cut": [], "unlisted": {"/root": "errno 13"}}  # complete (a denial only)


def _wrote(**places: dict) -> dict:
    base = {"/tmp": {"wrote": True, "id": "40:1"}, "/data": {"wrote": True, "id": "65024:7"}}
    base.update({k.replace("_", "/"): v for k, v in places.items()})
    return {"places": base, "sysv": OK, "ipc_ns": "ipc:[1]", "key": 99, "walk": WALKED}


def _looked(seen=(), sysv=(), places=None, ipc="ipc:[2]") -> dict:
    return {"seen": list(seen), "sysv_seen": list(sysv), "places": places or {"/tmp": "41:1", "/data": "65024:8"},
            "ipc_ns": ipc, "walk": WALKED}


def test_private_places_share_nothing():
    assert shared_findings(Exchange("B", "A", _wrote(), _looked())) == []


def test_a_marker_seen_is_a_finding_naming_the_place():
    ex = Exchange("B", "A", _wrote(_dev_shm={"wrote": True, "id": "27:1"}), _looked(seen=["/dev/shm"]))
    assert shared_findings(ex) == ["a file B wrote in its /dev/shm is visible to A at /dev/shm"]


def test_a_marker_seen_elsewhere_names_where_the_owner_saw_it():
    ex = Exchange("B", "A", _wrote(), _looked(seen=["/var/cache/shared"]))
    assert shared_findings(ex) == ["a file B wrote is visible to A at /var/cache/shared"]


def test_the_same_folder_identity_is_a_finding_even_unseen():
    ex = Exchange("B", "A", _wrote(_run_x={"wrote": True, "id": "9:9"}),
                  _looked(places={"/tmp": "41:1", "/run/y": "9:9", "/srv": "9:9"}))
    assert shared_findings(ex) == ["B's /run/x is the same folder (9:9) as A's /run/y, /srv"]


def test_a_place_the_intruder_could_not_write_is_not_compared():
    ex = Exchange("B", "A", _wrote(_opt={"wrote": False, "id": "9:9", "error": "errno 13"}),
                  _looked(places={"/opt": "9:9"}))
    assert shared_findings(ex) == []


def test_sysv_objects_and_one_ipc_namespace_are_findings():
    ex = Exchange("B", "A", _wrote(), _looked(sysv=["shm", "sem"], ipc="ipc:[1]"))
    assert shared_findings(ex) == ["the System V shm object B made (key 99) is in A's /proc/sysvipc/shm",
                                   "the System V sem object B made (key 99) is in A's /proc/sysvipc/sem",
                                   "B and A share one IPC namespace (ipc:[1])"]


@pytest.mark.parametrize("places, problem", [
    ({"/data": {"wrote": True, "id": "1:1"}}, "B did not try /tmp"),
    ({"/tmp": {"wrote": False, "error": "errno 30"}, "/data": {"wrote": True, "id": "1:1"}},
     "B could not write its own /tmp (errno 30)"),
    ({"/tmp": {"wrote": True, "id": "1:1"}}, "B did not try /data"),
])
def test_without_tmp_and_home_written_the_case_is_unproven(places, problem):
    ex = Exchange("B", "A", {"places": places, "sysv": OK, "ipc_ns": "ipc:[1]", "key": 1, "walk": WALKED}, _looked())
    assert required_problems(ex) == [problem]
    with pytest.raises(ProofError, match="proves nothing"):
        require(ex)


def test_the_owner_must_find_everything_it_made():
    wrote = _wrote(_dev_shm={"wrote": True, "id": "27:1"}, _dev={"wrote": False, "error": "errno 13"})
    full = Exchange("A", "A", wrote, _looked(seen=["/tmp", "/data", "/dev/shm"], sysv=["shm", "msg", "sem"]))
    assert unseen_own(full) == []
    blind = Exchange("A", "A", dict(wrote, sysv={"shm": "ok", "msg": "errno 38", "sem": "ok"}),
                     _looked(seen=["/tmp", "/data"], sysv=["shm", "sem"]))
    assert unseen_own(blind) == ["/dev/shm (written, not seen)", "System V msg (errno 38)"]


def test_a_folder_only_the_owner_can_write_is_seen_the_other_way():
    """A folder read-write in A and read-only in B: B writes nothing there, so B->A finds nothing; A->B, the
    marker A wrote is in B's view. Both ways are judged together."""
    b_to_a = Exchange("B", "A", _wrote(), _looked())
    a_to_b = Exchange("A", "B", _wrote(_run_shared={"wrote": True, "id": "65024:5"}),
                      _looked(seen=["/run/shared"], places={"/tmp": "41:1", "/data": "65024:8", "/run/shared": "65024:5"}))
    assert shared_findings(b_to_a) == []
    assert findings_both_ways([b_to_a, a_to_b]) == [
        "a file A wrote in its /run/shared is visible to B at /run/shared",
        "A's /run/shared is the same folder (65024:5) as B's /run/shared"]


def test_one_ipc_namespace_is_named_once_per_direction_and_nothing_when_private():
    assert findings_both_ways([Exchange("B", "A", _wrote(), _looked()), Exchange("A", "B", _wrote(), _looked())]) == []


@pytest.mark.parametrize("pairs", [[("B", "A")], [("A", "B")], [("A", "A")], [("B", "A"), ("B", "A")], []])
def test_the_refusal_must_look_both_ways(pairs):
    with pytest.raises(ProofError, match="both ways"):
        findings_both_ways([Exchange(w, lk, _wrote(), _looked()) for w, lk in pairs])


def test_each_way_must_have_written_its_tmp_and_home():
    blind = Exchange("A", "B", {"places": {"/data": {"wrote": True, "id": "1:1"}}, "sysv": OK, "ipc_ns": "ipc:[1]",
                                "key": 1, "walk": WALKED}, _looked())
    with pytest.raises(ProofError, match="A did not try /tmp"):
        findings_both_ways([Exchange("B", "A", _wrote(), _looked()), blind])


def test_a_file_mount_the_writer_could_open_is_compared_by_identity():
    """A log file bound read-write into both: nothing is written in it, but the same file on both sides is a
    finding; one only the looker has is not."""
    shared = Exchange("B", "A", _wrote(_var_log_agent={"opened": True, "id": "65024:9", "fstype": "a file mount"}),
                      _looked(places={"/tmp": "41:1", "/data": "65024:8", "/var/log/agent": "65024:9"}))
    assert shared_findings(shared) == ["B's /var/log/agent is the same file (65024:9) as A's /var/log/agent"]
    own = Exchange("B", "A", _wrote(_var_log_agent={"opened": True, "id": "65024:9"}), _looked())
    assert shared_findings(own) == []


def test_an_opened_file_is_not_required_to_be_seen_by_its_owner():
    wrote = _wrote(_var_log_agent={"opened": True, "id": "65024:9"})
    assert unseen_own(Exchange("A", "A", wrote, _looked(seen=["/tmp", "/data"], sysv=["shm", "msg", "sem"]))) == []


@pytest.mark.parametrize("walk, problem", [
    ({"limit": 2000, "folders": 2000, "cut": ["/usr"], "unlisted": {}},
     "B's write stopped its walk at 2000 folders under ['/usr']: the folders after are unseen"),
    ({"limit": 100000, "folders": 5, "cut": [], "unlisted": {"/srv/x": "errno 5"}},
     "B's write could not list 1 folders for a reason other than a denial: {'/srv/x': 'errno 5'}"),
    (None, "B's write gave no completeness record of its walk"),
    ({"limit": 100000, "folders": 5, "cut": [], "unlisted": {"/run/drop": "errno 13"}, "searchable": ["/run/drop"]},
     "B's write could not list 1 folders it may search (a place under one is reachable by a name the walk cannot "
     "see): ['/run/drop']"),
])
def test_a_walk_that_did_not_look_everywhere_leaves_the_case_unproven(walk, problem):
    """A write whose walk under its mount points stopped at the limit, could not list a folder for a reason
    other than a denial, or gave no record: the write-then-look is refused (broken), on either side; the same
    walk complete is not."""
    wrote = {k: v for k, v in _wrote().items() if k != "walk"} | ({"walk": walk} if walk is not None else {})
    assert walk_problems(wrote, "B", "write") == [problem]
    assert walk_problems(_wrote(), "B", "write") == []
    with pytest.raises(ProofError, match="stopped its walk|could not list|no completeness record"):
        findings_both_ways([Exchange("B", "A", wrote, _looked()), Exchange("A", "B", _wrote(), _looked())])
    looked = {k: v for k, v in _looked().items() if k != "walk"} | ({"walk": walk} if walk is not None else {})
    assert required_problems(Exchange("B", "A", _wrote(), looked)) == [problem.replace("B's write", "A's look")]
    assert unseen_own(Exchange("A", "A", _wrote(), _looked(seen=["/tmp", "/data"], sysv=["shm", "msg", "sem"]) | {
        "walk": walk})) != []


# The class of host-tmp-shared's survival (a share seen, then the case left unjudged by the look's own
# incompleteness): the instance (a folder unlisted but searchable, as the host's /tmp has) and three more ways a
# walk is incomplete, on either side.
INCOMPLETE = {
    "searchable": {"limit": 100000, "folders": 90000, "cut": [], "unlisted": {"/tmp/systemd-private-x": "errno 13"},
                   "searchable": ["/tmp/systemd-private-x"]},
    "cut": {"limit": 100000, "folders": 100000, "cut": ["/tmp"], "unlisted": {}},
    "odd-errno": {"limit": 100000, "folders": 12, "cut": [], "unlisted": {"/tmp/fuse": "errno 107"}},
    "no-record": None,
}


@pytest.mark.parametrize("side", ["look", "write"])
@pytest.mark.parametrize("walk", INCOMPLETE.values(), ids=INCOMPLETE.keys())
def test_a_share_seen_by_an_incomplete_look_is_a_finding_not_an_unjudged_case(walk, side):
    """The host's /tmp bound into both sandboxes: the look finds B's marker in A's /tmp, and a walk of either
    side did not look everywhere. The share was seen: the case fails on it (a mutant that binds the host's /tmp
    was once left unjudged by the walk's own incompleteness, then survived); nothing seen, the same walk proves
    nothing."""
    def blind(report):
        return {k: v for k, v in report.items() if k != "walk"} | ({"walk": walk} if walk is not None else {})

    wrote, looked = (_wrote(), blind(_looked(seen=["/tmp"]))) if side == "look" else (blind(_wrote()), _looked(seen=["/tmp"]))
    seen = Exchange("B", "A", wrote, looked)
    assert required_problems(seen) != []
    assert findings_both_ways([seen, Exchange("A", "B", _wrote(), _looked())]) == [
        "a file B wrote in its /tmp is visible to A at /tmp"]
    nothing = Exchange("B", "A", wrote, looked | {"seen": []})
    with pytest.raises(ProofError, match="stopped its walk|could not list|no completeness record"):
        findings_both_ways([nothing, Exchange("A", "B", _wrote(), _looked())])
