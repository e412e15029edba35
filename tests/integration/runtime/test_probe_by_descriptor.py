"""A static probe runs in a sandbox that has no Python and no shell, by descriptor, writing nothing there.

The stand-in for the static scanner is a static C program built here (``gcc -static``; busybox cannot stand
in: it picks its applet from argv[0], which a descriptor exec makes ``/proc/self/fd/N``). It reports its uid,
its namespaces, its image (device and inode of /proc/self/exe), what the sandbox's /usr/bin and /data hold,
and one variable of its environment; told ``write PATH`` it writes PATH instead (the control). The sandbox is an extra
one (``Controller.launch_extra``) whose argv edit hides every interpreter and shell: /usr/bin holds only
``sleep`` (its command), /usr/sbin, /usr/local and the agent image are empty.

Then the static probe itself (probe/ppscan.c) in such sandboxes, through ``acceptance.harness.probes`` as the suite
runs it: ``probe.scan`` and ``probe.dump`` end to end, with the probe's own proof line and sentinels, finding
canaries planted in /data in several encodings; and the checks that make them fail (a /data the probe cannot
write, a probe run in another sandbox).
"""

from __future__ import annotations

import base64
import gzip
import io
import os
import secrets
import stat
import subprocess
import tarfile
import time
from pathlib import Path

import pytest
from support.tokens import TEST_RUN

from acceptance.contract import ExecResult, Identity, InstanceRef, Principal
from acceptance.errors import ProofError
from acceptance.harness import probes as probe
from canaries import Mint
from runtime.controller import Controller
from runtime.isolation import sandbox

STAND_IN_C = r"""
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "write") == 0) { FILE *f = fopen(argv[2], "w"); return f && !fclose(f) ? 0 : 3; }
    const char *ns[] = {"mnt", "pid", "net", "user", "ipc", "uts", "cgroup"};
    char path[64], link[256], buf[256];
    printf("uid=%d\n", (int)getuid());
    for (int i = 0; i < 7; i++) {
        snprintf(path, sizeof path, "/proc/self/ns/%s", ns[i]);
        ssize_t n = readlink(path, link, sizeof link - 1);
        if (n < 0) return 4;
        link[n] = 0;
        printf("ns %s %s\n", ns[i], link);
    }
    struct stat st;
    if (stat("/proc/self/exe", &st)) return 5;
    printf("exe %lu %lu\n", (unsigned long)st.st_dev, (unsigned long)st.st_ino);
    DIR *d = opendir("/usr/bin");
    if (!d) return 6;
    printf("bin");
    for (struct dirent *e; (e = readdir(d));) if (e->d_name[0] != '.') printf(" %s", e->d_name);
    printf("\n");
    FILE *m = fopen("/data/marker", "r");
    if (!m || !fgets(buf, sizeof buf, m)) return 7;
    printf("data %s\n", buf);
    const char *v = getenv("PAIRPROOF_WIRE");
    printf("env %s\n", v ? v : "(unset)");
    return 0;
}
"""
INTERPRETERS = {"sh", "bash", "dash", "ash", "zsh", "busybox", "perl", "standin"}
NAMESPACES = ("mnt", "pid", "net", "user", "ipc", "uts", "cgroup")



@pytest.fixture(scope="module")
def stand_in(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("stand-in")
    os.chmod(folder, 0o700)  # the sandbox's uid cannot reach it by path: only the descriptor gets it in
    source, binary = folder / "standin.c", folder / "standin"
    source.write_text(STAND_IN_C)
    subprocess.run(["gcc", "-static", "-O1", "-o", str(binary), str(source)], check=True, capture_output=True)
    os.chmod(binary, 0o755)
    return binary


def _bare(argv: list[str]) -> list[str]:
    cut = argv.index("--")
    hide = ["--tmpfs", "/usr/bin", "--ro-bind", "/usr/bin/sleep", "/usr/bin/sleep",
            "--tmpfs", "/usr/sbin", "--tmpfs", "/usr/local", "--tmpfs", "/opt/pairproof"]
    if os.path.isdir("/usr/lib/google-cloud-sdk"):  # it bundles a Python of its own
        hide += ["--tmpfs", "/usr/lib/google-cloud-sdk"]
    return argv[:cut] + hide + argv[cut:]


def _tree(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry of the sandbox's filesystem as the host sees it (its /proc, /sys and /dev aside)."""
    seen = {}
    for top, dirs, files in os.walk(root):
        rel = os.path.relpath(top, root)
        if rel == ".":
            dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev")]
        for name in dirs + files:
            st = os.lstat(os.path.join(top, name))
            seen[os.path.normpath(os.path.join(rel, name))] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return seen


def _interpreters(tree: dict[str, tuple[int, int, int]]) -> list[str]:
    def named(p: str) -> bool:
        name = os.path.basename(p)
        return name in INTERPRETERS or (name.startswith("python") and not name.endswith(".py"))
    return [p for p, (mode, _, _) in tree.items()
            if not stat.S_ISDIR(mode) and named(p) and ((stat.S_ISREG(mode) and mode & 0o111) or "bin/" in p)]


def test_a_static_binary_runs_by_descriptor_in_a_sandbox_without_python_or_shell(controller: Controller, stand_in: Path):
    uid = controller.spare_uid(2)
    proc = controller.launch_extra("bare-1", ("/usr/bin/sleep", "infinity"), uid=uid, edit=_bare)
    try:
        root = Path(f"/proc/{proc.host_pid}/root")
        end = time.monotonic() + 10  # bwrap reports its pid before it has built the root: wait for the root
        while not (root / "run/agent").is_dir():
            if time.monotonic() > end or not proc.alive():
                raise TimeoutError("the bare sandbox never finished building its root")
            time.sleep(0.01)
        marker = f"ppwire-{secrets.token_hex(8)}"
        (proc.spec.volume / "marker").write_text(marker)
        os.chown(proc.spec.volume / "marker", uid, uid)
        before = _tree(root)
        assert "usr/bin/sleep" in before and "data/marker" in before
        assert _interpreters(before) == [], "the sandbox was meant to hold no interpreter and no shell"
        assert not os.path.exists(root / "usr/bin/python3") and not os.path.lexists(root / "bin/sh")

        out = sandbox.run_binary_inside(proc, str(stand_in), [], env={"PAIRPROOF_WIRE": "set"}, timeout=30)
        assert out.rc == 0, out.stderr
        lines = out.stdout.decode().splitlines()
        facts = {line.split(" ", 1)[0].split("=")[0]: line for line in lines}
        assert facts["uid"] == f"uid={uid}"
        for n in NAMESPACES:
            assert f"ns {n} {os.readlink(f'/proc/{proc.host_pid}/ns/{n}')}" in lines, (n, lines)
            assert os.readlink(f"/proc/{proc.host_pid}/ns/{n}") != os.readlink(f"/proc/self/ns/{n}") or n == "cgroup"
        host = os.stat(stand_in)
        assert facts["exe"] == f"exe {host.st_dev} {host.st_ino}", "the image that ran is not the host's file"
        assert facts["bin"] == "bin sleep", "it did not see the sandbox's root"
        assert facts["data"] == f"data {marker}", "it did not see the sandbox's /data"
        assert facts["env"] == "env set"

        after = _tree(root)
        assert after == before, f"the run changed the sandbox's filesystem: {set(after) ^ set(before)}"

        # The comparison sees a write when there is one (a control for the check above).
        wrote = sandbox.run_binary_inside(proc, str(stand_in), ["write", "/tmp/wrote"], timeout=30)
        assert wrote.rc == 0, wrote.stderr
        assert set(_tree(root)) - set(before) == {"tmp/wrote"}
    finally:
        controller.remove_extra("bare-1")
    assert not proc.alive()


# -- the static probe's scan and dump, end to end, in a sandbox with no Python and no shell ---------------

REPO = Path(__file__).resolve().parents[3]
A = InstanceRef(Principal("A", "org1", "alice"), "bare-scan")


@pytest.fixture(scope="module")
def static_probe() -> Path:
    """The static probe (tools/build-probe), rebuilt when its source is newer."""
    binary = Path(os.environ.get(probe.PROBE_ENV, REPO / "build" / "probe" / "ppscan"))
    source = REPO / "probe" / "ppscan.c"
    if not binary.exists() or binary.stat().st_mtime < source.stat().st_mtime:
        built = subprocess.run([str(REPO / "tools" / "build-probe"), str(binary)], capture_output=True, text=True)
        if built.returncode != 0:
            raise RuntimeError(f"tools/build-probe failed: {built.stderr.strip()}")
    return binary


def _launch_bare(controller: Controller, name: str, index: int) -> tuple[sandbox.SandboxProcess, Path]:
    """An extra sandbox without any interpreter or shell, and its root as the host sees it, once built."""
    proc = controller.launch_extra(name, ("/usr/bin/sleep", "infinity"), uid=controller.spare_uid(index), edit=_bare)
    root = Path(f"/proc/{proc.host_pid}/root")
    end = time.monotonic() + 10  # bwrap reports its pid before it has built the root: wait for the root
    while not (root / "run/agent").is_dir():
        if time.monotonic() > end or not proc.alive():
            controller.remove_extra(name)
            raise TimeoutError(f"the bare sandbox {name} never finished building its root")
        time.sleep(0.01)
    assert _interpreters(_tree(root)) == [], "the sandbox was meant to hold no interpreter and no shell"
    return proc, root


class BareTarget:
    """Extra sandboxes as a target, the way the reference driver serves its instances: identity read on the
    host, ``exec`` through the sandbox's own command (which fails here: there is no shell), ``exec_binary``
    by descriptor. ``misroute`` runs one instance's probes in another's sandbox, as a confused driver would."""

    def __init__(self, procs: dict[str, sandbox.SandboxProcess], misroute: dict[str, str] | None = None) -> None:
        self.procs, self.misroute = procs, misroute or {}

    def identity(self, ref: InstanceRef) -> Identity:
        proc = self.procs[ref.key]
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{proc.host_pid}/status").read_text().splitlines())
        return Identity(host_pid=proc.host_pid, uid=int(fields["Uid"].split()[0]), gid=int(fields["Gid"].split()[0]),
                        uid_map=Path(f"/proc/{proc.host_pid}/uid_map").read_text().strip(),
                        namespaces=proc.namespaces())

    def exec(self, ref, argv, *, stdin=None, timeout=60.0) -> ExecResult:
        out = sandbox.run_inside(self.procs[ref.key], argv, stdin=stdin, timeout=timeout)
        return ExecResult(out.rc, out.stdout, out.stderr)

    def exec_binary(self, ref, host_path, args, *, env=None, stdin=None, timeout=60.0) -> ExecResult:
        proc = self.procs[self.misroute.get(ref.key, ref.key)]
        out = sandbox.run_binary_inside(proc, host_path, args, env=env, stdin=stdin, timeout=timeout)
        return ExecResult(out.rc, out.stdout, out.stderr)


def _plant(volume: Path, uid: int) -> tuple[dict[str, tuple[str, str]], dict[str, bytes]]:
    """Canaries in the sandbox's /data in several encodings: ``({token: (encoding, where)}, {file: bytes})``."""
    mint = Mint(TEST_RUN)  # the run the scans look for (tests/conftest.py)
    token = {loc: mint.mint("a", loc).token for loc in ("raw", "b64", "hex", "pct", "gz", "tar")}
    member = io.BytesIO()
    with tarfile.open(fileobj=member, mode="w") as tar:
        body = gzip.compress(f"note {token['tar']}\n".encode())
        info = tarfile.TarInfo("notes/today.txt.gz")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    files = {
        "memory/raw.md": f"remember {token['raw'].upper()} please\n".encode(),
        "memory/b64.txt": base64.b64encode(f"x:{token['b64']}".encode()) + b"\n",
        "transcript.log": f"hex={token['hex'].encode().hex()}\n".encode(),
        "tasks/url.txt": ("https://example.invalid/?q=" + "".join(f"%{c:02X}" for c in token["pct"].encode())).encode(),
        "history.jsonl.gz": gzip.compress(f'{{"text": "{token["gz"]}"}}\n'.encode()),
        "archive.tar": member.getvalue(),
    }
    for rel, data in files.items():
        path = volume / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        os.chown(path.parent, uid, uid)
        path.write_bytes(data)
        os.chown(path, uid, uid)
    expect = {token["raw"]: ("raw", "/data/memory/raw.md"), token["b64"]: ("base64", "/data/memory/b64.txt"),
              token["hex"]: ("hex", "/data/transcript.log"), token["pct"]: ("percent", "/data/tasks/url.txt"),
              token["gz"]: ("raw", "/data/history.jsonl.gz (gzip)"),
              token["tar"]: ("raw", "/data/archive.tar (member notes/today.txt.gz) (gzip)")}
    return expect, files


def _settled(tree: dict[str, tuple[int, int, int]]) -> dict[str, tuple[int, ...]]:
    """The tree without the mtimes of /tmp and /data, which the sentinels' creation and removal touch."""
    return {p: (st[:2] if p in ("tmp", "data") else st) for p, st in tree.items()}


def test_the_static_probe_scans_and_dumps_a_sandbox_without_python_or_shell(controller: Controller,
                                                                            static_probe: Path, monkeypatch):
    """Issue 14: ``probe.scan`` and ``probe.dump`` run end to end in a sandbox with no interpreter and no
    shell: the probe proves where it ran with its own proof line, writes its sentinels itself as the
    sandbox's uid, finds the canaries planted in /data in several encodings, carries every planted file
    out whole, and leaves the sandbox's filesystem as it found it."""
    monkeypatch.setenv(probe.PROBE_ENV, str(static_probe))
    proc, root = _launch_bare(controller, A.key, 3)
    try:
        expect, files = _plant(proc.spec.volume, proc.spec.uid)
        target = BareTarget({A.key: proc})
        with pytest.raises(ProofError, match="did not start with the run's proof line"):
            probe.host(target, A, probe.ProbeLog(nonce="unused")).run("true")  # no shell: the shell path cannot run
        before = _settled(_tree(root))

        log = probe.ProbeLog(nonce="unused")
        host = probe.host(target, A, log)
        found = probe.scan(host, ["/"], own=set(expect), skip=["/usr", "/sys"])
        hits = {(hit["token"], hit["encoding"], hit["where"]) for hit in found.hits}
        assert {(token, *how) for token, how in expect.items()} <= hits
        scan = log.evidence[-1]
        assert scan["engine"] == f"static probe {static_probe} by descriptor"
        sentinels = [p for p in scan["sentinels"] if p.startswith("/")]
        assert sorted(os.path.dirname(p) for p in sentinels) == ["/data", "/tmp"]
        assert scan["sentinels_not_written"] == {} and scan["missing_own"] == []
        assert all(token in found.tokens for token in expect)
        assert log.records[-1].proof.startswith("PAIRPROOF-PROOF ") and " host:pid " in log.records[-1].proof
        assert f"uid={proc.spec.uid}" in log.records[-1].proof

        # The host searches a dump with detect.py, which decodes raw, base64 and hex (no percent, no gzip).
        readable = {t for t, (enc, where) in expect.items() if enc in ("raw", "base64", "hex") and "(" not in where}
        carried = probe.dump(host, ["/"], own=readable, skip=["/usr", "/sys"])
        for rel, data in files.items():
            assert data in carried, f"the dump did not carry /data/{rel} whole"
        dump = log.evidence[-1]
        assert dump["kind"] == "dump" and "--dump" in dump["engine"] and dump["sentinels_not_written"] == {}
        assert not log.failures

        assert _settled(_tree(root)) == before, "the scan or the dump left something in the sandbox"
    finally:
        controller.remove_extra(A.key)


def test_the_static_probe_cannot_pass_without_seeing_its_sentinels_or_from_another_sandbox(
        controller: Controller, static_probe: Path, monkeypatch):
    """The end-to-end scan can fail: a /data the probe cannot write holds no sentinel, so the scan cannot
    show it looked there (ProofError, with the reason); and a probe a driver ran in another sandbox proves
    the other sandbox's namespaces, which the proof check refuses."""
    monkeypatch.setenv(probe.PROBE_ENV, str(static_probe))
    proc, _ = _launch_bare(controller, A.key, 3)
    other, _ = _launch_bare(controller, "bare-other", 4)
    try:
        os.chmod(proc.spec.volume, 0o555)
        host = probe.host(BareTarget({A.key: proc}), A, probe.ProbeLog(nonce="unused"))
        with pytest.raises(ProofError, match=r"\(file /data/\.pairproof-sentinel-\w+, which the probe could not write "
                                             r"it: /data/\.pairproof-sentinel-\w+: Permission denied \[EACCES\]\)"):
            probe.scan(host, ["/"], own=set(), skip=["/usr", "/sys"])
        with pytest.raises(ProofError, match="could not write"):
            probe.dump(host, ["/"], own=set(), skip=["/usr", "/sys"])
        os.chmod(proc.spec.volume, 0o755)
        probe.scan(host, ["/"], own=set(), skip=["/usr", "/sys"])  # control: writable again, it passes

        log = probe.ProbeLog(nonce="unused")
        misrouted = probe.host(BareTarget({A.key: proc, "bare-other": other}, {A.key: "bare-other"}), A, log)
        with pytest.raises(ProofError, match="ran outside the intended sandbox"):
            probe.scan(misrouted, ["/"], own=set(), skip=["/usr", "/sys"])
        assert log.failures and not log.records[-1].proof
    finally:
        controller.remove_extra(A.key)
        controller.remove_extra("bare-other")
