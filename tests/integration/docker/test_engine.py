"""Docker as the sandbox engine: instance containers as the host sees them, the static probe by descriptor in
an image without Python, and nothing left behind (a closed controller, a SIGKILLed owner and ``clean``).

Each test starts real containers on the local engine (tools/setup-docker), of the images built locally
from this machine's packages (``acceptance.targets.docker.image``)."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import docker
import pytest
from support.tokens import TEST_RUN

from acceptance.targets.docker import image as images
from runtime.controller import Controller
from runtime.isolation import containers
from runtime.isolation.cgroups import Limits
from runtime.isolation.sandbox import SandboxSpec
from runtime.wait import until

REPO = Path(__file__).resolve().parents[3]
STAND_IN_C = r"""
#include <dirent.h>
#include <stdio.h>
#include <unistd.h>
int main(void) {
    char link[256], buf[256];
    ssize_t n = readlink("/proc/self/ns/mnt", link, sizeof link - 1);
    if (n < 0) return 4;
    link[n] = 0;
    printf("uid=%d mnt=%s\n", (int)getuid(), link);
    DIR *d = opendir("/usr/bin");
    if (!d) return 6;
    printf("bin");
    for (struct dirent *e; (e = readdir(d));) if (e->d_name[0] != '.') printf(" %s", e->d_name);
    printf("\n");
    FILE *m = fopen("/data/marker", "r");
    if (!m || !fgets(buf, sizeof buf, m)) return 7;
    printf("data %s\n", buf);
    return 0;
}
"""


@pytest.fixture
def run() -> str:
    return f"dt{secrets.token_hex(4)}"


@pytest.fixture
def engine_controller(root, run):
    controller = Controller(root, run, engine=containers.DockerEngine(images.ensure("reference"), run))
    yield controller
    controller.close()


def _status(pid: int) -> dict[str, str]:
    return dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line)


def test_instance_container_has_every_guard_as_the_host_sees_it(engine_controller):
    record = engine_controller.provision("org1", "alice")
    engine_controller.wake(record.id)
    proc = engine_controller.sandbox(record.id)
    status = _status(proc.host_pid)
    assert status["Uid"].split()[0] == str(record.uid) and status["Gid"].split()[0] == str(record.uid)
    assert int(status["CapEff"], 16) == 0 and int(status["CapPrm"], 16) == 0
    assert status["NoNewPrivs"].strip() == "1"
    assert status["Seccomp"].strip() == "2"  # a filter: Docker's default profile
    for ns in ("mnt", "pid", "net", "ipc", "uts"):
        assert os.readlink(f"/proc/{proc.host_pid}/ns/{ns}") != os.readlink(f"/proc/self/ns/{ns}"), ns
    interfaces = [line.split(":")[0].strip() for line in Path(f"/proc/{proc.host_pid}/net/dev").read_text().splitlines()[2:]]
    assert interfaces == ["lo"]
    assert engine_controller.exec(record.id, ["/usr/bin/touch", "/usr/pp-written"]).rc != 0  # read-only root
    assert engine_controller.exec(record.id, ["/usr/bin/touch", "/data/pp-written"]).rc == 0
    assert (engine_controller.volume_path(record.id) / "pp-written").stat().st_uid == record.uid
    done = engine_controller.exec(record.id, ["/bin/sh", "-c", "id -u; cat"], stdin=b"through stdin")
    assert (done.rc, done.stdout) == (0, f"{record.uid}\nthrough stdin".encode())


def test_the_agent_imports_from_the_images_bytecode_under_its_read_only_root(engine_controller):
    # Every module the reference agent imports (at start and later) is loaded from a pyc that matches its
    # source (python -v says "X.pyc matches X.py"); one compiled from source says "code object from X.py".
    record = engine_controller.provision("org1", "dave")
    engine_controller.wake(record.id)
    modules = "json, os, re, socket, sys, threading, time, http.client, http.server, urllib.parse, subprocess"
    done = engine_controller.exec(record.id, ["/usr/bin/python3", "-I", "-S", "-v", "-c", f"import {modules}"])
    assert done.rc == 0, done.stderr[-2000:]
    lines = done.stderr.decode().splitlines()
    from_bytecode = [line for line in lines if line.startswith("# code object from ") and ".pyc" in line]
    from_source = [line for line in lines if line.startswith("# code object from ") and ".pyc" not in line]
    assert from_source == [] and len(from_bytecode) > 20, (from_source, len(from_bytecode))
    assert any("/http/__pycache__/server.cpython-" in line for line in from_bytecode)


def test_memory_limit_kills_an_allocation_over_it(engine_controller):
    record = engine_controller.provision("org1", "bob", limits=Limits(128 << 20, 64))
    engine_controller.wake(record.id)
    grab = "b = bytearray(300 << 20); print('alive')"
    done = engine_controller.exec(record.id, ["/usr/bin/python3", "-I", "-S", "-c", grab])
    assert done.rc == 137 and b"alive" not in done.stdout
    assert engine_controller.exec(record.id, ["/usr/bin/python3", "-I", "-S", "-c", "b = bytearray(20 << 20)"]).rc == 0


def test_static_probe_runs_by_descriptor_in_an_image_without_python(root, run, tmp_path):
    if shutil.which("gcc") is None:
        raise RuntimeError("gcc is missing: tools/setup-machine installs it")
    source = tmp_path / "standin.c"
    source.write_text(STAND_IN_C)
    binary = root / "standin"
    subprocess.run(["gcc", "-static", "-O1", "-o", str(binary), str(source)], check=True)
    os.chmod(binary, 0o755)
    engine = containers.DockerEngine(images.ensure("slim"), run)
    uid = 3_900_000 + os.getpid() % 1000
    home = root / "box"
    for sub, owner in (("volume", uid), ("control", uid), ("etc", 0)):
        (home / sub).mkdir(parents=True)
        os.chown(home / sub, owner, owner)
    os.chmod(home, 0o711)
    marker = secrets.token_hex(8)
    (home / "volume" / "marker").write_text(marker)
    os.chown(home / "volume" / "marker", uid, uid)
    (home / "etc" / "passwd").write_text(f"agent:x:{uid}:{uid}::/data:/bin/sh\n")
    (home / "etc" / "group").write_text(f"agent:x:{uid}:\n")
    spec = SandboxSpec(instance_id="slim", uid=uid, gid=uid, volume=home / "volume", control_dir=home / "control",
                       etc_dir=home / "etc", image_dir=home, hostname="slim")
    proc = engine.start(spec, Limits(64 << 20, 16), ["/bin/sleep", "infinity"])
    try:
        assert engine.run_inside(proc, ["/bin/sh", "-c", "command -v python3 || echo none"]).stdout == b"none\n"
        done = engine.run_binary_inside(proc, str(binary), [])
        assert done.rc == 0, done.stderr
        lines = done.stdout.decode().splitlines()
        assert lines[0] == f"uid={uid} mnt={os.readlink(f'/proc/{proc.host_pid}/ns/mnt')}"
        assert "python3" not in lines[1].split() and "sleep" in lines[1].split()  # the container's /usr/bin
        assert lines[2] == f"data {marker}"
        assert engine.client.api.diff(proc.container_id) in (None, [])  # nothing written into the container
    finally:
        proc.stop()
        engine.close()
    assert containers.run_containers(run) == []


def test_close_leaves_no_container_and_no_cgroup(root, run):
    controller = Controller(root, run, engine=containers.DockerEngine(images.ensure("reference"), run))
    record = controller.provision("org1", "carol")
    controller.wake(record.id)
    controller.crash(record.id)  # a stopped container must go too
    controller.close()
    assert containers.run_containers(run) == []
    assert not list(Path("/sys/fs/cgroup").glob(f"*/pairproof/{run}"))


def test_clean_removes_the_containers_of_a_sigkilled_run(root, run):
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(REPO)!r})
        from acceptance.targets.docker import image
        from runtime.isolation import containers
        from runtime.controller import Controller
        c = Controller({str(root)!r}, {run!r}, engine=containers.DockerEngine(image.ensure("reference"), {run!r}))
        c.wake(c.provision("org1", "dave").id)
        print("up", flush=True)
        time.sleep(600)
    """)
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, cwd=REPO)
    try:
        assert owner.stdout.readline() == b"up\n"
    finally:
        owner.kill()
        owner.wait()
    assert len(containers.run_containers(run)) == 1  # the engine keeps it: its owner's death is no teardown
    from acceptance.targets.docker import clean

    lines = clean(root)
    assert f"removed 1 containers of run {run}" in lines
    assert containers.run_containers(run) == []
    assert not list(Path("/sys/fs/cgroup").glob(f"*/pairproof/{run}"))
    client = docker.from_env()
    try:
        assert client.volumes.list(filters={"label": f"{containers.LABEL_RUN}={run}"}) == []
    finally:
        client.close()


def test_check_driver_passes_on_the_docker_target(root):
    """The docker driver's core and every facet it claims work, one real round trip each; it leaves nothing."""
    done = subprocess.run([sys.executable, "-m", "acceptance.cli", "check-driver", "docker", "--state-dir", str(root)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    from acceptance.contract.registry import FACETS

    every = f"{len(FACETS)} of {len(FACETS)} claimed facets work"  # every facet, startup's traced start included
    assert "check-driver: PASSED" in done.stdout and every in done.stdout, done.stdout[-2000:]
    run = done.stdout.split("(run ", 1)[1].split(")", 1)[0]
    assert containers.run_containers(run) == []


def test_the_engine_log_of_a_container_is_kept_past_its_removal(engine_controller, run):
    """Issue 27 item 3: what an agent writes to its stdout is the engine's log of its container, and the engine
    drops that log with the container. The platform reads it just before every removal, so ``engine_logs``
    still has it, whole and marked removed, once the instance sleeps (its container gone); a live container's
    log is read from the engine."""
    record = engine_controller.provision("org1", "erin")
    engine_controller.wake(record.id)
    proc = engine_controller.sandbox(record.id)
    marker = f"pp-engine-log-{secrets.token_hex(6)}".encode()
    out = os.open(f"/proc/{proc.host_pid}/fd/1", os.O_WRONLY | os.O_APPEND)
    try:
        os.write(out, marker + b"\n")
    finally:
        os.close(out)
    engine = engine_controller.engine
    live = until(lambda: [log for log in engine.engine_logs() if log.instance == record.id and marker in log.data],
                 10, "the marker in the live container's engine log", every=0.05)
    assert [(log.removed, log.complete) for log in live] == [(False, True)]
    engine_controller.sleep(record.id)
    assert containers.run_containers(run) == []  # the engine's copy went with it
    kept = [log for log in engine.engine_logs() if log.instance == record.id]
    assert [(log.removed, log.complete, marker in log.data) for log in kept] == [(True, True, True)]


def test_the_static_probe_runs_with_the_agents_groups_and_one_with_fewer_is_refused(root, run):
    """Issue 27 item 7: an agent given a group beyond its own (``--group-add``, as the engine-socket mistake
    does) reaches what that group reaches; the static probe by descriptor runs with the same groups, so its
    proof's rights equal the agent's as the host sees them. Entered the old way (``nsenter -S -G``, which
    clears the groups) the same probe has fewer groups than the agent, and the proof is refused."""
    from acceptance.errors import ProofError
    from acceptance.harness import probes

    binary = probes.probe_binary()
    if binary is None:
        raise RuntimeError("no static probe: tools/build-probe build/probe/ppscan")
    engine = containers.DockerEngine(images.ensure("slim"), run)
    uid = 3_910_000 + os.getpid() % 1000
    home = root / "box"
    for sub, owner in (("volume", uid), ("control", uid), ("etc", 0)):
        (home / sub).mkdir(parents=True)
        os.chown(home / sub, owner, owner)
    (home / "etc" / "passwd").write_text(f"agent:x:{uid}:{uid}::/data:/bin/sh\n")
    (home / "etc" / "group").write_text(f"agent:x:{uid}:\n")
    spec = SandboxSpec(instance_id="grouped", uid=uid, gid=uid, volume=home / "volume", control_dir=home / "control",
                       etc_dir=home / "etc", image_dir=home, hostname="grouped")
    extra = 3_919_999
    proc = engine.start(spec, Limits(64 << 20, 16), ["/bin/sleep", "infinity"],
                        edit=lambda config: {**config, "group_add": [str(extra)]})
    try:
        agent = probes.rights_on_host(proc.host_pid)
        assert str(extra) in agent["groups"].split(","), agent
        namespaces = {ns: os.readlink(f"/proc/{proc.host_pid}/ns/{ns}") for ns in probes.PROOF_NAMESPACES}
        done = engine.run_binary_inside(proc, str(binary), ["--run", TEST_RUN, "--proof", "n0nce", "/nonexistent"])
        first = done.stdout.decode().splitlines()[0]
        assert probes.verify_proof(first, "n0nce", namespaces, uid, agent) == first
        from runtime.isolation.sandbox import _finish, namespace_flags, spawn_gated

        fd = os.open(binary, os.O_RDONLY | os.O_CLOEXEC)
        try:
            old = spawn_gated(["setpriv", "--no-new-privs", "nsenter", "-t", str(proc.host_pid),
                               *namespace_flags(proc.host_pid), "--root", "--wd", "-S", str(uid), "-G", str(uid),
                               f"/proc/self/fd/{fd}", "--run", TEST_RUN, "--proof", "n0nce", "/nonexistent"], proc.cgroup,
                              pass_fds=(fd,),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              start_new_session=True)
        finally:
            os.close(fd)
        first = _finish(old, None, 30, "the probe entered the old way").stdout.decode().splitlines()[0]
        with pytest.raises(ProofError, match=f"groups \\[{extra}\\]"):
            probes.verify_proof(first, "n0nce", namespaces, uid, agent)
    finally:
        proc.stop()
        engine.close()
