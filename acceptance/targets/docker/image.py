"""The reference agent image, built locally from this machine's own files: nothing is pulled.

The image's root is assembled from the files of installed Debian packages (``dpkg -L``) of a small closure
(Python, a shell, coreutils, procps, getent) plus the runtime's agent at /opt/pairproof/reference.py, written
to a tarball and ``docker import``ed. Its tag and its ``pairproof.inputs`` label carry a hash of every
input (each file's path, mode, size and mtime, and the agent's bytes), so an image built once is reused
until an input changes, and a rebuild takes seconds. ``slim`` is the same without Python: an image where
only the static probe (run by descriptor) can scan.

Every Python module of the image is shipped with its bytecode (``__pycache__/*.pyc``, compiled at build by
the image's own interpreter, the host file that goes in): Debian's packages list no ``.pyc`` (``py3compile``
makes them at install), and an instance's root is read-only, so without them every start would compile
each module it imports from source, again (about 300 ms of an agent's start to ready on this machine).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import stat
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import runtime
from acceptance.errors import SetupError
from runtime.errors import SandboxError
from runtime.isolation import containers

AGENT = Path(runtime.__file__).parent / "agents" / "reference.py"  # the runtime's own agent, installed or in the checkout
REPOSITORY = "pairproof/agent"
LABEL_INPUTS = "pairproof.inputs"
BUILDER = "2"  # bump when the way the root is assembled changes
BYTECODE = "1"  # bump when the way its bytecode is made changes (only an image with Python has any)
BUILD_LOCK = "/var/lib/pairproof-docker/image-build.lock"  # beside the engine's state (tools/setup-docker)
# The agent needs python3; the suite's probes a shell, coreutils, ps (procps) and getent (libc-bin).
SEEDS = {"reference": ("python3-minimal", "python3.11", "dash", "coreutils", "procps", "libc-bin"),
         "slim": ("dash", "coreutils")}
SKIP = ("/usr/share/doc/", "/usr/share/man/", "/usr/share/locale/", "/usr/share/info/", "/usr/share/lintian/",
        "/usr/share/bug/", "/etc/init.d/", "/etc/cron.")
DIRS = ("data", "run", "run/agent", "tmp", "proc", "sys", "dev", "etc", "etc/pairproof", "opt", "opt/pairproof", "root")


def _database() -> dict[str, str]:
    """Every installed package -> its Depends and Pre-Depends, from one dpkg-query."""
    listed = subprocess.run(["dpkg-query", "-W", "-f=${Package}\t${Status}\t${Depends},${Pre-Depends}\n"],
                            capture_output=True, text=True, check=True).stdout
    found = {}
    for line in listed.splitlines():
        name, status, depends = (line.split("\t") + ["", ""])[:3]
        if status.endswith(" installed"):
            found[name] = depends
    return found


def closure(seeds: tuple[str, ...]) -> list[str]:
    """The installed packages ``seeds`` need (Depends and Pre-Depends, the first installed alternative)."""
    installed = _database()
    seen: set[str] = set()
    todo = list(seeds)
    while todo:
        package = todo.pop()
        if package in seen:
            continue
        if package not in installed:
            raise SetupError(f"the agent image needs the Debian package {package!r}, which is not installed: "
                             f"apt-get install {package}")
        seen.add(package)
        for alternatives in filter(None, (a.strip() for a in installed[package].split(","))):
            for option in alternatives.split("|"):
                name = option.strip().split()[0].split(":")[0]
                if name in installed:
                    todo.append(name)
                    break
    return sorted(seen)


def _files(packages: list[str]) -> dict[str, str]:
    """arcname -> host path of every regular file and symlink of ``packages``, under its real folder (a
    usr-merged /bin/x is usr/bin/x)."""
    listed = subprocess.run(["dpkg", "-L", *packages], capture_output=True, text=True, check=True).stdout
    files: dict[str, str] = {}
    for path in listed.splitlines():
        if not path.startswith("/") or path.startswith(SKIP) or any(path.startswith(s.rstrip("/")) and
                                                                      path.rstrip("/") == s.rstrip("/") for s in SKIP):
            continue
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue  # listed but not there (a diverted or removed conffile)
        if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            continue
        real = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
        files[real.lstrip("/")] = path
    return files


@dataclass(frozen=True)
class Plan:
    flavour: str
    files: dict[str, str]
    inputs: str

    @property
    def tag(self) -> str:
        return f"{REPOSITORY}:{self.flavour}-{self.inputs[:16]}"


def plan(flavour: str = "reference") -> Plan:
    if flavour not in SEEDS:
        raise SetupError(f"unknown image flavour {flavour!r}: choose one of {', '.join(SEEDS)}")
    files = _files(closure(SEEDS[flavour]))
    digest = hashlib.sha256(f"builder {BUILDER} {flavour}\n".encode())
    for arcname in sorted(files):
        info = os.lstat(files[arcname])
        digest.update(f"{arcname} {info.st_mode:o} {info.st_size} {info.st_mtime_ns}\n".encode())
    if flavour == "reference":
        digest.update(AGENT.read_bytes())
    made = Plan(flavour, files, "")
    if _interpreter(made) is not None:
        digest.update(f"bytecode {BYTECODE}\n".encode())  # an image of these files without it is not this one
    return Plan(flavour, files, digest.hexdigest())


# Run by the image's interpreter: compile each (arcname, host path) read from stdin to
# OUT/<arcname's __pycache__ name>, recording the in-image path. Timestamp-checked pycs, as py3compile makes:
# the tar keeps each source's mtime and size, so the interpreter in the container finds them valid.
_COMPILE = """
import importlib.util, json, os, py_compile, sys
out = sys.argv[1]
for arcname, source in json.load(sys.stdin):
    cfile = os.path.join(out, importlib.util.cache_from_source(arcname))
    try:
        py_compile.compile(source, cfile=cfile, dfile="/" + arcname, doraise=True)
    except py_compile.PyCompileError:
        continue  # a module its interpreter cannot compile (test data of a package): imported from source, if ever
"""


def _interpreter(plan_: Plan) -> str | None:
    """The host path of the image's Python interpreter (None for an image without one)."""
    names = sorted(a for a in plan_.files if a.startswith("usr/bin/python3.") and a[len("usr/bin/python3."):].isdigit())
    return plan_.files[names[-1]] if names else None


def _bytecode(plan_: Plan, folder: str) -> dict[str, str]:
    """arcname -> host path of the compiled bytecode of every ``.py`` of the image, made under ``folder``."""
    python = _interpreter(plan_)
    sources = sorted(a for a in plan_.files if a.endswith(".py") and not os.path.islink(plan_.files[a]))
    if python is None or not sources:
        return {}
    try:
        subprocess.run([python, "-I", "-S", "-c", _COMPILE, folder], check=True, capture_output=True, text=True,
                       input=json.dumps([(a, plan_.files[a]) for a in sources]))
    except subprocess.CalledProcessError as exc:
        raise SetupError(f"compiling the {plan_.flavour} image's Python modules with {python} failed: "
                         f"{exc.stderr.strip()[-500:]}") from exc
    made = {}
    for dirpath, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(dirpath, name)
            made[os.path.relpath(path, folder)] = path
    return made


def _write_root(plan_: Plan, out) -> None:
    with tempfile.TemporaryDirectory(prefix="pairproof-pyc-") as compiled:
        _write_tar(plan_, out, _bytecode(plan_, compiled))


def _write_tar(plan_: Plan, out, bytecode: dict[str, str]) -> None:
    with tarfile.open(fileobj=out, mode="w") as tar:
        def folder(name: str, mode: int = 0o755) -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, mode
            tar.addfile(info)

        def data(name: str, body: bytes, mode: int = 0o644) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(body), mode
            tar.addfile(info, io.BytesIO(body))

        made: set[str] = set(DIRS)
        own = {"etc/passwd", "etc/group", "etc/nsswitch.conf", "opt/pairproof/reference.py"}
        for name in DIRS:
            folder(name, 0o1777 if name == "tmp" else 0o700 if name == "root" else 0o755)
        for link in ("bin", "sbin", "lib", "lib64"):
            own.add(link)  # usr-merged: the same link as the host's (a package may list it too)
            if os.path.islink(f"/{link}"):
                info = tarfile.TarInfo(link)
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink(f"/{link}")
                tar.addfile(info)
        for arcname in sorted(set(plan_.files) - own):
            parent = os.path.dirname(arcname)
            chain = []
            while parent and parent not in made:
                chain.append(parent)
                parent = os.path.dirname(parent)
            for d in reversed(chain):
                folder(d)
                made.add(d)
            tar.add(plan_.files[arcname], arcname=arcname, recursive=False)
        for arcname in sorted(bytecode):  # every __pycache__ beside its sources' folder, made above
            if os.path.dirname(arcname) not in made:
                folder(os.path.dirname(arcname))
                made.add(os.path.dirname(arcname))
            tar.add(bytecode[arcname], arcname=arcname, recursive=False)
        if "bin/sh" not in plan_.files and "usr/bin/sh" not in plan_.files:
            info = tarfile.TarInfo("usr/bin/sh")
            info.type, info.linkname = tarfile.SYMTYPE, "dash"
            tar.addfile(info)
        data("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n")
        data("etc/group", b"root:x:0:\n")
        data("etc/nsswitch.conf", b"passwd: files\ngroup: files\nhosts: files dns\n")
        if plan_.flavour == "reference":
            data("opt/pairproof/reference.py", AGENT.read_bytes())


def ensure(flavour: str = "reference", *, docker_client=None) -> str:
    """The tag of the ``flavour`` image, built now unless an image of the same inputs is already there."""

    made = docker_client or containers.client()
    wanted = plan(flavour)
    # One build at a time on this machine (pytest workers, parallel runs): a second process waits, then finds
    # the image the first one built instead of importing a twin that would be left dangling.
    with _build_lock():
        return _ensure(made, wanted, flavour)


@contextlib.contextmanager
def _build_lock():
    import fcntl

    folder = Path(BUILD_LOCK).parent
    folder.mkdir(parents=True, exist_ok=True)
    with open(BUILD_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _ensure(made, wanted: Plan, flavour: str) -> str:
    import docker

    try:
        made.images.get(wanted.tag)
        return wanted.tag
    except docker.errors.ImageNotFound:
        pass
    with tempfile.TemporaryFile() as root:
        _write_root(wanted, root)
        root.seek(0)
        repository, _, tag = wanted.tag.partition(":")
        try:
            made.api.import_image(src=root, repository=repository, tag=tag,
                                  changes=[f"LABEL {LABEL_INPUTS}={wanted.inputs}", "WORKDIR /data",
                                           "ENV PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8"])
        except docker.errors.DockerException as exc:
            raise SandboxError(f"docker import of the {flavour} agent image failed: {exc}") from exc
    made.images.get(wanted.tag)  # the import said nothing wrong; the tag must now exist
    # Images of other inputs are left where they are: one may be the image a qualification just judged (a docker
    # mutant of the agent builds its own image from the mutated source; removing the others then removed the
    # qualified one, and the gate, rebuilding it, found another image id than the verdict's).
    return wanted.tag
