"""The static probe's modes for a sandbox with no shell and no Python (issue 14): the proof line it prints
itself (``--proof``), the sentinels it writes and removes itself (``--sentinel VAR=PATH``), and the dump
(``--dump``, acceptance/cases/inside/dump.py's JSON lines), run here on the host; and acceptance/harness/probes.py driving
them through a target's ``exec_binary``. The end-to-end run in a sandbox without Python or a shell is in
tests/integration/runtime/test_probe_by_descriptor.py.
"""

from __future__ import annotations

import base64
import json
import os
import pathlib
import shutil
import socket
import stat
import subprocess
import tempfile
from collections.abc import Iterator

import pytest
from support.tokens import TEST_RUN, token

from acceptance.contract import ExecResult, Identity, InstanceRef, Principal
from acceptance.errors import ProofError
from acceptance.harness import probes as probe_module

REPO = pathlib.Path(__file__).resolve().parents[3]
DUMP_PY = REPO / "acceptance" / "cases" / "inside" / "dump.py"
TOKEN = token("modes")
NOBODY = 65534
A = InstanceRef(Principal("A", "org1", "alice"), "a-1")




@pytest.fixture
def shared_dir() -> Iterator[pathlib.Path]:
    """A folder another uid may enter (pytest's tmp_path is root's 0700)."""
    folder = pathlib.Path(tempfile.mkdtemp(prefix="pp-modes-", dir="/var/tmp"))
    os.chmod(folder, 0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _own_namespaces() -> dict[str, str]:
    return {ns: os.readlink(f"/proc/self/ns/{ns}") for ns in probe_module.PROOF_NAMESPACES}


def _run(probe: pathlib.Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(probe), "--run", TEST_RUN, *args], capture_output=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", **(env or {})})


# -- the proof line ---------------------------------------------------------------------------------------

def test_the_proof_line_comes_first_and_is_checked_like_the_shells(probe, tmp_path):
    """``--proof NONCE`` prints WRAPPER's line before anything else; verify_proof accepts it for the
    namespaces and uid it ran with, and refuses it for another nonce or another uid."""
    (tmp_path / "f").write_text(TOKEN)
    out = _run(probe, "--proof", "n0nce42", str(tmp_path))
    assert out.returncode == 0, out.stderr
    first, _, rest = out.stdout.decode().partition("\n")
    assert probe_module.verify_proof(first, "n0nce42", _own_namespaces(), os.geteuid()) == first
    assert json.loads(rest.splitlines()[-1])["end"] == "pairproof-scan-end"
    with pytest.raises(ProofError, match="did not start with the run's proof line"):
        probe_module.verify_proof(first, "another", _own_namespaces(), os.geteuid())
    with pytest.raises(ProofError, match="uid is uid="):
        probe_module.verify_proof(first, "n0nce42", _own_namespaces(), os.geteuid() + 1)
    # The same line as the shell wrapper prints in the same place.
    shell = subprocess.run(["/bin/sh", "-c", probe_module.WRAPPER, "w", "n0nce42", "true"], capture_output=True)
    assert shell.stdout.decode().rstrip("\n") == first


def test_the_proof_line_shows_the_namespaces_it_runs_in(probe):
    """Run in new namespaces, the probe's line names them, not the host's: the host refuses it as the
    host's own proof."""
    out = subprocess.run(["unshare", "--pid", "--net", "--uts", "--ipc", "--mount", "--fork",
                          str(probe), "--proof", "x1", "--dump", "/nonexistent"], capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    first = out.stdout.decode().partition("\n")[0]
    with pytest.raises(ProofError, match="ran outside the intended sandbox: mnt"):
        probe_module.verify_proof(first, "x1", _own_namespaces(), os.geteuid())


@pytest.mark.parametrize("args", [["--proof", ""], ["--proof", "two words"], ["--sentinel", "NOEQUALS"],
                                  ["--sentinel", "VAR=relative/path"], ["--sentinel", "UNSET_VAR=/tmp/x"],
                                  ["--dump", "--max-file-bytes", "10"]])
def test_bad_mode_arguments_are_usage_errors(probe, tmp_path, args):
    out = _run(probe, *args, str(tmp_path), env={"VAR": TOKEN})
    assert out.returncode == 2 and b"error: argument" in out.stderr, out.stderr


# -- the sentinels ----------------------------------------------------------------------------------------

def test_sentinels_are_written_before_the_walk_removed_after_and_recorded(probe, shared_dir):
    """Each sentinel holds its token (from the environment, never argv) while the scan walks, so the scan
    finds it at its path; afterwards it is gone and the record says it was written and removed."""
    (shared_dir / "tmp").mkdir()
    (shared_dir / "data").mkdir()
    paths = [str(shared_dir / "tmp" / ".s0"), str(shared_dir / "data" / ".s1")]
    tokens = [TOKEN, TOKEN[:-1] + "0"]
    out = _run(probe, "--sentinel", f"S0={paths[0]}", "--sentinel", f"S1={paths[1]}", str(shared_dir), "/proc",
               env={"S0": tokens[0], "S1": tokens[1]})
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    hits = {(hit["token"], hit["where"]) for hit in lines[:-1] if hit["token"] in tokens}
    assert {hit for hit in hits if not hit[1].startswith("/proc/")} == set(zip(tokens, paths))
    in_proc = {where.rsplit("/", 1)[1] for _, where in hits if where.startswith("/proc/")}
    assert in_proc == {"environ"}, "a sentinel's token was on a command line"
    assert lines[-1]["sentinels"] == [{"path": p, "written": True, "removed": True} for p in paths]
    assert not any(os.path.lexists(p) for p in paths)


def test_a_sentinel_that_cannot_be_written_is_reported_and_nothing_is_written_through(probe, shared_dir):
    """A place the probe's uid cannot write, a file already there and a link planted at the path: each
    is reported with its reason, none is written to or followed, and the scan still completes."""
    locked = shared_dir / "locked"
    locked.mkdir(mode=0o755)  # root's: nobody cannot create in it
    there = shared_dir / "there"
    there.write_text("keep me")
    os.chmod(there, 0o666)
    victim = shared_dir / "victim"
    victim.write_text("")
    os.chmod(victim, 0o666)
    (shared_dir / "link").symlink_to(victim)
    os.chmod(shared_dir, 0o777)
    args = ["--sentinel", f"S={locked}/.s", "--sentinel", f"S={there}", "--sentinel", f"S={shared_dir}/link"]
    out = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", str(probe),
                          "--run", TEST_RUN, *args, str(shared_dir)], capture_output=True, timeout=60, env={"S": TOKEN})
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout.splitlines()[-1])["sentinels"]
    assert [(r["written"], r["removed"]) for r in record] == [(False, False)] * 3
    assert [r["error"].rsplit("[", 1)[1] for r in record] == ["EACCES]", "EEXIST]", "EEXIST]"]
    assert there.read_text() == "keep me" and victim.read_text() == "" and not (locked / ".s").exists()


# -- the dump ---------------------------------------------------------------------------------------------

def _tree(root: pathlib.Path) -> dict[str, bytes]:
    """A tree of everything a dump meets; returns what a dump must carry out of it (path: bytes)."""
    expect = {}

    def put(rel: str, data: bytes, mode: int = 0o644) -> None:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.chmod(path, mode)
        expect[str(path)] = data

    (root / "a").mkdir()
    put("a/plain.txt", f"hello {TOKEN}\n".encode())
    (root / "a" / "empty").write_bytes(b"")  # read and counted, but no chunk carries it
    put("a/binary", bytes(range(256)) * 9)
    put("a/b/c/deep", base64.b64encode(TOKEN.encode()))
    put("big", os.urandom(1 << 20) + b"tail" + os.urandom(4000))  # more than one read
    put("odd \"name\"\n\\", b"quoted")
    put(os.fsdecode(b"latin-\xe9"), b"not utf-8 name")
    (root / "skipped").mkdir()
    (root / "skipped" / "inner").write_bytes(b"never carried")
    secret = root / "secret.txt"
    secret.write_bytes(b"root only")
    os.chmod(secret, 0o600)
    closed = root / "closed"
    closed.mkdir(mode=0o700)
    (closed / "hidden").write_bytes(b"never carried")
    (root / "link-to-file").symlink_to("a/plain.txt")
    expect[str(root / "link-to-file") + " (link target)"] = b"a/plain.txt"
    (root / "link-to-dir").symlink_to("a")
    expect[str(root / "link-to-dir") + " (link target)"] = b"a"
    (root / "broken").symlink_to("/nonexistent/" + TOKEN)
    expect[str(root / "broken") + " (link target)"] = ("/nonexistent/" + TOKEN).encode()
    os.mkfifo(root / "fifo")  # opened, it would block the dump
    os.chmod(root / "fifo", 0o666)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(root / "sock"))
    listener.close()
    try:
        os.mknod(root / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pass
    return expect


def _dump(argv: list[str], stdin: bytes | None = None) -> tuple[dict[str, bytes], dict]:
    """Run a dump as nobody in a pid namespace of its own (its /proc then holds only itself)."""
    out = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "setpriv", f"--reuid={NOBODY}",
                          f"--regid={NOBODY}", "--clear-groups", "--", *argv],
                         input=stdin, capture_output=True, timeout=120, env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    return probe_module.dump_files(lines[:-1]), lines[-1]


def test_the_static_dump_carries_what_dump_py_carries(probe, shared_dir):
    """Parity: dump.py (under the sandbox's python) and ``ppscan --dump`` over the same tree, as the same
    unprivileged uid, carry out the same (path, bytes), count the same files and bytes, and report the
    same problems; and both carry what the tree holds (so two blind dumps cannot agree their way to a pass):
    regular files whole, link targets, /proc environ and cmdline, never a fifo, socket, device, skipped
    path or what the uid may not read."""
    tree = shared_dir / "tree"
    tree.mkdir(mode=0o755)
    expect = _tree(tree)
    binary = shared_dir / "ppscan"
    shutil.copy(probe, binary)
    os.chmod(binary, 0o755)
    skip = ["--skip", str(tree / "skipped")]
    ref_files, ref_record = _dump(["/usr/bin/python3", "-I", "-S", "-", *skip, str(tree)], stdin=DUMP_PY.read_bytes())
    got_files, got_record = _dump([str(binary), "--dump", *skip, str(tree)])

    ours = {path: data for path, data in ref_files.items() if not path.startswith("/proc/")}
    assert ours == expect
    assert {path: data for path, data in got_files.items() if not path.startswith("/proc/")} == expect
    # Each ran alone in its pid namespace: its own environ and cmdline, as pid 1.
    assert set(ref_files) - set(expect) == set(got_files) - set(expect) == {"/proc/1/environ", "/proc/1/cmdline"}
    assert got_files["/proc/1/environ"] == ref_files["/proc/1/environ"]
    assert got_files["/proc/1/cmdline"].split(b"\0")[1:3] == [b"--dump", b"--skip"]

    assert sorted(got_record["problems"]) == sorted(ref_record["problems"]) == sorted([
        f"{tree}/closed: Permission denied [EACCES]", f"{tree}/secret.txt: Permission denied [EACCES]"])
    for record, files in ((ref_record, ref_files), (got_record, got_files)):
        regular = [p for p in files if not p.endswith(" (link target)")]
        assert record["files"] == len(regular) + 1  # and a/empty
        assert record["bytes"] == sum(len(files[p]) for p in regular)
        assert record["truncated"] == 0 and record["end"] == "pairproof-dump-end"
    assert got_record["files"] == ref_record["files"]
    proc_cmdlines = len(ref_files["/proc/1/cmdline"]) - len(got_files["/proc/1/cmdline"])
    assert got_record["bytes"] == ref_record["bytes"] - proc_cmdlines


# -- probe.py driving the modes through exec_binary ---------------------------------------------------------

class BinaryHostTarget:
    """Runs the static probe on the host as its ``exec_binary`` (the host cross-check is switched off in
    these tests); ``tamper`` rewrites what the probe printed, as a driver that ran it elsewhere would."""

    def __init__(self, tamper=None) -> None:
        self.tamper = tamper

    def identity(self, ref):
        return Identity(host_pid=os.getpid(), uid=os.geteuid(), gid=os.getegid(), uid_map="", namespaces=_own_namespaces())

    def exec(self, ref, argv, *, stdin=None, timeout=60.0):
        raise AssertionError("the static probe's scan and dump must not need the sandbox's shell")

    def exec_binary(self, ref, host_path, args, *, env=None, stdin=None, timeout=60.0):
        r = subprocess.run([host_path, *args], input=stdin, capture_output=True, timeout=timeout,
                           env={"PATH": "/usr/bin:/bin", **(env or {})})
        out = self.tamper(r.stdout) if self.tamper else r.stdout
        return ExecResult(r.returncode, out, r.stderr)


@pytest.fixture
def places(tmp_path, monkeypatch, probe) -> pathlib.Path:
    """The sentinel places are folders of tmp_path (the host has no /data); the probe is the built one."""
    for name in ("tmp", "data"):
        (tmp_path / name).mkdir()
    monkeypatch.setattr(probe_module, "SENTINEL_PLACES", (str(tmp_path / "tmp"), str(tmp_path / "data")))
    monkeypatch.setattr(probe_module, "cross_check_on_host", lambda *a: "skipped in this test")
    monkeypatch.setenv(probe_module.PROBE_ENV, str(probe))
    return tmp_path


@pytest.mark.parametrize("what", ["scan", "dump"])
def test_scan_and_dump_by_descriptor_prove_themselves_without_a_shell(places, what):
    """Control: the static probe's scan and dump pass with its own proof line and its own sentinels, and
    the evidence names the engine and the sentinels it wrote (all removed)."""
    (places / "data" / "planted").write_text(TOKEN)
    log = probe_module.ProbeLog(nonce="unused")
    host = probe_module.host(BinaryHostTarget(), A, log)
    roots = [str(places), "/proc"] if what == "scan" else [str(places)]  # the dump always carries /proc's
    result = getattr(probe_module, what)(host, roots, own={TOKEN})
    if what == "scan":
        assert TOKEN in result.tokens
    else:
        assert TOKEN.encode() in result
    evidence = log.evidence[-1]
    assert evidence["engine"].startswith("static probe") and evidence["sentinels_not_written"] == {}
    written = [p for p in evidence["sentinels"] if p.startswith("/")]
    assert len(written) == 2 and not any(os.path.lexists(p) for p in written)
    assert log.records[-1].proof.startswith("PAIRPROOF-PROOF ") and not log.failures


@pytest.mark.parametrize("what", ["scan", "dump"])
def test_a_sentinel_place_the_probe_cannot_write_fails_the_scan(places, what):
    """A /data the probe cannot write holds no sentinel: the scan cannot show it looked there, and says
    why (it used to be skipped quietly)."""
    os.rmdir(places / "data")
    (places / "data").write_text("a file, not a folder")
    host = probe_module.host(BinaryHostTarget(), A, probe_module.ProbeLog(nonce="unused"))
    with pytest.raises(ProofError, match="which the probe could not write it: .*data/.pairproof-sentinel-.*ENOTDIR"):
        getattr(probe_module, what)(host, [str(places), "/proc"] if what == "scan" else [str(places)], own=set())


def test_an_incomplete_dump_that_carried_out_a_searched_secret_is_a_finding(places):
    """Issue 28: a dump that could not prove it looked everywhere raised, whatever it carried out: a leak it did
    carry out (a platform secret in the files) became an unjudged case instead of a finding. As for a scan's
    foreign canary, a secret the caller searches for, found in any encoding, now makes the bytes stand; without
    one, the same incomplete dump still raises."""
    secret = "sk-synthetic-provider-key-5f1d0c"
    (places / "data" / "kept").write_text(base64.b64encode(secret.encode()).decode())
    os.rmdir(places / "tmp")
    (places / "tmp").write_text("a file, not a folder: no sentinel can be written here")
    host = probe_module.host(BinaryHostTarget(), A, probe_module.ProbeLog(nonce="unused"))
    with pytest.raises(ProofError, match="could not write it"):
        probe_module.dump(host, [str(places)], own=set())
    with pytest.raises(ProofError, match="could not write it"):
        probe_module.dump(host, [str(places)], own=set(), theirs={"sk-synthetic-other-key-000000"})
    log = probe_module.ProbeLog(nonce="unused")
    carried = probe_module.dump(probe_module.host(BinaryHostTarget(), A, log), [str(places)], own=set(),
                                theirs={secret})
    assert base64.b64encode(secret.encode()) in carried and not log.failures


@pytest.mark.parametrize("tamper, reason", [
    (lambda out: out.replace(b"PAIRPROOF-PROOF ", b"PAIRPROOF-PROOF 0", 1), "did not start with the run's proof line"),
    (lambda out: out.replace(b" mnt:[", b" mnt:[1", 1), "ran outside the intended sandbox: mnt"),
    (lambda out: out.partition(b"\n")[2], "did not start with the run's proof line"),
])
def test_a_wrong_proof_line_is_refused(places, tamper, reason):
    log = probe_module.ProbeLog(nonce="unused")
    host = probe_module.host(BinaryHostTarget(tamper), A, log)
    with pytest.raises(ProofError, match=reason):
        probe_module.scan(host, [str(places)], own=set())
    assert log.failures and not log.records[-1].proof


@pytest.mark.parametrize("tamper, reason", [
    (lambda out: out.replace(b', "removed": true', b', "removed": false', 1), "could not remove its sentinels"),
    (lambda out: out.replace(b', "sentinels": [', b', "other": [', 1), "did not account for the sentinels"),
])
def test_a_record_that_hides_what_became_of_the_sentinels_is_refused(places, tamper, reason):
    host = probe_module.host(BinaryHostTarget(tamper), A, probe_module.ProbeLog(nonce="unused"))
    with pytest.raises(ProofError, match=reason):
        probe_module.scan(host, [str(places)], own=set())


# -- what a scan could not read is judged whole, and by its reason, never by its path ------------------------

def test_a_failure_past_the_200_problems_the_summary_lists_is_judged(places):
    """The scan's summary lists only its first 200 problems (``errors`` counts them all): a failure that is
    not a denial, coming after 200 accepted ones, used to go unseen and the scan passed. What is not listed
    cannot be judged a denial, so the scan is refused; without the 200 before it, the same failure is listed
    and refused by its reason, and without it the scan passes (the controls)."""
    (places / "data" / "planted").write_text(TOKEN)
    skipped = places / "skipped"
    many = [str(skipped / str(n)) for n in range(200)]  # each: "not scanned: it is in the skip list"
    (places / "link").symlink_to(places / "data")  # a root that is a link is not scanned: not a denial
    host = probe_module.host(BinaryHostTarget(), A, probe_module.ProbeLog(nonce="unused"))
    with pytest.raises(ProofError, match=r"\d+ paths failed but its report lists 200"):
        probe_module.scan(host, [str(places), *many, str(places / "link"), "/proc"], own={TOKEN}, skip=[str(skipped)])
    with pytest.raises(ProofError, match="other than a denial: .*link: not scanned: it is a symbolic link"):
        probe_module.scan(host, [str(places), str(places / "link"), "/proc"], own={TOKEN}, skip=[str(skipped)])
    probe_module.scan(host, [str(places), "/proc"], own={TOKEN})


def test_a_path_named_like_a_denial_does_not_pass_off_another_failure(places):
    """A problem reads "PATH: reason", and the sandbox names its paths: a link called "x [EACCES]" (a root
    that is a link is not scanned) used to be accepted as a denial because the mark was looked for anywhere
    in the text. The reason is what is judged."""
    (places / "data" / "planted").write_text(TOKEN)
    (places / "x [EACCES]").symlink_to(places / "data")
    host = probe_module.host(BinaryHostTarget(), A, probe_module.ProbeLog(nonce="unused"))
    with pytest.raises(ProofError, match="other than a denial"):
        probe_module.scan(host, [str(places), "/proc", str(places / "x [EACCES]")], own={TOKEN})
    probe_module.scan(host, [str(places), "/proc"], own={TOKEN})


@pytest.mark.parametrize("what", ["scan", "dump"])
def test_a_file_sentinel_counts_only_where_it_was_written(places, what):
    """A file sentinel's token is also in the probe's own environment (how it is handed in), so a scan or
    dump that reads /proc but never the place the file is in still meets the token: it must be found in
    that file, or the scan did not look there. Here /data is left out of the roots; the control has it."""
    host = probe_module.host(BinaryHostTarget(), A, probe_module.ProbeLog(nonce="unused"))
    blind = [str(places / "tmp"), "/proc"] if what == "scan" else [str(places / "tmp")]
    with pytest.raises(ProofError, match=r"did not find 1 of the prober's own canaries \(\['[0-9a-f-]{36} "
                                         r"\(file .*/data/\.pairproof-sentinel-\w+\)'\]\)"):
        getattr(probe_module, what)(host, blind, own=set())
    getattr(probe_module, what)(host, [*blind, str(places / "data")], own=set())


def _drop_one_chunk(out: bytes) -> bytes:
    lines = out.split(b"\n")
    chunk = next(n for n, line in enumerate(lines) if b'"b64"' in line and b"(link target)" not in line)
    return b"\n".join(lines[:chunk] + lines[chunk + 1:])


def test_a_dump_whose_lines_were_lost_on_the_way_is_refused(places):
    """A driver whose output stream drops a line (one chunk of one file) leaves a dump whose record is whole
    but which carries a file in part: the bytes its lines carry must be the bytes it says it read."""
    (places / "data" / "planted").write_text(TOKEN)
    host = probe_module.host(BinaryHostTarget(_drop_one_chunk), A, probe_module.ProbeLog(nonce="unused"))
    with pytest.raises(ProofError, match=r"says it read \d+ bytes of files but its lines carry \d+: lines were lost"):
        probe_module.dump(host, [str(places)], own=set())


@pytest.mark.parametrize("root", ["/proc/1/root", "/proc/self/cwd", "/sys/kernel"])
def test_a_root_the_scanner_declines_is_not_judged_looked_at(places, root):
    """A root named by the caller that the scanner never reads (in /proc anything but environ and cmdline,
    anything under /sys) used to be accepted as "not scanned", so a scan asked to look through
    /proc/<pid>/root passed without reading a byte there. It is refused; without it the scan passes."""
    host = probe_module.host(BinaryHostTarget(), A, probe_module.ProbeLog(nonce="unused"))
    with pytest.raises(ProofError, match="other than a denial: .*not scanned"):
        probe_module.scan(host, [str(places), "/proc", root], own=set())
    probe_module.scan(host, [str(places), "/proc"], own=set())


# -- every mount under the roots is entered ------------------------------------------------------------------

@pytest.mark.parametrize("mode", [[], ["--dump"]])
def test_a_mount_the_walk_never_entered_is_said(probe, shared_dir, mode):
    """The file sentinels prove /tmp and /data were read, not the sandbox's other mounts: a walk that stays
    on one side of a mount used to pass. The probe reads the sandbox's own mount table and names each folder
    mount under the roots (visible there, not skipped) that its walk never entered. Here the mount is under
    a folder its uid may pass through but not list (0711), so the walk cannot meet it; the control is the
    same mount under a listable folder, entered and read."""
    for name, mode_bits in (("locked", 0o711), ("open", 0o755)):
        (shared_dir / name / "mnt").mkdir(parents=True)
        os.chmod(shared_dir / name, mode_bits)
    script = (f"mount -t tmpfs -o mode=755 pp {shared_dir}/locked/mnt && mount -t tmpfs -o mode=755 pp {shared_dir}/open/mnt"
              f" && echo {TOKEN} > {shared_dir}/open/mnt/f && chmod 644 {shared_dir}/open/mnt/f"
              f" && exec setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups -- {probe} --run {TEST_RUN}"
              f" {' '.join(mode)} {shared_dir}")
    out = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script], capture_output=True,
                         timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    summary = json.loads(out.stdout.splitlines()[-1])
    never = [p for p in summary["problems"] if "the walk never entered" in p]
    assert never == [f"{shared_dir}/locked/mnt: not scanned: a mount under the roots that the walk never entered"]
    assert (TOKEN.encode() in out.stdout) if not mode else any(base64.b64decode(line["b64"]).startswith(TOKEN.encode())
                                                             for line in map(json.loads, out.stdout.splitlines()[:-1]))


def test_a_probe_that_is_not_where_the_host_expects_writes_and_reads_nothing(probe, tmp_path):
    """--expect: the probe compares its own namespaces and uid with the host's expectation as it makes the
    proof line; anywhere else (here: the host, expecting some sandbox) it stops at once, exit 3, before
    writing its sentinel or reading a file."""
    here = subprocess.run([str(probe), "--run", TEST_RUN, "--proof", "n1", str(tmp_path)], capture_output=True, check=True).stdout
    line = here.split(b"\n", 1)[0].decode().split(" ", 2)[2]
    expected = line.split(" gid=", 1)[0]  # --expect names the namespaces and uid; the rights follow on the line
    elsewhere = expected.replace("mnt:[", "mnt:[9", 1)
    sentinel = tmp_path / "sentinel"
    (tmp_path / "planted").write_text(token("planted") + "\n")
    env = {"TOKEN": token("sentinel")}
    refused = subprocess.run([str(probe), "--run", TEST_RUN, "--proof", "n2", "--expect", elsewhere,
                              "--sentinel", f"TOKEN={sentinel}",
                              str(tmp_path)], capture_output=True, env=env)
    assert refused.returncode == 3 and b"refusing to look" in refused.stderr
    assert refused.stdout.decode().splitlines() == [f"PAIRPROOF-PROOF n2 {line}"]  # the proof line, nothing else
    assert not sentinel.exists()
    # control: where it is expected, the same call writes, scans, finds and removes
    found = subprocess.run([str(probe), "--run", TEST_RUN, "--proof", "n3", "--expect", expected,
                            "--sentinel", f"TOKEN={sentinel}",
                            str(tmp_path)], capture_output=True, env=env)
    assert found.returncode == 0, found.stderr
    assert token("planted").encode() in found.stdout and not sentinel.exists()
