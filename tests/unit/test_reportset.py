"""The report set is replaced whole or not at all (``reports/reportset.py``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from reports import reportset


def _fill(folder: Path, run: str) -> Path:
    (folder / "verdict.json").write_text(json.dumps({"run": run}))
    (folder / "junit.xml").write_text(f"<testsuite name='{run}'/>")
    (folder / "summary.html").write_text(f"<p>{run}</p>")
    (folder / "allure-results").mkdir(exist_ok=True)
    (folder / "allure-results" / f"{run}-result.json").write_text(json.dumps({"run": run}))
    return folder


def _shown(reports: Path) -> set[str]:
    """The runs the member names show; one run when the set is whole."""
    runs = {json.loads((reports / "verdict.json").read_text())["run"]}
    runs.add((reports / "junit.xml").read_text().split("'")[1])
    runs.add((reports / "summary.html").read_text()[3:-4])
    runs |= {p.name.split("-")[0] for p in (reports / "allure-results").iterdir()}
    return runs


def test_publish_replaces_every_member_at_once(tmp_path):
    reports = tmp_path / "reports"
    reportset.publish(reports, _fill(reportset.stage(reports), "one"))
    assert _shown(reports) == {"one"}
    second = _fill(reportset.stage(reports), "two")
    assert _shown(reports) == {"one"}  # staged, not published: the names still show the first set
    reportset.publish(reports, second)
    assert _shown(reports) == {"two"}
    assert reportset.current(reports) == second
    # the first set is gone once nothing can show it any more
    assert sorted(p.name for p in (reports / reportset.SETS).iterdir()) == sorted(["current", second.name])


def test_a_discarded_run_leaves_the_published_set_as_it_was(tmp_path):
    reports = tmp_path / "reports"
    reportset.publish(reports, _fill(reportset.stage(reports), "good"))
    staged = _fill(reportset.stage(reports), "interrupted")
    reportset.discard(staged)
    assert _shown(reports) == {"good"} and not staged.exists()


def test_a_first_run_that_publishes_nothing_leaves_no_sets_folder(tmp_path):
    reports = tmp_path / "reports"
    reportset.discard(reportset.stage(reports))
    assert list(reports.iterdir()) == []


def test_a_folder_of_a_killed_run_is_swept_at_the_next_publish(tmp_path):
    reports = tmp_path / "reports"
    reportset.publish(reports, _fill(reportset.stage(reports), "one"))
    dead = reports / reportset.SETS / "set-999999999-killed"  # no such pid: its run is gone
    dead.mkdir()
    _fill(dead, "killed")
    reportset.publish(reports, _fill(reportset.stage(reports), "two"))
    assert not dead.exists() and _shown(reports) == {"two"}


def test_plain_reports_of_an_older_version_are_adopted_then_replaced(tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    _fill(reports, "old")
    (reports / "mutants.json").write_text("{}")  # not a member: left where it is
    staged = _fill(reportset.stage(reports), "new")
    reportset._adopt_plain_members(reports)
    reportset._link_members(reports)
    assert _shown(reports) == {"old"}  # every name swapped for its link, each still showing the old set
    assert all((reports / m).is_symlink() for m in ("verdict.json", "allure-results"))
    reportset.publish(reports, staged)
    assert _shown(reports) == {"new"}
    assert (reports / "mutants.json").read_text() == "{}" and not (reports / "mutants.json").is_symlink()


def test_stage_copy_starts_from_the_published_set(tmp_path):
    reports = tmp_path / "reports"
    reportset.publish(reports, _fill(reportset.stage(reports), "one"))
    copy = reportset.stage_copy(reports)
    assert json.loads((copy / "verdict.json").read_text())["run"] == "one"
    assert (copy / "allure-results" / "one-result.json").exists()
    assert copy != reportset.current(reports)


def test_the_set_folder_is_as_readable_as_a_plain_reports_folder(tmp_path):
    staged = reportset.stage(tmp_path)
    umask = os.umask(0)
    os.umask(umask)
    assert staged.stat().st_mode & 0o777 == 0o777 & ~umask


def test_pairproof_report_rebuilds_the_pages_into_a_new_set_published_whole(tmp_path, monkeypatch, capsys):
    """``pairproof report`` rebuilds summary.html from the published verdict (and the mutant report beside
    it) in a copy of the set, then publishes that copy: the old set is never edited in place."""
    from support.verdicts import sample_verdict

    from acceptance import cli
    from reports import allure_html, html

    monkeypatch.setattr(allure_html, "find", lambda: None)  # Allure's page: "skipped", not this test's concern
    reports = tmp_path / "reports"
    staged = reportset.stage(reports)
    (staged / "verdict.json").write_text(json.dumps(sample_verdict()))
    (staged / "summary.html").write_text("stale")
    reportset.publish(reports, staged)
    kill_matrix = {"summary": "1/1", "mutants": [{"name": "shared-volume", "status": "killed"}],
                   "matrix": {"shared-volume": {"FS-1": "failed"}}}
    (reports / "mutants.json").write_text(json.dumps(kill_matrix))
    assert cli.main(["report", "--reports-dir", str(reports)]) == 0
    assert reportset.current(reports) != staged and not staged.exists()
    assert (reports / "summary.html").read_text() == html.render(sample_verdict(), kill_matrix)
    assert json.loads((reports / "verdict.json").read_text()) == sample_verdict()


def test_an_interrupt_while_old_sets_are_swept_keeps_the_new_set(tmp_path, monkeypatch):
    """Ctrl-C after the swap, while the sets it replaced are being removed: the run's cleanup (discard of
    its folder, as ``qualify`` does when publish did not return) keeps the set the names now show."""
    reports = tmp_path / "reports"
    reportset.publish(reports, _fill(reportset.stage(reports), "one"))
    staged = _fill(reportset.stage(reports), "two")

    def interrupted(sets, *, keep):
        raise KeyboardInterrupt

    monkeypatch.setattr(reportset, "_sweep", interrupted)
    try:
        reportset.publish(reports, staged)
    except KeyboardInterrupt:
        reportset.discard(staged)
    assert _shown(reports) == {"two"}


def test_a_rebuild_of_a_set_replaced_meanwhile_does_not_put_the_older_run_back(tmp_path):
    """``pairproof report`` copies the published set, rebuilds its pages and publishes the copy; a run that
    published in between must stay published (the copy is of an older run)."""
    reports = tmp_path / "reports"
    first = _fill(reportset.stage(reports), "one")
    reportset.publish(reports, first)
    copy = reportset.stage_copy(reports, first)
    reportset.publish(reports, _fill(reportset.stage(reports), "two"))  # a qualification finishes meanwhile
    try:
        reportset.publish(reports, copy, over=first)
    except reportset.Superseded:
        reportset.discard(copy)
    assert _shown(reports) == {"two"} and not copy.exists()


def test_staging_survives_another_first_run_removing_the_empty_sets_folder(tmp_path, monkeypatch):
    """Two first runs into one reports folder: one discards (removing the sets folder it found empty)
    just as the other stages in it; the second still gets its folder."""
    import tempfile

    reports = tmp_path / "reports"
    real, raced = tempfile.mkdtemp, []

    def racing(*args, **kwargs):
        if not raced:
            raced.append(True)
            (reports / reportset.SETS).rmdir()  # the other run's discard, between mkdir and mkdtemp
        return real(*args, **kwargs)

    monkeypatch.setattr(tempfile, "mkdtemp", racing)
    staged = reportset.stage(reports)
    assert staged.is_dir() and staged.parent == reports / reportset.SETS


def test_a_set_being_read_is_neither_replaced_nor_swept_until_its_reader_is_done(tmp_path):
    """The gate reads the published set inside ``reading``: a run publishing meanwhile waits to swap, so
    the sweep after its swap never removes the folder the gate is reading."""
    import threading

    reports = tmp_path / "reports"
    reportset.publish(reports, _fill(reportset.stage(reports), "one"))
    second = _fill(reportset.stage(reports), "two")
    with reportset.reading(reports) as read:
        publisher = threading.Thread(target=reportset.publish, args=(reports, second))
        publisher.start()
        publisher.join(timeout=0.5)  # (a window in which the publish must not happen)
        assert publisher.is_alive() and _shown(reports) == {"one"} and (read / "verdict.json").exists()
    publisher.join(timeout=30)
    assert not publisher.is_alive() and _shown(reports) == {"two"} and not read.exists()


def test_a_folder_replaced_under_a_run_is_no_longer_the_one_it_holds(tmp_path):
    """Issue 27 item 12, reviewed: the claim is on the folder's inode. Removed and made again (what a CI reset
    does), or renamed aside, the path is another folder that a second run may hold; ``still_held`` says so, and
    qualify then publishes nothing."""
    reports = tmp_path / "reports"
    claim = reportset.hold(reports)
    try:
        assert reportset.still_held(reports, claim)
        other = reportset.hold(tmp_path / "elsewhere")  # another folder: no conflict
        os.close(other)
        reports.rename(tmp_path / "aside")
        reports.mkdir()
        assert not reportset.still_held(reports, claim)
        second = reportset.hold(reports)  # the new folder is free: a second run got it
        os.close(second)
        reports.rmdir()
        assert not reportset.still_held(reports, claim)
    finally:
        os.close(claim)
