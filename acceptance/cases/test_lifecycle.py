"""SN-1..SN-3 and LF-1..LF-3: snapshots keep private state private at rest and belong to their owner;
rotation, revocation and recreation leave no old credential working.

SN-1 does not take the snapshot's bytes on the driver's word alone: every file the platform wrote under its
state folder while taking the snapshot (the instances' volumes aside: they are the private state itself)
is scanned, and the driver's ``snapshot_bytes`` must be one of them. So a staging copy, a second archive or
an index written beside the sealed snapshot is at rest too. What it cannot see: a store outside the state
folder the driver names (object storage, another host). LF-3 checks the broker address the driver gives
against the sockets the host shows listening in the instance's network namespace.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from canaries import detect

from .. import observe
from ..errors import TargetError
from .test_model import BODY

pytestmark = pytest.mark.usefixtures("planted")


def tokens_at_rest(blob: bytes) -> set[str]:
    """Canaries in stored bytes, looking through the layers a snapshot store might leave readable: a
    zstandard frame anywhere in the file (behind a header, say), tar inside it, and the bytes themselves,
    in every encoding the detector knows."""
    import zstandard

    layers = [blob]
    start = blob.find(ZSTD_MAGIC)
    while start != -1:
        try:
            reader = zstandard.ZstdDecompressor().stream_reader(blob[start:], read_across_frames=False)
            layers.append(reader.read(1 << 30))
        except zstandard.ZstdError:
            pass
        start = blob.find(ZSTD_MAGIC, start + 1)
    for layer in list(layers):
        try:
            with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
                layers += [tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()]
        except tarfile.TarError:
            pass
    return {h.token for layer in layers for h in detect.find(layer)}


ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def files_at_rest(root: Path, skip: Iterable[Path]) -> dict[Path, tuple[int, int, int]]:
    """Every file under ``root`` (less the folders ``skip``), with what changes when it is written."""
    skip = {Path(p).resolve() for p in skip}
    found = {}
    for folder, subfolders, names in os.walk(root):
        here = Path(folder)
        subfolders[:] = [d for d in subfolders if (here / d).resolve() not in skip]
        for name in names:
            try:
                st = (here / name).lstat()
            except FileNotFoundError:
                continue
            found[here / name] = (st.st_ino, st.st_mtime_ns, st.st_size)
    return found


# -- SN-1 ---------------------------------------------------------------------------------------------

@pytest.mark.case("SN-1", "refusal", pair="A->rest")
def test_sn1_snapshot_at_rest_holds_no_canary(instances, planted, target, probe_log):
    artifacts = target.artifacts()
    before = files_at_rest(artifacts.state_dir, artifacts.volumes.values())
    nonce = probe_log.platform_probe(instances["A"], "snapshot of A's volume")
    snap = target.snapshot(instances["A"], request_id=nonce)
    written = {path: path.read_bytes() for path, seen in files_at_rest(artifacts.state_dir, artifacts.volumes.values()).items()
               if before.get(path) != seen}
    blob = target.snapshot_bytes(snap)
    if blob not in written.values():
        raise TargetError(f"the driver's bytes of snapshot {snap} are in no file the platform wrote at rest under "
                          f"{artifacts.state_dir} while taking it ({len(written)} files written)")
    assert tokens_at_rest(blob) & planted.of("A") == set()
    leaked = {str(path): sorted(found) for path, data in written.items()
              if (found := tokens_at_rest(data) & planted.of("A"))}
    assert leaked == {}, "A's canaries are at rest in files written with the snapshot"
    probe_log.confirm(nonce, target.platform_log())


@pytest.mark.case("SN-1", "X", pair="A->rest")
def test_sn1_broken_unencrypted_snapshot_is_detected(instances, planted, target):
    with target.broken("unencrypted-snapshot", ref=instances["A"]) as blob:
        assert planted.of("A") <= tokens_at_rest(blob)


# -- SN-2 ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("intruder", [pytest.param(n, marks=pytest.mark.case("SN-2", "refusal", pair=f"{n}->A"), id=n)
                                      for n in ("B", "C")])
def test_sn2_others_cannot_list_or_restore_a_snapshot(intruder, instances, principals, planted, target, probe_log):
    snap = target.snapshot(instances["A"])
    assert snap not in target.snapshots(principals[intruder])
    nonce = probe_log.platform_probe(instances[intruder], f"restore {snap} into {intruder}")
    with pytest.raises(TargetError, match="not_found"):
        target.restore(snap, into=instances[intruder], request_id=nonce)
    own = target.read_back(instances[intruder], "memory")
    assert planted.tokens[intruder]["memory"] in own and planted.tokens["A"]["memory"] not in own
    probe_log.confirm(nonce, target.platform_log())


@pytest.mark.case("SN-2", "P", pair="A->A")
def test_sn2_owner_restores_with_canaries_intact(instances, principals, planted, target):
    snap = target.snapshot(instances["A"])
    assert snap in target.snapshots(principals["A"])
    restored = target.restore(snap, into=instances["A"])
    for location, token in planted.tokens["A"].items():
        assert token in target.read_back(restored, location)


# -- SN-3 ---------------------------------------------------------------------------------------------

@pytest.mark.case("SN-3", "refusal", pair="A->proxy")
def test_sn3_restored_instance_has_a_new_generation_and_old_tokens_die(instances, target, refused_by_proxy):
    old = target.capabilities(instances["A"])["model"]
    before = target.wake(instances["A"]).generation
    restored = target.restore(target.snapshot(instances["A"]), into=instances["A"])
    assert restored.generation == before + 1
    assert refused_by_proxy(instances["A"], old, BODY) == (403, "generation_stale")


@pytest.mark.case("SN-3", "P", pair="A->proxy")
def test_sn3_new_token_works(instances, target):
    restored = target.restore(target.snapshot(instances["A"]), into=instances["A"])
    assert target.model_call(target.capabilities(restored)["model"], BODY)[0] == 200


# -- LF-1 / LF-2 / LF-3 ---------------------------------------------------------------------------------

@pytest.fixture
def gina(dedicated):
    return dedicated("G", "gina")


@pytest.mark.case("LF-1", "refusal", pair="G->proxy")
def test_lf1_rotated_credentials_old_ones_refused(gina, target, refused_by_proxy):
    old = target.capabilities(gina)["model"]
    target.rotate(gina)
    assert target.capabilities(gina)["model"] != old
    assert refused_by_proxy(gina, old, BODY) == (403, "lease_stale")


@pytest.mark.case("LF-1", "P", pair="G->proxy")
def test_lf1_new_credentials_work(gina, target):
    target.rotate(gina)
    assert target.model_call(target.capabilities(gina)["model"], BODY)[0] == 200
    assert target.turn(gina, "still working?") == "ok"


@pytest.mark.case("LF-2", "refusal", pair="G->proxy")
def test_lf2_revocation_stops_new_and_in_flight_calls(gina, target, refused_by_proxy):
    """After the kill switch, the capability the broker already holds (the one any in-flight call uses) is
    refused, and a new turn gets no model call through."""
    held = target.capabilities(gina)["model"]
    target.revoke(gina)
    assert refused_by_proxy(gina, held, BODY) == (403, "revoked")
    assert target.turn(gina, "anything?") == "model unavailable: revoked"


@pytest.mark.case("LF-2", "P", pair="G->proxy")
def test_lf2_before_revocation_works(gina, target):
    assert target.turn(gina, "hello") == "ok"


def _broker_listens(target, ref, endpoint: str) -> None:
    """The driver's broker address must be a socket the host shows listening in the instance's network
    namespace; otherwise the driver's word is not where the broker is (broken)."""
    where = urlsplit(endpoint)
    listening = observe.listening_ports(target.identity(ref).host_pid)
    if (where.hostname, where.port) not in listening and ("0.0.0.0", where.port) not in listening:
        raise TargetError(f"nothing listens at the broker address the driver gives ({endpoint}) in {ref.key}'s "
                          f"network namespace: {sorted(listening)}")


@pytest.mark.case("LF-3", "refusal", pair="G->proxy")
def test_lf3_recreated_instance_refuses_the_old_token_at_the_same_address(gina, target, refused_by_proxy):
    old = target.capabilities(gina)["model"]
    endpoint = target.broker_endpoint(gina)
    _broker_listens(target, gina, endpoint)
    again = target.recreate(gina)
    assert target.broker_endpoint(again) == endpoint  # the address is reused...
    _broker_listens(target, again, endpoint)
    assert refused_by_proxy(again, old, BODY) == (403, "generation_stale")  # ...the token is not


@pytest.mark.case("LF-3", "P", pair="G->proxy")
def test_lf3_new_token_works(gina, target):
    again = target.recreate(gina)
    assert target.model_call(target.capabilities(again)["model"], BODY)[0] == 200


# -- LF-4 / LF-5: crash and recovery ----------------------------------------------------------------------

@pytest.fixture
def hank(dedicated):
    return dedicated("H", "hank")


def _until(predicate, what: str, deadline: float = 20.0):
    import time

    end = time.monotonic() + deadline
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {deadline}s")


@pytest.mark.case("LF-4", "refusal", pair="H")
def test_lf4_crash_mid_run(hank, target, refused_by_proxy):
    """SIGKILL while a run waits on the model: after recovery the conversation is there, the lost run is
    reported not found, and the crashed generation's capability is fenced."""
    target.script_model(hank.principal, [{"reply": "too late", "delay": 5}])
    status, started = target.runctl(hank, "POST", "/v1/runs", {"input": "remember: the crash marker"})
    assert status == 202
    _until(lambda: [r for r in target.provider_records() if r["user"] == "org3:hank" and r["purpose"] == "turn"],
           "the run's model call")
    stale = target.capabilities(hank)["model"]
    target.crash(hank)
    successor = target.recover(hank)
    assert "the crash marker" in target.read_back(successor, "transcript")
    status, body = _until(lambda: (a := target.runctl(successor, "GET", f"/v1/runs/{started['run_id']}"))[0] != 502 and a,
                          "the successor's run-control API")
    assert (status, (body.get("error") or {}).get("code")) == (404, "run_not_found")
    assert refused_by_proxy(successor, stale, BODY) == (403, "generation_stale")


@pytest.mark.case("LF-4", "P", pair="H")
def test_lf4_successor_is_admitted(hank, target):
    target.crash(hank)
    successor = target.recover(hank)
    assert target.turn(successor, "are you back?") == "ok"


def _notes_with(target, principal, body: str) -> int:
    records = target.person(principal).request("GET", "/api/records?kind=note")[1]["records"]
    return sum(r["body"] == body for r in records)


@pytest.mark.case("LF-5", "refusal", pair="H->product")
def test_lf5_unknown_effect_is_reconciled_not_repeated(hank, target, probe_log):
    """A note whose creation reached the product but whose answer was lost is 'unknown'; recovery asks the
    product, marks it completed and does not send it again: exactly one note."""
    marker = "effect-with-lost-answer"
    target.script_model(hank.principal, [{"tool": "notes_create", "arguments": {"body": marker}}, {"reply": "done"}])
    with target.broken("lossy-product-link", ref=hank):
        target.turn(hank, "make the note")
    [op] = [o for o in target.journal(hank) if o["request"]["params"]["arguments"].get("body") == marker]
    assert op["state"] == "unknown"
    nonce = probe_log.platform_probe(hank, f"recovery reconciles {op['op']}")
    target.recover(hank, request_id=nonce)
    [after] = [o for o in target.journal(hank) if o["op"] == op["op"]]
    assert (after["state"], after["attempts"]) == ("completed", 1)
    assert _notes_with(target, hank.principal, marker) == 1
    probe_log.confirm(nonce, target.platform_log())


@pytest.mark.case("LF-5", "P", pair="H->product")
def test_lf5_not_dispatched_effect_is_retried_once(hank, target):
    marker = "effect-never-sent"
    target.script_model(hank.principal, [{"tool": "notes_create", "arguments": {"body": marker}}, {"reply": "done"}])
    with target.broken("unreachable-product", ref=hank):
        target.turn(hank, "make the note")
    [op] = [o for o in target.journal(hank) if o["request"]["params"]["arguments"].get("body") == marker]
    assert op["state"] == "not_dispatched" and _notes_with(target, hank.principal, marker) == 0
    target.recover(hank)
    [after] = [o for o in target.journal(hank) if o["op"] == op["op"]]
    assert (after["state"], after["attempts"]) == ("completed", 2)
    assert _notes_with(target, hank.principal, marker) == 1


# -- LF-5 at every kill point -------------------------------------------------------------------------------

KILL_POINTS = {
    # where the agent dies relative to one tool call's effect, and the link fault that puts it there
    "before-dispatch": "unreachable-product",
    "after-dispatch-before-answer": "lossy-product-link",
    "after-answer": None,
}


@pytest.mark.case("LF-5", "refusal", pair="H->product")
@pytest.mark.parametrize("point", sorted(KILL_POINTS))
def test_lf5_one_effect_per_operation_whatever_the_kill_point(point, hank, target, probe_log):
    """The agent is SIGKILLed with one effect before dispatch, sent but unanswered, or answered; after
    recovery the product holds exactly one effect of that operation."""
    marker = f"kill-point-{point}"
    target.script_model(hank.principal, [{"tool": "notes_create", "arguments": {"body": marker}}, {"reply": "done"}])
    fault = KILL_POINTS[point]
    if fault is None:
        target.turn(hank, "make the note")
    else:
        with target.broken(fault, ref=hank):
            target.turn(hank, "make the note")
    [op] = [o for o in target.journal(hank) if o["request"]["params"]["arguments"].get("body") == marker]
    target.crash(hank)
    nonce = probe_log.platform_probe(hank, f"recovery after a kill {point}")
    successor = target.recover(hank, request_id=nonce)
    [after] = [o for o in target.journal(successor) if o["op"] == op["op"]]
    assert after["state"] == "completed"
    assert _notes_with(target, hank.principal, marker) == 1
    probe_log.confirm(nonce, target.platform_log())
