"""SN-1..SN-4: snapshots keep private state private at rest and belong to their owner; a restored instance
is a new generation, and what the old one held is refused; and the platform's root-side work on a volume (which
the instance controls: links, fifos, sparse and deep trees) reads and writes nothing outside it.

SN-1 does not take the snapshot's bytes on the driver's word alone: every file the platform wrote under its
state folder while taking the snapshot (the instances' volumes aside: they are the private state itself)
is found, the driver's ``snapshot_bytes`` must be one of them, and everything the snapshot left is scanned.
So a staging copy, a second archive or an index written beside the sealed snapshot is at rest too, and the
host sweep (``harness/restsweep.py``) reads everything else the platform wrote on the host since the session
started (a staging copy in /tmp). What it cannot see: a store off the host (object storage, another host).
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from acceptance.cases.test_model import BODY
from acceptance.contract import LOCATIONS
from acceptance.errors import ProofError, TargetError
from acceptance.harness import hostscan
from acceptance.harness.evidence import attach, calls_of, replay
from acceptance.harness.inotify import Watch
from acceptance.harness.probes import ProbeLog
from canaries.detect import walk_tree
from canaries.scan import AtRest

pytestmark = pytest.mark.usefixtures("planted")


def at_rest(blob: bytes, where: str, log: ProbeLog | None = None) -> AtRest:
    """Every canary in stored bytes through every compression and archive layer (``canaries.scan`` opens them,
    at any offset), each layer searched by the suite's engine on the host (``hostscan``: the static probe when
    built, which also decodes percent, JSON escapes and DNS labels; else detect.py), which proves in the same
    run that it sees its own sentinels. A scan that reached one of its bounds could not look at everything,
    which is a harness failure (broken)."""
    scan, judged = hostscan.at_rest(blob, where, log=log)
    layers = [f"{layer.path} ({layer.size} bytes)" for layer in scan.layers]
    attach(f"at rest: {where}", {"summary": scan.summary(), "layers": layers, "problems": scan.problems,
                                 "damaged": scan.partial, "engine": judged.report.engine})
    if scan.problems:
        message = f"the at-rest scan of {where} could not look at everything: {scan.problems[0]}"
        raise log.fail(message) if log is not None else ProofError(message)
    return scan


def _files(root: Path, skip: list[Path]) -> dict[Path, tuple[int, int]]:
    """(size, mtime) of every regular file under ``root``, outside the folders in ``skip``."""
    found = {}
    skipped = {p.resolve() for p in skip}
    for folder, dirs, names in walk_tree(str(root)):
        dirs[:] = [d for d in dirs if (Path(folder) / d).resolve() not in skipped]
        for name in names:
            path = Path(folder) / name
            try:
                info = path.lstat()
            except FileNotFoundError:
                continue
            if path.is_file() and not path.is_symlink():
                found[path] = (info.st_size, info.st_mtime_ns)
    return found


def written_by(target, operation) -> tuple[object, dict[Path, tuple[int, int] | None]]:
    """Run ``operation``; return its result and every file it left new or changed in the platform's state,
    live volumes aside, each with what it was before (None: new). What a snapshot leaves at rest may be more
    than the file it names: a staging copy, a cache."""
    art = target.artifacts()
    skip = list(art.volumes.values())
    before = _files(art.state_dir, skip)
    result = operation()
    after = _files(art.state_dir, skip)
    return result, {p: before.get(p) for p, stamp in sorted(after.items()) if before.get(p) != stamp}


def left_by_snapshot(written: dict[Path, tuple[int, int] | None], blob: bytes) -> list[Path]:
    """Of the files an operation wrote, those a snapshot leaves at rest: every new file, and every changed file
    beside the snapshot's own (the platform's other stores, a journal or a ledger that happened to change at
    the same moment, legitimately hold private data and are not the snapshot's)."""
    own = [p for p in written if p.stat().st_size == len(blob) and p.read_bytes() == blob]
    folders = {p.parent for p in own}
    return [p for p, was in written.items() if was is None or p.parent in folders]


def _owner_reads_back(target, ref, tokens: dict[str, str], why: str) -> None:
    """Every one of the owner's canaries reads back from ``ref``; otherwise what was scanned is not known to
    be the owner's data, and a refusal built on it proved nothing (a harness failure, broken)."""
    missing = [loc for loc, token in tokens.items() if token not in target.read_back(ref, loc)]
    if missing:
        raise ProofError(f"{why}: after restoring the scanned snapshot, {', '.join(missing)} did not come back")


# -- SN-1 ---------------------------------------------------------------------------------------------

@pytest.mark.case("SN-1", "refusal", pair="A->rest")
def test_sn1_snapshot_at_rest_holds_no_canary(instances, planted, target, probe_log, host_sweep):
    """No canary of A is in what A's snapshot leaves at rest, in any encoding, whatever the store did with it.

    Ways it could fail that the probe looks for: no encryption at all; encryption of a copy while a
    plaintext staging tar or cache stays beside it (every file the snapshot left new or changed in the
    platform's state is scanned, live volumes aside); any common compression or archive (zstd, gzip,
    zlib, xz, lzma, bz2, tar, zip), nested and at any offset behind a header; raw, base64 or hex bytes
    (and percent, JSON escapes and DNS labels when the static probe is the engine).
    Then everything the platform wrote on the host since the session started (the host sweep: /tmp, /var/tmp,
    /var/log, the state root, ...) holds none of A's canaries either. Not seen here: plaintext appended to a
    store the driver names as holding private data by design (``Artifacts.stores``).
    The same snapshot is then restored into A and every canary comes back: the bytes scanned are a
    snapshot of A's data, not an empty or unrelated file."""
    nonce = probe_log.platform_probe(instances["A"], "snapshot of A's volume")
    snap, changed = written_by(target, lambda: target.snapshot(instances["A"], request_id=nonce))
    blob = target.snapshot_bytes(snap)
    written = left_by_snapshot(changed, blob)
    if not any(p.stat().st_size == len(blob) and p.read_bytes() == blob for p in written):
        raise TargetError(f"the driver's bytes of snapshot {snap} are in no file the platform wrote at rest under "
                          f"its state folder while taking it ({len(changed)} files written)")
    scans = [at_rest(blob, f"snapshot {snap}", probe_log)] + [at_rest(p.read_bytes(), str(p), probe_log) for p in written]
    attach("SN-1 what was scanned", {"snapshot bytes": len(blob), "files the snapshot left": [str(p) for p in written],
                                     "bytes scanned over all layers": sum(s.bytes_scanned for s in scans)})
    assert set().union(*(s.tokens for s in scans)) & planted.of("A") == set()
    # Nor anywhere else on the host the platform wrote: a staging copy in /tmp is at rest as much as one beside it.
    assert host_sweep("SN-1: everything at rest on the host").holding(planted.of("A")) == {}
    probe_log.confirm(nonce, target.platform_log())
    _owner_reads_back(target, target.restore(snap, into=instances["A"]), planted.tokens["A"], "SN-1")


@pytest.mark.case("SN-1", "X", pair="A->rest")
def test_sn1_broken_unencrypted_snapshot_is_detected(instances, planted, target):
    """Through the platform's own snapshot path with encryption switched off, the same at-rest scan finds
    every canary of A through the store's compression, and that very snapshot restores them."""
    with target.broken_unencrypted_snapshot():
        snap = target.snapshot(instances["A"])
        scan = at_rest(target.snapshot_bytes(snap), f"unencrypted snapshot {snap}")
        restored = target.restore(snap, into=instances["A"])
    assert planted.of("A") <= scan.tokens
    _owner_reads_back(target, restored, planted.tokens["A"], "SN-1 X")


# -- SN-2 ---------------------------------------------------------------------------------------------

def _restore_outcome(target, snap: str, into, request_id: str = "") -> str | None:
    """None if the platform restored ``snap`` into ``into``; the refusal's text (ids blanked) otherwise."""
    try:
        target.restore(snap, into=into, request_id=request_id)
    except TargetError as exc:
        return str(exc).replace(snap, "<id>")
    return None


@pytest.mark.parametrize("intruder", [pytest.param(n, marks=pytest.mark.case("SN-2", "refusal", pair=f"{n}->A"), id=n)
                                      for n in ("B", "C")])
def test_sn2_others_cannot_list_or_restore_a_snapshot(intruder, instances, principals, planted, target, probe_log):
    """A's snapshot is not in the intruder's list; restoring it into the intruder's instance does not happen
    (the platform refuses, and the intruder's state still holds its own canaries and none of A's, at every
    location); and the refusal is the same as for a snapshot that does not exist, so it tells nobody that
    A's exists.

    Ways it could fail that the probe looks for: no owner check (with a shared key, or with the snapshot's
    own owner's key used to open it); a restore that reports a refusal after swapping the volume; a
    listing keyed by organization; a refusal that names the snapshot's owner or says it is damaged."""
    snap = target.snapshot(instances["A"])
    listed = target.snapshots(principals[intruder])
    assert snap not in listed
    nonce = probe_log.platform_probe(instances[intruder], f"restore {snap} into {intruder}")
    refused = _restore_outcome(target, snap, instances[intruder], request_id=nonce)
    own = {loc: target.read_back(instances[intruder], loc) for loc in LOCATIONS}
    attach("SN-2 what was compared", {"intruder's snapshots listed": len(listed), "restore refused": refused,
                                      "locations read back": {loc: len(text) for loc, text in own.items()}})
    assert [loc for loc, text in own.items() if any(t in text for t in planted.of("A"))] == []
    assert [loc for loc, token in planted.tokens[intruder].items() if token not in own[loc]] == []
    assert refused is not None, "the platform restored A's snapshot into another principal's instance"
    missing = _restore_outcome(target, "0123456789abcdef", instances[intruder])
    assert missing is not None and refused == missing.replace("0123456789abcdef", "<id>")
    probe_log.confirm(nonce, target.platform_log())


@pytest.mark.case("SN-2", "P", pair="A->A")
def test_sn2_owner_restores_with_canaries_intact(instances, principals, planted, target):
    snap = target.snapshot(instances["A"])
    assert snap in target.snapshots(principals["A"])
    restored = target.restore(snap, into=instances["A"])
    for location, token in planted.tokens["A"].items():
        assert token in target.read_back(restored, location)


# -- SN-3 ---------------------------------------------------------------------------------------------

# SN-3 restores an instance of its own: a restore of A here would judge A's model path after every case before
# it spent A's allowance (on hermes the P control met spend_exhausted once SN moved after the product cases),
# and a refusal that a spent allowance explains proves nothing about generations.
@pytest.fixture
def sam(dedicated):
    return dedicated("S", "sam")


@pytest.mark.case("SN-3", "refusal", pair="S->proxy")
def test_sn3_restored_instance_has_a_new_generation_and_old_tokens_die(sam, target, refused_by_proxy):
    """After a restore the instance reports the next generation, and the model capability it held before
    buys no model call (whichever check stops it: generation, lease)."""
    before = target.wake(sam).generation
    old = target.capabilities(sam)["model"]
    restored = target.restore(target.snapshot(sam), into=sam)
    assert restored.generation == before + 1
    assert not replay(refused_by_proxy, target, restored, old, BODY, "pre-restore capability").admitted


@pytest.mark.case("SN-3", "P", pair="S->proxy")
def test_sn3_new_token_works(sam, target):
    target.wake(sam)
    restored = target.restore(target.snapshot(sam), into=sam)
    before = calls_of(target, restored.principal)
    assert target.model_call(target.capabilities(restored)["model"], BODY)[0] == 200
    assert calls_of(target, restored.principal) == before + 1


# -- SN-4 ---------------------------------------------------------------------------------------------

# What an instance lays in its own volume for the platform's root-side work to trip on (run in its sandbox, as
# it, by the suite's shell): links to a folder and a file of the host's that only root may read, a fifo (an open
# by root would hang), a sparse file (8 MB, one block allocated), a folder nested 100 deep. No link to / or to
# anything of the host's but the case's own scratch folder: a platform that removes or chowns through links would
# do it to the host (the suite's hostile agent, in its own tests, links to /).
SN4_VOLUME = r"""set -e
mkdir -p /data/sn4/notes
echo "the agent's own note" > /data/sn4/notes/mine.md
ln -sfn {folder} /data/sn4/folder-link
ln -sfn {secret} /data/sn4/secret-link
mkfifo /data/sn4/fifo
dd if=/dev/zero of=/data/sn4/sparse bs=1 count=1 seek=8388607 2>/dev/null
d=/data/sn4/deep; i=0; while [ $i -lt 100 ]; do d=$d/d; i=$((i+1)); done; mkdir -p $d
echo laid"""
# What the instance sees of it after the restore: each link's target, the fifo's and the sparse file's kind, the
# content of every other regular file and the sparse file's count of non-empty lines (the secret must be in none).
SN4_LOOK = r"""cd /data/sn4 && for l in folder-link secret-link; do echo "link $l -> $(readlink $l)"; done
[ -p fifo ] && echo "fifo is a fifo"
echo "sparse is $(stat -c %s sparse) bytes"
find /data/sn4 -type f ! -name sparse | while read -r f; do echo "== $f"; cat "$f"; done
grep -c . sparse || true"""


@pytest.fixture
def outside() -> Iterator[tuple[Path, str]]:
    """A host folder only root may read, holding a fresh secret: what the instance's links point at. Removed
    after the test, whatever happens."""
    # In /run: no sweep of the harness walks it (restsweep walks /tmp, /var/tmp...), so every event is the platform's.
    folder = Path(tempfile.mkdtemp(prefix="pairproof-sn4-", dir="/run"))
    try:
        os.chmod(folder, 0o700)
        secret = f"sn4-outside-{secrets.token_hex(8)}"
        (folder / "secret").write_text(secret + "\n")
        os.chmod(folder / "secret", 0o600)
        yield folder, secret
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _lay(sandbox_host, ref, folder: Path) -> None:
    laid = sandbox_host(ref).run("sh -c %s", SN4_VOLUME.format(folder=folder, secret=folder / "secret"))
    if laid.rc != 0 or laid.stdout.strip() != "laid":
        raise ProofError(f"SN-4 could not lay its volume in {ref.key}: rc {laid.rc} {laid.stderr[-300:]!r}")


@pytest.mark.case("SN-4", "refusal", pair="H->host")
def test_sn4_root_side_work_on_a_hostile_volume_stays_inside_it(dedicated, target, sandbox_host, outside):
    """An instance of its own lays links to a root-only host folder and file, a fifo, a sparse file
    and a deep folder in its volume; the platform snapshots it and restores the snapshot into it, twice. The
    kernel's record (inotify on the host folder and file) shows no open or read of either, the secret is in
    nothing the instance sees after, its links come back as the same links, and the host file is still root's
    own (a restore that chowns through a link hands it to the instance)."""
    folder, secret = outside
    before = os.stat(folder / "secret")
    ref = dedicated("H", "hana")
    _lay(sandbox_host, ref, folder)
    watch = Watch(folder, folder / "secret")
    try:
        for _ in range(2):
            try:
                ref = target.restore(target.snapshot(ref), into=ref)
            except TargetError as exc:
                raise AssertionError(f"the platform could not snapshot and restore a volume holding links, a fifo, a "
                                     f"sparse file and a folder 100 deep: {exc}") from exc
        events = watch.events()
    finally:
        watch.close()
    look = sandbox_host(ref).run("sh -c %s", SN4_LOOK)
    after = os.stat(folder / "secret")
    attach("SN-4: the host folder's record and what the instance sees after two restores",
           {"inotify events": events, "the instance's view": look.stdout[-4000:],
            "host file owner and mode (before, after)": [(before.st_uid, oct(before.st_mode)),
                                                         (after.st_uid, oct(after.st_mode))]})
    assert events == [], f"root opened or read the host folder the instance's links point at: {events[:5]}"
    assert secret not in look.stdout, "the host file's secret is in the restored instance's volume"
    assert (after.st_uid, after.st_gid, after.st_mode) == (before.st_uid, before.st_gid, before.st_mode)
    links = [line for line in look.stdout.splitlines() if line.startswith("link ")]
    assert links == [f"link folder-link -> {folder}", f"link secret-link -> {folder / 'secret'}"], \
        look.stdout[-2000:]


@pytest.mark.case("SN-4", "X", pair="H->host")
def test_sn4_broken_copy_that_follows_links_is_seen(dedicated, target, sandbox_host, outside, tmp_path):
    """The same volume copied the careless way, by the harness as root (``shutil.copytree`` by path, links
    followed): the same watch records the host folder opened and read, and the secret is in the copy. The audit
    sees what the refusal says did not happen."""
    folder, secret = outside
    ref = dedicated("H", "hana")
    _lay(sandbox_host, ref, folder)
    volume = target.artifacts().volumes[ref.key]
    watch = Watch(folder, folder / "secret")
    try:
        shutil.copytree(volume / "sn4", tmp_path / "copy", symlinks=False,
                        ignore=shutil.ignore_patterns("fifo", "deep"))
        events = watch.events()
    finally:
        watch.close()
    copied = [p for p in (tmp_path / "copy").rglob("*") if p.is_file() and secret in p.read_text(errors="replace")]
    attach("SN-4 X: a copy that follows links", {"inotify events": events, "files holding the secret":
                                                 [str(p.relative_to(tmp_path)) for p in copied]})
    assert events, "the watch recorded nothing of a copy that read the host folder"
    assert copied, "the secret is not in a copy that followed the links"
