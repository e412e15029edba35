"""acceptance.harness.restsweep: the host at-rest sweep reads every file created or changed since its baseline,
names what it leaves out, and proves with a sentinel in every root that it looked there."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from acceptance.errors import ProofError
from acceptance.harness import restsweep
from canaries import Mint

MINT = Mint("0123abcd")
TOKEN = MINT.mint("a", "mem").token
OTHER = MINT.mint("a", "tr").token


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    roots = {name: tmp_path / name for name in ("state", "tmp", "log")}
    for path in roots.values():
        path.mkdir()
    (roots["tmp"] / "old.txt").write_bytes(TOKEN.encode())  # at rest before the session: not the platform's
    monkeypatch.setattr(restsweep, "HOST_ROOTS", (str(roots["tmp"]), str(roots["log"]), str(tmp_path / "absent")))
    return roots


def test_only_what_was_created_or_changed_is_read_and_found_in_its_file(host: dict[str, Path]) -> None:
    baseline = restsweep.take(host["state"])
    run = host["state"] / "runs" / "r1"
    (run / "volume").mkdir(parents=True)
    (run / "volume" / "mine.txt").write_bytes(TOKEN.encode())  # the instance's own volume: excluded
    (run / "product.sqlite").write_bytes(OTHER.encode())  # a named store: listed, not read
    dump = host["tmp"] / "crash.dump"
    dump.write_bytes(b"HDR\x00" + gzip.compress(TOKEN.encode()))
    swept = restsweep.sweep(baseline, state_dir=run, excluded={str(run / "volume"): "the volume"},
                            stores={str(run / "product.sqlite"): "the product's database"})
    assert swept.holding({TOKEN, OTHER}) == {TOKEN: [str(dump)]}
    record = swept.record
    assert record["root sentinels found"] == "4 of 4"  # state root, tmp, log, and the run's state folder
    assert record["created"] == 2 + 4 and record["changed"] == 0  # the dump, the store, the sentinels
    assert str(host["state"].parent / "absent") in record["not roots, and why"]
    assert list(record["stores named by the driver, not scanned"]) == [str(run / "product.sqlite")]


def test_a_root_the_walk_did_not_reach_is_a_proof_error(host: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    baseline = restsweep.take(host["state"])
    walk = restsweep.walk

    def blind(roots, excluded=()):
        files, unreadable = walk(roots, excluded)
        return {p: s for p, s in files.items() if not p.startswith(str(host["log"]))}, unreadable

    monkeypatch.setattr(restsweep, "walk", blind)
    with pytest.raises(ProofError, match="did not look there"):
        restsweep.sweep(baseline, state_dir=host["state"], excluded={})


def test_past_the_bound_the_sweep_is_broken_and_names_the_largest(host: dict[str, Path],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    baseline = restsweep.take(host["state"])
    (host["tmp"] / "big.bin").write_bytes(b"x" * 2048)
    monkeypatch.setattr(restsweep, "MAX_BYTES", 1024)
    with pytest.raises(ProofError, match="big.bin"):
        restsweep.sweep(baseline, state_dir=host["state"], excluded={})


def _overlay(base: Path) -> Path:
    """A real overlay mount (an image's lower layer, an upper layer, the merged view), as Docker makes one."""
    for name in ("lower", "upper", "work", "merged"):
        (base / name).mkdir(parents=True)
    (base / "lower" / "image-file").write_bytes(b"from the image\n")
    import subprocess

    subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                    f"lowerdir={base / 'lower'},upperdir={base / 'upper'},workdir={base / 'work'}", str(base / "merged")],
                   check=True)
    return base / "merged"


def test_the_engines_merged_overlay_is_left_out_its_writable_layer_read(host: dict[str, Path], tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A running container's merged root, in the engine's data root, shows the image's files through new
    inodes: not walked, said why; what the container wrote is its upper layer, read. An overlay anywhere else
    (the platform's own, under its state root) is walked like any folder."""
    engine = tmp_path / "engine"
    engine.mkdir()
    monkeypatch.setattr(restsweep, "engine_root", lambda target: str(engine))
    baseline = restsweep.take(host["state"], "docker")
    assert baseline.engine_root == str(engine)
    merged = _overlay(engine / "overlay2" / "c1")
    mine = _overlay(host["state"] / "platform-overlay")
    try:
        (merged / "written-by-the-container").write_bytes(TOKEN.encode())  # lands in c1/upper
        (mine / "written-by-the-platform").write_bytes(OTHER.encode())
        swept = restsweep.sweep(baseline, state_dir=host["state"], excluded={})
    finally:
        import subprocess

        for point in (merged, mine):
            subprocess.run(["umount", str(point)], check=True)
    assert swept.holding({TOKEN, OTHER}) == {
        TOKEN: [str(engine / "overlay2" / "c1" / "upper" / "written-by-the-container")],
        OTHER: sorted([str(host["state"] / "platform-overlay" / "upper" / "written-by-the-platform"),
                       str(mine / "written-by-the-platform")])}
    assert str(merged) in swept.record["excluded, and why"]
    assert str(mine) not in swept.record["excluded, and why"]


def test_every_small_file_is_joined_however_full_the_join_is(host: dict[str, Path],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The join's bound (its views, about eight times each file) filled by the files before: the sweep searches
    what it holds and begins a new batch, so a canary cut across two records of the last small file is still
    found (before, past the bound every later file was read alone, and the cut canary passed)."""
    from canaries import records

    monkeypatch.setattr(records, "MAX_VIEW_BYTES", 96 << 10)
    baseline = restsweep.take(host["state"])
    for number in range(8):
        (host["tmp"] / f"cache-{number}.log").write_bytes(b"filler line of a busy platform\n" * 330)  # ~10 KiB
    cut = host["tmp"] / "zz-last.log"
    cut.write_bytes(b"x" * 10_500 + b"\n" + records.split_forms(TOKEN.encode())["base64 halves"])
    swept = restsweep.sweep(baseline, state_dir=host["state"], excluded={})
    assert swept.holding({TOKEN}) == {TOKEN: [str(cut)]}
    assert swept.record["join batches (one engine run each)"] > 1
    assert swept.record["read alone, not joined (past JOIN_MAX)"] == 0


def test_an_engine_overlay_whose_layer_is_not_walked_is_walked_itself(host: dict[str, Path], tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine that keeps a container's writable layer outside the sweep's roots (an external containerd's
    store): its merged root is the only place the sweep sees the container's writes, so it is walked."""
    engine = tmp_path / "engine"
    engine.mkdir()
    elsewhere = tmp_path / "containerd-store"
    monkeypatch.setattr(restsweep, "engine_root", lambda target: str(engine))
    baseline = restsweep.take(host["state"], "docker")
    for name in ("lower", "upper", "work"):
        (elsewhere / name).mkdir(parents=True)
    merged = engine / "rootfs" / "c2"
    merged.mkdir(parents=True)
    import subprocess

    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", f"lowerdir={elsewhere / 'lower'},upperdir="
                    f"{elsewhere / 'upper'},workdir={elsewhere / 'work'}", str(merged)], check=True)
    try:
        (merged / "written-by-the-container").write_bytes(TOKEN.encode())
        swept = restsweep.sweep(baseline, state_dir=host["state"], excluded={})
    finally:
        subprocess.run(["umount", str(merged)], check=True)
    assert swept.holding({TOKEN}) == {TOKEN: [str(merged / "written-by-the-container")]}
