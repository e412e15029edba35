"""A snapshot is taken by root of a volume the instance controls (issue 28 items 1 and 2): what the instance
puts there, or swaps in while it is read, must not make root read anything outside it, nor hold more than
the store's budget in memory.

Each hole is shown against the packer as it was (``tarfile.add`` of the volume's path, reproduced here as
``_packed_before``) and against ``runtime.snapshots.pack``: the old one follows a folder swapped for a link
after it was listed, and reads a sparse file of any apparent size whole into memory; the new one does neither.
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from acceptance.harness.inotify import Watch
from runtime import snapshots
from runtime.errors import InstanceError
from runtime.snapshots import SnapshotError, SnapshotStore, pack

MARKER = b"host-secret-7c1e"


def _packed_before(volume: Path) -> bytes:
    """The packer before issue 28: ``tarfile.add`` by path, recursively, as root."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(volume, arcname=".")
    return buffer.getvalue()


def _packed_now(volume: Path) -> bytes:
    return pack(volume, uid=None)[0]


def _members(packed: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(packed)) as tar:
        return {m.name: (tar.extractfile(m).read() if m.isfile() else m.type) for m in tar.getmembers()}


@pytest.fixture
def volume_and_outside(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "shadow").write_bytes(MARKER + b"\n")
    volume = tmp_path / "volume"
    (volume / "notes").mkdir(parents=True)
    (volume / "notes" / "a.md").write_text("mine\n")
    return volume, outside


def _swap(volume: Path, outside: Path) -> None:
    """What the agent does between root's listing of notes/ and its reading of it: the folder becomes a link."""
    (volume / "notes").rename(volume / "notes.moved")
    (volume / "notes").symlink_to(outside)


@pytest.mark.parametrize("packer", ["before", "now"])
def test_a_folder_swapped_for_a_link_while_it_is_packed_leads_nowhere(volume_and_outside, monkeypatch, packer):
    """The swap lands right after root saw notes/ as a folder. Before: the walk went on by path, through the
    link, and the host's file was packed (then restored into the volume, for the agent to read). Now: every
    name is opened relative to its folder's descriptor with O_NOFOLLOW, and what the link leads to is never
    read."""
    volume, outside = volume_and_outside
    if packer == "before":
        original = tarfile.TarFile.gettarinfo

        def gettarinfo(self, name=None, *args, **kwargs):
            info = original(self, name, *args, **kwargs)
            if name is not None and str(name).endswith("/notes") and info.isdir():
                _swap(volume, outside)
            return info

        monkeypatch.setattr(tarfile.TarFile, "gettarinfo", gettarinfo)
        packed = _packed_before(volume)
    else:
        monkeypatch.setattr(snapshots, "walk", _swapping_after_the_top(snapshots.walk, volume, outside))
        watch = Watch(outside)
        try:
            with pytest.raises(SnapshotError, match="changed while the snapshot was taken|could not be walked"):
                _packed_now(volume)
            assert watch.events() == []  # the outside folder was not even opened
        finally:
            watch.close()
        return
    leaked = [name for name, data in _members(packed).items() if isinstance(data, bytes) and MARKER in data]
    assert leaked == ["./notes/shadow"]


def _swapping_after_the_top(walker, volume: Path, outside: Path):
    """``walker`` with the agent's swap landing right after root listed the volume (and saw notes/ a folder)."""
    def swapping(*args, **kwargs):
        walk = walker(*args, **kwargs)
        yield next(walk)
        _swap(volume, outside)
        yield from walk
    return swapping


def test_os_fwalk_opens_a_folder_swapped_for_a_link_and_runtime_walk_does_not(volume_and_outside):
    """Why the walk is the project's own: ``os.fwalk(follow_symlinks=False)`` opens a listed folder by name and
    only then compares it with the listing, so root opens the folder the link names (the kernel's inotify
    record shows it) and skips it in silence; ``runtime.walk`` opens with O_NOFOLLOW, touches nothing outside
    and says which folder it could not enter."""
    from runtime.walk import walk

    volume, outside = volume_and_outside
    for walker in ("os.fwalk", "runtime.walk"):
        if (volume / "notes").is_symlink():
            (volume / "notes").unlink()
            (volume / "notes.moved").rename(volume / "notes")
        errors: list[OSError] = []
        if walker == "os.fwalk":
            walks = _swapping_after_the_top(os.fwalk, volume, outside)(volume, follow_symlinks=False,
                                                                         onerror=errors.append)
        else:
            walks = _swapping_after_the_top(walk, volume, outside)(volume, onerror=errors.append)
        watch = Watch(outside)
        try:
            seen = [path for path, *_ in walks]
            events = watch.events()
        finally:
            watch.close()
        if walker == "os.fwalk":
            assert events and errors == [] and seen == [str(volume)]  # opened, then dropped without a word
        else:
            assert events == [] and [e.filename for e in errors] == [str(volume / "notes")]


def test_links_are_packed_as_links_and_never_followed(volume_and_outside):
    volume, outside = volume_and_outside
    (volume / "to-shadow").symlink_to(outside / "shadow")
    (volume / "to-outside").symlink_to(outside)
    members = _members(_packed_now(volume))
    assert members["./to-shadow"] == tarfile.SYMTYPE and members["./to-outside"] == tarfile.SYMTYPE
    assert not any(isinstance(d, bytes) and MARKER in d for d in members.values())


@pytest.mark.parametrize("packer", ["before", "now"])
def test_a_sparse_file_past_the_budget_is_refused_before_it_is_read(tmp_path, packer):
    """Before: a sparse file's apparent size was read whole into the root process's memory (a terabyte takes
    the host down; 8 MiB here shows it). Now: its size counts against the budget before a byte is read."""
    volume = tmp_path / "volume"
    volume.mkdir()
    with open(volume / "sparse", "wb") as f:
        f.truncate(8 << 20)
    if packer == "before":
        assert len(_packed_before(volume)) >= 8 << 20
        return
    with pytest.raises(SnapshotError) as refused:
        pack(volume, uid=None, budget=1 << 20)
    assert refused.value.reason == "too_large" and "sparse" in str(refused.value)
    with open(volume / "sparse", "wb") as f:
        f.truncate(1 << 40)  # a terabyte, with the store's own budget
    with pytest.raises(SnapshotError, match="budget"):
        SnapshotStore(tmp_path / "state").take(volume, org="o", user="u", instance="i", generation=1)


def test_fifos_sockets_and_files_of_another_uid_are_left_out(tmp_path):
    """A fifo (root opening it would block), a socket, and a hard link to a file another uid owns (the agent
    cannot read it, root can): none is packed, each is named in what was left out."""
    import socket

    volume = tmp_path / "volume"
    volume.mkdir()
    os.mkfifo(volume / "fifo")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(volume / "sock"))
    theirs = tmp_path / "theirs"
    theirs.write_bytes(MARKER)
    os.chown(theirs, 65534, 65534)
    os.link(theirs, volume / "hardlink")
    (volume / "own.md").write_text("mine\n")
    try:
        packed, left_out = pack(volume, uid=os.getuid())
    finally:
        listener.close()
    assert sorted(_members(packed)) == [".", "./own.md"]
    assert sorted(line.split(":")[0] for line in left_out) == ["./fifo", "./hardlink", "./sock"]
    assert any("owned by uid 65534" in line for line in left_out)


def test_what_is_packed_restores_as_it_was(tmp_path):
    """The descriptor walk packs what the path walk did: folders, files, links, modes; restore gives it back."""
    volume = tmp_path / "volume"
    (volume / "a" / "b").mkdir(parents=True)
    (volume / "a" / "b" / "deep.md").write_text("deep\n")
    (volume / "top.md").write_text("top\n")
    os.chmod(volume / "top.md", 0o600)
    (volume / "link").symlink_to("a/b/deep.md")
    store = SnapshotStore(tmp_path / "state")
    ref = store.take(volume, org="o", user="u", instance="i", generation=1, uid=os.getuid())
    (volume / "top.md").write_text("changed\n")
    store.restore(ref.id, org="o", user="u", volume=volume, uid=os.getuid())
    assert (volume / "a" / "b" / "deep.md").read_text() == "deep\n" and (volume / "top.md").read_text() == "top\n"
    assert os.readlink(volume / "link") == "a/b/deep.md" and (volume / "top.md").stat().st_mode & 0o777 == 0o600


def test_entries_count_against_the_budget_not_only_file_content(tmp_path):
    """A reviewer's variant of the sparse file: thousands of empty files under long folder names cost the
    archive megabytes with no byte of content. Each entry's header and name count too."""
    volume = tmp_path / "volume"
    deep = volume
    for level in range(4):
        deep = deep / (f"{level}" * 200)
    deep.mkdir(parents=True)
    for i in range(300):
        (deep / f"empty-{i:04d}").touch()
    with pytest.raises(SnapshotError) as refused:
        pack(volume, uid=None, budget=256 << 10)
    assert refused.value.reason == "too_large" and "entries" in str(refused.value)
    assert len(pack(volume, uid=None, budget=8 << 20)[0]) > 256 << 10  # what the budget kept out of memory


def test_links_that_name_anything_come_back_and_nothing_is_extracted_through_one(tmp_path):
    """An absolute link (a venv's ``python -> /usr/bin/python3``) and one above the volume are the sandbox's to
    resolve: restored as they were (the ``data`` filter refused them, and a parked volume could never wake).
    A member whose path runs through a link is still refused."""
    volume = tmp_path / "volume"
    (volume / "venv" / "bin").mkdir(parents=True)
    (volume / "venv" / "bin" / "python").symlink_to("/usr/bin/python3")
    (volume / "up").symlink_to("../../etc")
    store = SnapshotStore(tmp_path / "state")
    ref = store.take(volume, org="o", user="u", instance="i", generation=1, uid=os.getuid())
    store.restore(ref.id, org="o", user="u", volume=volume, uid=os.getuid())
    assert os.readlink(volume / "venv" / "bin" / "python") == "/usr/bin/python3"
    assert os.readlink(volume / "up") == "../../etc"
    crafted = io.BytesIO()
    with tarfile.open(fileobj=crafted, mode="w") as tar:
        link = tarfile.TarInfo("./out")
        link.type, link.linkname = tarfile.SYMTYPE, str(tmp_path / "outside-target")
        tar.addfile(link)
        inner = tarfile.TarInfo("./out/planted")
        inner.size = 4
        tar.addfile(inner, io.BytesIO(b"evil"))
    (tmp_path / "outside-target").mkdir()
    crafted.seek(0)
    with tarfile.open(fileobj=crafted) as tar, pytest.raises(tarfile.FilterError):
        tar.extractall(tmp_path / "dest", filter=snapshots._restore_filter)
    assert not (tmp_path / "outside-target" / "planted").exists()


def test_a_link_swapped_in_as_it_is_read_is_a_changed_volume_not_a_crash(tmp_path, monkeypatch):
    volume = tmp_path / "volume"
    volume.mkdir()
    (volume / "link").symlink_to("target")

    def readlink(*args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(snapshots.os, "readlink", readlink)
    with pytest.raises(SnapshotError) as refused:
        pack(volume, uid=None)
    assert refused.value.reason == "changed"


def _measured_before(folder: Path) -> int:
    """``footprint._blocks_bytes`` before issue 28: ``os.walk`` by path, as root."""
    total = 0
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


@pytest.mark.parametrize("walker", ["before", "now"])
def test_a_folder_swapped_for_a_link_while_the_volume_is_measured_leads_nowhere(volume_and_outside, monkeypatch,
                                                                                 walker):
    """The same class as the packer's (root walking what an instance controls): ``pairproof measure`` adds up the
    volume's blocks. Before, a folder swapped for a link after root listed it was entered by path, and the
    host folder behind it was measured; now the walk goes by descriptor and never enters it, and says the
    volume changed under it (a smaller figure in silence would be wrong the other way)."""
    from runtime import footprint

    volume, outside = volume_and_outside
    (outside / "big").write_bytes(os.urandom(4 << 20))
    if walker == "before":
        original_islink = os.path.islink

        def islink(name):  # os.walk checks the name is no link just before it lists it by path...
            answer = original_islink(name)
            if str(name).endswith("/notes") and not answer:
                _swap(volume, outside)  # ...and the agent swaps it in between
            return answer

        monkeypatch.setattr(os.path, "islink", islink)
        measured = _measured_before(volume)
    else:
        monkeypatch.setattr(footprint, "walk", _swapping_after_the_top(footprint.walk, volume, outside))
        with pytest.raises(InstanceError, match="changed while it was measured .*notes"):
            footprint._blocks_bytes(volume)
        return
    assert measured > 4 << 20  # the host's 4 MiB file, counted as the instance's


def test_a_file_with_many_names_is_measured_once(tmp_path):
    """A volume's figure is the disk it takes: a 1 MiB file with 200 hard links takes 1 MiB, not 200 (each name
    counted, an agent would make its volume look 200 times its size to ``pairproof measure``)."""
    from runtime import footprint

    (tmp_path / "one").write_bytes(os.urandom(1 << 20))
    for i in range(200):
        os.link(tmp_path / "one", tmp_path / f"name-{i}")
    assert (1 << 20) <= footprint._blocks_bytes(tmp_path) < (2 << 20)
