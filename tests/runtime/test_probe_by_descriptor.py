"""A static probe runs in a sandbox that has no Python and no shell, by descriptor, writing nothing there.

The stand-in for the static scanner is a static C program built here (``gcc -static``; busybox cannot stand
in: it picks its applet from argv[0], which a descriptor exec makes ``/proc/self/fd/N``). It reports its uid,
its namespaces, its image (device and inode of /proc/self/exe), what the sandbox's /usr/bin and /data hold,
and one variable of its environment; told ``write PATH`` it writes PATH instead (the control). The sandbox is an extra
one (``Controller.launch_extra``) whose argv edit hides every interpreter and shell: /usr/bin holds only
``sleep`` (its command), /usr/sbin, /usr/local and the agent image are empty.
"""

from __future__ import annotations

import os
import secrets
import stat
import subprocess
import time
from pathlib import Path

import pytest

from runtime import sandbox
from runtime.controller import Controller

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
