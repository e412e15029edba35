"""runtime.walk: the descriptor walk and removal the platform uses, as root, on trees an instance controls. An
instance can nest folders far deeper than Python's recursion limit (a hostile agent's 1200 levels killed the old
recursive walk and ``shutil.rmtree`` with RecursionError, leaving its run behind); both are iterative now."""

from __future__ import annotations

import errno
import os

from runtime.walk import MAX_DEPTH, remove_tree, walk


def _nest(top, depth: int) -> None:
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(os.open("bottom", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    os.close(fd)


def test_the_walk_is_os_fwalk_top_down_with_pruning(tmp_path):
    for folder in ("a/b/c", "a/skip/x", "e"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "a/b/file").write_text("1")
    (tmp_path / "a/skip/x/hidden").write_text("2")

    def seen(walker):
        out = []
        for path, dirs, files, _fd in walker(tmp_path):
            if "skip" in dirs:
                dirs.remove("skip")
            out.append((os.path.relpath(path, tmp_path), sorted(dirs), sorted(files)))
        return sorted(out)

    assert seen(walk) == seen(lambda top: os.fwalk(top, follow_symlinks=False))
    assert ("a/skip/x", [], ["hidden"]) not in seen(walk)
    # One difference: a link to a folder is a name, not a folder to enter (os.fwalk lists it among the folders).
    (tmp_path / "link").symlink_to("/")
    assert "link" in next(iter(walk(tmp_path)))[2]


def test_a_tree_deeper_than_the_recursion_limit_is_walked_to_the_bound_and_said(tmp_path):
    _nest(tmp_path, 1500)
    try:
        errors: list[OSError] = []
        depths = [path.count("/d") for path, *_ in walk(tmp_path, onerror=errors.append)]
        assert max(depths) == MAX_DEPTH - 1
        assert [e.errno for e in errors] == [errno.ELOOP] and "deeper than" in errors[0].strerror
    finally:
        remove_tree(tmp_path / "d")  # pytest's own clean-up of tmp_path is recursive


def test_remove_tree_removes_any_depth_and_links_as_links(tmp_path):
    top = tmp_path / "volume"
    top.mkdir()
    _nest(top, 1500)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept").write_text("not the instance's")
    (top / "escape").symlink_to(outside)
    (top / "d" / "escape").symlink_to(outside)
    os.mkfifo(top / "fifo")
    remove_tree(top)  # (were it to fail, pytest's recursive clean-up of tmp_path would fail after it)
    assert not top.exists()
    assert (outside / "kept").read_text() == "not the instance's"
    remove_tree(top)  # gone already: nothing to do


def test_remove_tree_of_a_link_removes_the_link_only(tmp_path):
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "f").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    remove_tree(tmp_path / "link")
    assert not (tmp_path / "link").is_symlink() and (tmp_path / "target" / "f").exists()


def test_a_snapshot_of_a_volume_deeper_than_the_walk_is_refused_by_name(tmp_path):
    import pytest

    from runtime.snapshots import SnapshotError, pack

    _nest(tmp_path, MAX_DEPTH + 10)
    with pytest.raises(SnapshotError, match="deeper than") as caught:
        pack(tmp_path, uid=None)
    assert caught.value.reason == "too_deep"


def test_a_walk_stopped_at_a_folder_leaves_no_descriptor_open(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        for path, *_ in walk(tmp_path):
            if path.endswith("/b"):
                break
    assert len(os.listdir("/proc/self/fd")) == before


def test_remove_tree_stops_when_the_folder_above_is_not_the_one_it_came_down_from(tmp_path, monkeypatch):
    """The instance moves the folder being removed under another one while root is inside it: going up by ``..``
    would reach that other folder, and the removal stops there (ESTALE) rather than go on from where it was led."""
    import pytest

    import runtime.walk as walking

    top = tmp_path / "volume"
    (top / "a" / "b").mkdir(parents=True)
    real_open = os.open

    def moving_open(path, flags, *args, **kwargs):
        if path == ".." and not (top / "x").exists():
            (top / "x").mkdir()
            os.rename(top / "a" / "b", top / "x" / "b")  # as the agent would, between the listing and the way up
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(walking.os, "open", moving_open)
    with pytest.raises(OSError) as caught:
        remove_tree(top)
    monkeypatch.undo()
    assert caught.value.errno == errno.ESTALE
    assert (top / "x" / "b").is_dir()  # nothing removed from where the way up led


def test_measuring_a_volume_deeper_than_the_walk_says_so(tmp_path):
    import pytest

    from runtime import footprint
    from runtime.errors import InstanceError

    _nest(tmp_path, MAX_DEPTH + 5)
    with pytest.raises(InstanceError, match=f"deeper than {MAX_DEPTH}"):
        footprint._blocks_bytes(tmp_path)
