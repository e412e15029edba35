"""Probes: testinfra modules running inside a sandbox, each with proof that it ran there.

``SandboxBackend`` is a testinfra backend whose commands go through ``Target.exec``: ``host.file(...)``,
``host.process``, ``host.mount_point(...)``, ``host.user()`` all run inside the instance, as the agent
would. The docker target's ``exec`` is a ``docker exec`` through docker-py, so its probes take this same
path rather than testinfra's own docker backend (which shells out to the docker client by container name):
one backend for every target keeps the proof check below in one place and the suite on the contract.

Proof of execution (DESIGN §5 rule 2): every command is wrapped so that its first line of output is a
nonce fresh for that one command, the namespace identities the shell sees (``/proc/self/ns/*``) and its
uid; the static probe, run by descriptor where no shell may exist, prints that line itself (``--proof``).
The backend checks that line against what the host sees of the instance (``Target.identity``), and then
cross-checks the driver's word independently: host processes must exist in those very pid and net
namespaces, the driver's pid among them, all owned on the host by the instance's uid. A mismatch or a
missing line raises ``ProofError``: an empty result from a probe that did not run where we think is
not a pass.

A scan proves it looked (rule 5): ``scan`` and ``dump`` are the only ways the suite reads a sandbox's
whole filesystem, and each judges its own completeness before anything is returned. It must end with
its completeness record (files and bytes read, what it could not read and why, what it cut short),
nothing may be cut short, every path it could not read must be a denial or a file that vanished, and
the same call must find the prober's own canaries: fresh sentinels written into the sandbox's /tmp and
/data (by the static probe itself, or by the sandbox's shell for detect.py; one that could not be written
counts as not found) and carried in the probe's own environment, plus any canary planted for that instance. Anything
less raises ``ProofError`` (the plugin judges the test *broken*). What each scan read is kept as the
test's evidence, for the verdict and the Allure report.
"""

from __future__ import annotations

import base64
import inspect
import json
import os
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import testinfra.host
from testinfra.backend import base

from acceptance.contract import PROOF_NAMESPACES, InstanceRef, Principal, Target
from acceptance.errors import ProofError
from acceptance.harness.evidence import attach
from acceptance.harness.wait import settle
from canaries import Mint
from canaries import detect as detect_module
from canaries.known import find_known

PROOF_TAG = "PAIRPROOF-PROOF"
WRAPPER = (
    'printf "%s %s" "' + PROOF_TAG + '" "$1"; '
    'for ns in ' + " ".join(PROOF_NAMESPACES) + '; do printf " %s" "$(readlink /proc/self/ns/$ns)"; done; '
    'printf " uid=%s" "$(id -u)"; '
    # The rights it runs with, from its own /proc/self/status (builtins only), as ppscan prints them: the host
    # compares them with the agent's (``judge_rights``).
    'w() { g=$1; }; j() { gs=; for x; do gs=${gs:+$gs,}$x; done; }; g=; gs=; c=; n=; s=; '
    'while read -r k v; do case "$k" in Gid:) w $v;; Groups:) j $v;; CapEff:) c=$v;; NoNewPrivs:) n=$v;; '
    'Seccomp:) s=$v;; esac; done < /proc/self/status; '
    'printf " gid=%s groups=%s cap=%s nnp=%s seccomp=%s\\n" "$g" "$gs" "$c" "$n" "$s"; '
    # ``sh`` by name: the suite's busybox runs its own applet (``SHELL_BUILT``); the fallback, the sandbox's.
    'exec sh -c "$2"'
)
# The rights a proof line names after its uid (``judge_rights`` compares them with the agent's).
RIGHTS = ("gid", "groups", "cap", "nnp", "seccomp")
DETECT = Path(detect_module.__file__)
# The static probe (issue 14): same CLI and output as detect.py, run by descriptor (no Python, no shell and
# no file of ours in the sandbox). Named by PAIRPROOF_PROBE, else looked for where tools/setup-machine builds it.
PROBE_ENV = "PAIRPROOF_PROBE"
PROBE_BUILT = Path(__file__).resolve().parents[2] / "build" / "probe" / "ppscan"


# The shell probes run (issue 28): Debian's static busybox, copied by tools/setup-machine to build/probe/sh mode 0711,
# run by descriptor with the instance left running (``exec_binary(hold=False, by_name=True)``). Its sh runs its
# own applets (cat, stat, id, ps...) before any file of the sandbox's, so a probe's shell and its commands are the
# harness's, not the image's; unreadable to the sandbox's uid, it runs non-dumpable (the agent beside it cannot
# trace it or read its environment, memory or descriptors). Named by PAIRPROOF_SHELL, else looked for there.
SHELL_ENV = "PAIRPROOF_SHELL"
SHELL_BUILT = PROBE_BUILT.parent / "sh"


def shell_binary() -> Path | None:
    """The suite's own shell (``SHELL_BUILT``), or None when there is none (shell probes then run the sandbox's
    ``/bin/sh`` and their records say so). ``PAIRPROOF_SHELL`` naming something else than an executable file
    is a configuration error."""
    named = os.environ.get(SHELL_ENV)
    if named:
        path = Path(named)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ProofError(f"{SHELL_ENV}={named} is not an executable file: run tools/setup-machine (it installs "
                             f"busybox-static as build/probe/sh) or unset {SHELL_ENV}")
        path = path.resolve()
    elif SHELL_BUILT.is_file() and os.access(SHELL_BUILT, os.X_OK):
        path = SHELL_BUILT
    else:
        return None
    # Readable by the sandbox's uid, it would run dumpable: the agent beside a shell probe could trace it.
    if path.stat().st_mode & 0o044:
        raise ProofError(f"the suite's shell {path} is readable by others (mode {path.stat().st_mode & 0o777:o}): a "
                         f"sandbox's uid would run it dumpable, within the agent's reach; chmod 0711 {path}")
    return path


def shell_for(target: object) -> tuple[Path | None, str]:
    """The shell a shell probe runs and the note that says which and why: the suite's busybox by descriptor
    when it exists and the driver's ``exec_binary`` can leave the instance running and name the program
    (``hold``, ``by_name``), else the sandbox's own ``/bin/sh`` through ``exec``."""
    binary = shell_binary()
    if binary is None:
        return None, f"the sandbox's /bin/sh: no suite shell ({SHELL_ENV} unset, nothing at {SHELL_BUILT})"
    run = getattr(target, "exec_binary", None)
    if run is None:
        return None, "the sandbox's /bin/sh: the driver has no exec_binary"
    try:
        params = inspect.signature(run).parameters
    except (TypeError, ValueError):
        params = {}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())  # a delegating driver
    if not takes_any and not {"hold", "by_name"} <= set(params):
        return None, "the sandbox's /bin/sh: the driver's exec_binary takes no hold= and by_name="
    return binary, f"the suite's shell {binary} by descriptor"


def probe_binary() -> Path | None:
    """The static probe to run, or None when there is none (the scan then runs detect.py and says so).
    ``PAIRPROOF_PROBE`` naming something that is not an executable file is a configuration error, never a
    quiet fallback."""
    named = os.environ.get(PROBE_ENV)
    if named:
        path = Path(named)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ProofError(f"{PROBE_ENV}={named} is not an executable file: build the probe or unset {PROBE_ENV}")
        return path.resolve()
    return PROBE_BUILT if PROBE_BUILT.is_file() and os.access(PROBE_BUILT, os.X_OK) else None


@dataclass
class ProbeRecord:
    """One command run in a sandbox: what ran, where it proved it ran, what came back. ``read``: whether
    anything read what it returned (its exit status or output); only then is its proof the test's (a probe
    whose result nobody looked at proves nothing about what the test judged)."""

    instance: str
    principal: str
    command: str
    rc: int
    proof: str
    stdout_head: str
    stderr_head: str
    read: bool = False


@dataclass
class ProbeLog:
    """The probes of one test; the plugin turns it into the test's proof record and Allure transcript.

    A probe made from the platform side (a call to the broker, proxy, product or controller, not a command
    inside a sandbox) proves it ran by what the platform itself recorded of it: ``platform_probe`` gives a
    fresh id for that one request, the case sends it the way the platform carries a request id (an
    ``X-Request-Id`` header, or a contract method's ``request_id=``), and ``confirm`` takes the proof from
    the platform's own record (its log, a component's audit, the provider's record of calls). Text the
    test wrote is never proof: a probe that is not confirmed leaves no proof at all.
    """

    nonce: str
    records: list[ProbeRecord] = field(default_factory=list)
    # What each refusal looked at (files and bytes read, sockets tried, packets captured, records
    # compared): one dict per observation, kept in the verdict and attached to the Allure result.
    evidence: list[dict[str, Any]] = field(default_factory=list)
    pending: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    # Every ProofError the harness raised in this test, kept even if the test caught it: a probe that did
    # not prove itself, or a scan that did not prove it looked, leaves the test broken (the plugin checks).
    failures: list[str] = field(default_factory=list)
    # Reads the platform's own records (its log, the provider's record) straight from the target, when the
    # target has them: ``confirm`` checks the nonce there too, so text a test wrote cannot stand in for them.
    platform_record: Callable[[], str] | None = None
    # Request ids the harness gave the test's platform calls (``proving_calls``), not yet looked up.
    calls: dict[str, str] = field(default_factory=dict)
    # Set while the test's own body runs (``fixtures.pytest_runtest_call``): only its calls may prove it.
    in_call: bool = False

    def note(self, kind: str, **facts: Any) -> None:
        """Keep one observation as evidence of what the test looked at."""
        self.evidence.append({"kind": kind, **facts})

    def fail(self, message: str) -> ProofError:
        """Record a proof failure of this test and return the ProofError to raise."""
        self.failures.append(message)
        return ProofError(message)

    def unproved(self) -> list[str]:
        """Why this test's probes do not prove it looked: every proof failure, caught or not, and every
        platform probe taken but never confirmed."""
        return [*self.failures, *(f"platform probe {what!r} of {name}@{key} ({nonce}) was never confirmed in the "
                                  "platform's record" for nonce, (key, name, what) in self.pending.items())]

    def platform_probe(self, subject: InstanceRef | Principal, what: str) -> str:
        """A fresh id for one platform-side probe of ``subject`` (a principal when the probe is made before
        any instance exists), to send with that probe's request and then ``confirm``."""
        key = subject.key if isinstance(subject, InstanceRef) else "(no instance)"
        name = subject.principal.name if isinstance(subject, InstanceRef) else subject.name
        nonce = "pp-" + secrets.token_hex(8)
        self.pending[nonce] = (key, name, what)
        return nonce

    def confirm(self, nonce: str, record: str) -> str:
        """Prove the probe ``nonce`` ran: ``record`` is text the platform wrote (never the test), and the
        line of it that names the nonce becomes the probe's proof and is returned. Raises ``ProofError`` if
        the nonce was not given out by ``platform_probe`` (or was confirmed already), or if the platform's
        record does not name it: the request never reached what we think answered it."""
        if nonce not in self.pending:
            raise self.fail(f"{nonce!r} is not an unconfirmed platform probe of this test: take a fresh one from "
                             "probe_log.platform_probe() for each probe and confirm it once")
        key, name, what = self.pending[nonce]
        line = _line_naming(record, nonce)
        if line is not None and self.platform_record is not None and nonce not in self.platform_record():
            raise self.fail(f"the record handed in for the probe {what!r} of {name}@{key} names {nonce}, but the "
                             "platform's own records (read from the target) do not: that text is not the platform's")
        if line is None:
            raise self.fail(f"the platform has no record of the probe {what!r} of {name}@{key} (request id {nonce}): "
                             f"it was not sent with the request, or the request never reached the platform "
                             f"({len(record)} characters of the platform's record searched)")
        del self.pending[nonce]
        self._proved(key, name, what, f"platform {key}: {line[:400]}")
        return line

    def looked(self, what: str, proof: str) -> None:
        """A host-side observation that proved it looked where it claims (a host sweep that found every sentinel
        it planted in each root it walked): its proof is the test's, as a probe's in a sandbox is. Only the
        harness's own observers call it, after their proof check passed."""
        self._proved("host", "", what, f"host observation {what}: {proof[:400]}")

    def _proved(self, instance: str, principal: str, what: str, proof: str) -> None:
        """Keep one proof made outside a sandbox (a platform record, a host observation) as a read probe."""
        proved = ProbeRecord(instance, principal, what, 0, proof, "", "", read=True)
        self.records.append(proved)
        _attach(proved)

    def call_probe(self, what: str) -> str:
        """A fresh request id for one platform call the test made without naming one (``proving_calls`` sends
        it with the call); ``settle_calls`` later takes the call's proof from the platform's record of it.
        Unlike ``platform_probe``, a call the platform kept no record of is not a failure: it lends no proof."""
        nonce = "pp-" + secrets.token_hex(8)
        if self.in_call:  # a fixture's call (an instance provisioned for the test) proves nothing the test read
            self.calls[nonce] = what
        return nonce

    def settle_calls(self) -> None:
        """Take the proof of each platform call of this test that the platform's own record names (read once,
        from the target, never from the test): the call reached the platform, and what it returned is what
        the test read. A call no record names lends no proof (the test may still have others)."""
        if not self.calls or self.platform_record is None:
            self.calls.clear()
            return
        try:
            record = self.platform_record()
        except Exception as exc:  # noqa: BLE001 - a record that cannot be read proves nothing; it must not turn a finding into an error
            self.note("platform calls unproved", reason=f"the platform's record could not be read: {exc}"[:300])
            self.calls.clear()
            return
        for nonce, what in self.calls.items():
            line = _line_naming(record, nonce)
            if line is not None:
                self._proved("platform", "", what, f"platform call {what}: {line[:400]}")
        self.calls.clear()

    def proofs(self) -> list[str]:
        """The test's proof of execution: the proofs of the probes whose results were read (by the test, or by
        the harness helper that made its observation: a scan, a file test, a confirmed platform record). A
        probe nobody read (``run("true")`` beside an observation made another way) lends no proof."""
        return [r.proof for r in self.records if r.proof and r.read]

    def transcript(self) -> str:
        return "\n\n".join(
            f"[{r.principal}@{r.instance}] $ {r.command}\n# proof: {r.proof}\n# rc={r.rc}\n{r.stdout_head}"
            + (f"\n# stderr: {r.stderr_head}" if r.stderr_head else "")
            for r in self.records)

    def as_property(self) -> list[dict[str, Any]]:
        return [asdict(r) for r in self.records]


def verify_proof(line: str, nonce: str, namespaces: dict[str, str], uid: int,
                 agent: Mapping[str, str] | None = None) -> str:
    """Check a proof line; return it, or raise ProofError saying what did not match. With ``agent`` (the
    agent's rights, ``rights_on_host``), the probe's rights must be at least the agent's (``judge_rights``)."""
    parts = line.split()
    expected = [PROOF_TAG, nonce, *(namespaces[n] for n in PROOF_NAMESPACES), f"uid={uid}"]
    if len(parts) != len(expected) + len(RIGHTS) or parts[:2] != expected[:2]:
        raise ProofError(f"probe output did not start with the run's proof line (nonce {nonce}): got {line[:200]!r}")
    for name, seen, want in zip(("tag", "nonce", *PROOF_NAMESPACES, "uid"), parts, expected):
        if seen != want:
            raise ProofError(f"probe ran outside the intended sandbox: {name} is {seen}, the instance's is {want}")
    fields = dict(part.partition("=")[::2] for part in parts[len(expected):])
    if sorted(fields) != sorted(RIGHTS):
        raise ProofError(f"the proof line does not name the probe's rights ({', '.join(RIGHTS)}): got {line[:300]!r}")
    if agent is not None:
        judge_rights(fields, agent)
    return line


def proof_rights(line: str) -> dict[str, str]:
    """The rights a proof line names after its uid (``verify_proof`` checked they are all there)."""
    return dict(part.partition("=")[::2] for part in line.split()[-len(RIGHTS):])


# A sandbox's pid 1 may still be putting its own restrictions in place just after its launcher reported it
# (bubblewrap's pid 1 shows Seccomp 0 for a moment, then installs the filter it was given): a probe found to
# have fewer rights is judged again against the agent's status read afresh, until this many seconds have passed.
RIGHTS_SETTLE = 2.0


def judge_rights_settled(probe: Mapping[str, str], host_pid: int, agent: Mapping[str, str]) -> None:
    """``judge_rights`` against ``agent`` (read before the probe ran), then, while it says fewer, against the
    agent's status read again, up to ``RIGHTS_SETTLE`` seconds: only a difference that lasts is a ProofError."""
    try:
        judge_rights(probe, agent)
        return
    except ProofError:
        pass

    def settled(now: Mapping[str, str]) -> bool:
        try:
            judge_rights(probe, now)
        except ProofError:
            return False
        return True

    judge_rights(probe, settle(lambda: rights_on_host(host_pid), settled, deadline=RIGHTS_SETTLE, step=0.05))


def rights_on_host(host_pid: int) -> dict[str, str]:
    """The rights of the host's process ``host_pid`` (the agent: its sandbox's pid 1), from the host's own
    /proc, in the proof line's terms."""
    try:
        with open(f"/proc/{host_pid}/status", "rb") as f:
            status = dict(line.decode(errors="replace").split(":", 1) for line in f if b":" in line)
    except OSError as exc:
        raise ProofError(f"the host cannot read the agent's status (pid {host_pid}): {exc.strerror}") from None
    status = {k: v.strip() for k, v in status.items()}
    return {"gid": status.get("Gid", "").split()[0] if status.get("Gid") else "",
            "groups": ",".join(status.get("Groups", "").split()), "cap": status.get("CapEff", ""),
            "nnp": status.get("NoNewPrivs", ""), "seccomp": status.get("Seccomp", "")}


def judge_rights(probe: Mapping[str, str], agent: Mapping[str, str]) -> None:
    """A probe with fewer rights than the agent may miss what the agent reaches: ProofError. Fewer is: another
    gid; a group the agent holds (its gid or a supplementary one) that the probe does not; a capability in the
    agent's effective set not in the probe's; no_new_privs where the agent has none (the agent may gain rights
    through a set-id file, the probe may not); a stricter seccomp mode than the agent's (none 0 < filter 2 <
    strict 1). More rights than the agent (Docker's seccomp filter, which the probe by descriptor does not get)
    are not fewer. Two filters of the same mode are not compared (the kernel does not show a filter)."""
    def field(which: Mapping[str, str], name: str, who: str) -> str:
        value = which.get(name, "")
        if value == "" and name != "groups":
            raise ProofError(f"the {who}'s {name} is not shown ({dict(which)}): its rights cannot be compared")
        return value

    try:
        gids = {who: (int(field(w, "gid", who)), {int(g) for g in field(w, "groups", who).split(",") if g})
                for who, w in (("probe", probe), ("agent", agent))}
        caps = {who: int(field(w, "cap", who), 16) for who, w in (("probe", probe), ("agent", agent))}
        nnp = {who: int(field(w, "nnp", who)) for who, w in (("probe", probe), ("agent", agent))}
        mode = {who: int(field(w, "seccomp", who)) for who, w in (("probe", probe), ("agent", agent))}
    except ValueError:
        raise ProofError(f"unreadable rights: the probe's {dict(probe)}, the agent's {dict(agent)}") from None
    fewer = []
    if gids["probe"][0] != gids["agent"][0]:
        fewer.append(f"gid {gids['probe'][0]}, the agent's {gids['agent'][0]}")
    held = {who: {gid, *groups} for who, (gid, groups) in gids.items()}
    if held["agent"] - held["probe"]:
        fewer.append(f"groups {sorted(held['agent'] - held['probe'])} of the agent's are not the probe's")
    if caps["agent"] & ~caps["probe"]:
        fewer.append(f"capabilities {caps['agent'] & ~caps['probe']:#x} of the agent's are not the probe's")
    if nnp["probe"] > nnp["agent"]:
        fewer.append("no_new_privs, which the agent runs without")
    strictness = {0: 0, 2: 1, 1: 2}
    if strictness.get(mode["probe"], 3) > strictness.get(mode["agent"], 3):
        fewer.append(f"seccomp mode {mode['probe']}, stricter than the agent's {mode['agent']}")
    if fewer:
        raise ProofError("the probe ran with fewer rights than the agent (its pid 1, as the host sees it): "
                         + "; ".join(fewer) + ": what the agent reaches, it may not")


def cross_check_on_host(namespaces: dict[str, str], uid: int, host_pid: int) -> str:
    """Check, from the host's own /proc and not the driver's word, that the driver's pid lives in every
    namespace of the probe's proof, that processes live in the probe's pid and net namespaces, the
    driver's pid among them, and that every one of them is owned on the host by ``uid``. Returns a short
    record of what was seen; raises ProofError otherwise.

    Every probe checks again (nothing is cached): a process of another uid may enter the sandbox after
    its first probe, and a namespace's inode number is reused once it is freed.
    """
    members: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if (os.readlink(f"/proc/{entry.name}/ns/pid") != namespaces["pid"]
                    or os.readlink(f"/proc/{entry.name}/ns/net") != namespaces["net"]):
                continue
            with open(f"/proc/{entry.name}/status", "rb") as status:
                real_uid = next(int(line.split()[1]) for line in status if line.startswith(b"Uid:"))
        except (OSError, StopIteration, ValueError):
            continue  # the process ended while we looked
        members[int(entry.name)] = real_uid
    if not members:
        raise ProofError(f"no host process lives in the probe's pid and net namespaces ({namespaces['pid']}, "
                         f"{namespaces['net']}): the driver's identity cannot be confirmed")
    if host_pid not in members:
        raise ProofError(f"the driver says pid {host_pid} is the sandbox, but the host sees it outside the "
                         f"probe's namespaces (processes there: {sorted(members)[:10]})")
    foreign = {pid: owner for pid, owner in members.items() if owner != uid}
    if foreign:
        raise ProofError(f"processes in the probe's namespaces are owned on the host by another uid than the "
                         f"instance's {uid}: {dict(list(foreign.items())[:10])}")
    for ns in (n for n in PROOF_NAMESPACES if n not in ("pid", "net")):  # those two: membership above
        try:
            seen = os.readlink(f"/proc/{host_pid}/ns/{ns}")
        except OSError as exc:
            raise ProofError(f"the driver says pid {host_pid} is the sandbox, but the host cannot read its {ns} "
                             f"namespace ({exc.strerror}): it is gone or not what the driver says") from None
        if seen != namespaces[ns]:
            raise ProofError(f"the driver says the sandbox's {ns} namespace is {namespaces[ns]}, but the host sees "
                             f"its pid {host_pid} in {seen}")
    return f"pid {host_pid} uid {uid} ({len(members)} processes in its namespaces)"


class SandboxBackend(base.BaseBackend):
    NAME = "pairproof"

    def __init__(self, target: Target, ref: InstanceRef, log: ProbeLog, **kwargs: Any) -> None:
        super().__init__(ref.key, **kwargs)
        self.target, self.ref, self.log = target, ref, log
        self._encoding = "utf-8"  # the sandbox runs LANG=C.UTF-8; asking would be one more probe

    def run(self, command: str, *args: str, **kwargs: Any) -> base.CommandResult:
        cmd = self.get_command(command, *args)
        return self.run_with_stdin(cmd, stdin=kwargs.get("stdin"), timeout=kwargs.get("timeout", 120.0))

    def run_with_stdin(self, cmd: str, *, stdin: bytes | None = None, timeout: float = 120.0) -> base.CommandResult:
        """Run the shell command ``cmd`` in the sandbox with the instance running: by the suite's own shell
        (``shell_for``: busybox, by descriptor, non-dumpable) where the driver can, else the sandbox's
        ``/bin/sh``. Either way its first output line is the proof, checked by ``_proven``."""
        shell, _ = shell_for(self.target)

        def launch(identity, nonce: str):
            argv = ["-c", WRAPPER, "sh", nonce, cmd]
            if shell is None:
                result = self.target.exec(self.ref, ["/bin/sh", *argv], stdin=stdin, timeout=timeout)
            else:
                result = self.target.exec_binary(self.ref, str(shell), argv, stdin=stdin, timeout=timeout,
                                                 hold=False, by_name=True)
            return result, f"[{'suite sh' if shell else 'sandbox sh'}] {cmd}"

        return self._proven(launch)

    def run_binary(self, host_path: Path, args: list[str], *, env: dict[str, str],
                   timeout: float = 120.0) -> base.CommandResult:
        """Run the static probe ``host_path`` in the sandbox by descriptor (the driver's ``exec_binary``).

        No shell runs: the probe prints the proof line itself (``--proof NONCE``, first line, the format
        of ``WRAPPER``'s), checked exactly as ``run`` checks the shell's, after the same host cross-check.
        The result's stdout is what follows the proof line."""
        def launch(identity, nonce: str):
            # The probe checks this itself before it writes a sentinel or reads a file: misrouted (to the host,
            # or to another sandbox) it stops after the proof line, and the host refuses that line below.
            expect = " ".join([*(identity.namespaces[n] for n in PROOF_NAMESPACES), f"uid={identity.uid}"])
            result = self.target.exec_binary(self.ref, str(host_path), ["--proof", nonce, "--expect", expect, *args],
                                             env=env, timeout=timeout)
            return result, f"{host_path} (by descriptor) --proof {nonce} --expect '{expect}' {' '.join(args)}"

        return self._proven(launch)

    def _proven(self, launch) -> base.CommandResult:
        """Cross-check the driver's word on the host, run ``launch(identity, nonce)`` (its output's first line
        is the proof line), record it, and accept it only if the proof line matches the instance."""
        identity = self.target.identity(self.ref)
        # The driver's word is checked on the host before the probe runs: a probe may end its own sandbox
        # (a fork bomb without a pids limit takes the agent with it), and the proof line is then compared
        # with the namespaces confirmed here.
        try:
            on_host = cross_check_on_host(dict(identity.namespaces), identity.uid, identity.host_pid)
        except ProofError as exc:
            raise self.log.fail(f"before probing {self.ref.key}: {exc}") from None
        try:  # the agent's rights now, on the host: the probe must hold at least them
            agent = rights_on_host(identity.host_pid)
        except ProofError as exc:
            raise self.log.fail(f"before probing {self.ref.key}: {exc}") from None
        nonce = secrets.token_hex(8)  # fresh per command: a replayed or cached output cannot carry it
        result, command = launch(identity, nonce)
        first, _, rest = result.stdout.partition(b"\n")
        record = ProbeRecord(self.ref.key, self.ref.principal.name, command, result.rc, "",
                             rest[:2000].decode(errors="replace"), result.stderr[:1000].decode(errors="replace"))
        self.log.records.append(record)
        try:
            # The record carries a proof only when both checks passed (a probe whose host cross-check
            # failed is no proof, even if its line matched the driver's word).
            line = verify_proof(first.decode(errors="replace"), nonce, dict(identity.namespaces), identity.uid)
            judge_rights_settled(proof_rights(line), identity.host_pid, agent)
            record.proof = line + " host:" + on_host
        except ProofError as exc:
            raise self.log.fail(f"{exc} (rc {result.rc}, stderr {result.stderr[-300:]!r})") from None
        finally:
            _attach(record)
        return ObservedResult(record, backend=self, exit_status=result.rc, command=self.encode(command), _stdout=rest,
                              _stderr=result.stderr)


class ObservedResult(base.CommandResult):
    """A probe's result that marks its record ``read`` once its exit status or output is read (``rc``,
    ``succeeded``, ``stdout``... all read one of the three): the test's proof is then bound to what it read."""

    def __init__(self, record: ProbeRecord, **fields: Any) -> None:
        self._record = record
        super().__init__(**fields)

    def _seen(self, name: str) -> Any:
        self._record.read = True
        return self.__dict__[name]

    exit_status = property(lambda self: self._seen("_exit"), lambda self, v: self.__dict__.__setitem__("_exit", v))
    _stdout = property(lambda self: self._seen("_out"), lambda self, v: self.__dict__.__setitem__("_out", v))
    _stderr = property(lambda self: self._seen("_err"), lambda self, v: self.__dict__.__setitem__("_err", v))


def engine_for(target: object) -> tuple[Path | None, str]:
    """The scanner a sandbox scan runs and the note that says which and why: the static probe by descriptor
    when it exists and the driver can run a host file (``exec_binary``), else detect.py under the sandbox's
    own python3."""
    binary = probe_binary()
    if binary is None:
        return None, (f"detect.py under the sandbox's python3 -I: no static probe ({PROBE_ENV} unset, "
                      f"nothing at {PROBE_BUILT})")
    if not hasattr(target, "exec_binary"):
        return None, f"detect.py under the sandbox's python3 -I: the driver has no exec_binary to run {binary}"
    return binary, f"static probe {binary} by descriptor"


def _attach(record: ProbeRecord) -> None:
    """Attach one probe's transcript to the running test's Allure result."""
    text = (f"[{record.principal}@{record.instance}] $ {record.command}\n# proof: {record.proof or 'NONE'}\n"
            f"# rc={record.rc}\n{record.stdout_head}" + (f"\n# stderr: {record.stderr_head}" if record.stderr_head else ""))
    attach(f"probe in {record.principal} ({record.instance})", text)


def host(target: Target, ref: InstanceRef, log: ProbeLog) -> testinfra.host.Host:
    """A testinfra Host whose every command runs inside ``ref``'s sandbox."""
    backend = SandboxBackend(target, ref, log)
    h = testinfra.host.Host(backend)
    backend.set_host(h)
    return h


@dataclass(frozen=True)
class ScanResult:
    """One whole-filesystem scan: the canary-shaped tokens it found and what it read to find them."""

    hits: list[dict[str, Any]]
    scanned_files: int
    bytes: int
    truncated: int
    problems: list[str]
    errors: int

    @property
    def tokens(self) -> set[str]:
        return {h["token"] for h in self.hits}


# Paths a scan could not read that still leave it complete: the sandbox was denied them (which is the
# boundary holding, and is listed as evidence) or they vanished between listing and reading. A problem
# reads "PATH: reason"; these are matched as the end of it, never anywhere in it: the path is the
# sandbox's to name, and a file called "x [EACCES]" must not pass off another failure as a denial.
# A root the caller named that the scanner never reads (under /sys, or in /proc anything but a process's
# environ and cmdline) is not among them: the caller asked for it, and a scan that declines it did not look.
_ACCEPTED_PROBLEMS = (" [EACCES]", " [EPERM]", " [ENOENT]", " [ESRCH]", ": not scanned: it is in the skip list")
SENTINEL_PLACES = ("/tmp", "/data")


SENTINEL_ENV = "PAIRPROOF_SENTINEL"  # the environment sentinel; the file sentinels' tokens: SENTINEL_ENV + "_FILE<n>"


def _plan_sentinels() -> tuple[str, dict[str, str]]:
    """Fresh canaries: the one for the probe's own environment and ``{path: token}`` of one new file in each
    of the sandbox's own writable places."""
    mint = Mint(detect_module.run_in_use())  # the scan's run, a mint of its own: sentinels are nobody's canaries
    env_token = mint.mint("probe", "env").token
    planned = {f"{place}/.pairproof-sentinel-{secrets.token_hex(4)}": mint.mint("probe", f"file{n}").token
               for n, place in enumerate(SENTINEL_PLACES)}
    return env_token, planned


def _write_by_shell(h: testinfra.host.Host, planned: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """Write the file sentinels with the sandbox's shell; ``({path: token} written, {path: why not})``."""
    written, unwritten = {}, {}
    for path, token in planned.items():
        out = h.backend.run("printf %%s %s > %s", token, path)
        if out.rc == 0:
            written[path] = token
        else:
            unwritten[path] = f"the shell could not write it (rc {out.rc}): {out.stderr.strip()[-200:]}"
    return written, unwritten


def _remove(h: testinfra.host.Host, paths: list[str]) -> None:
    if paths:
        h.backend.run("rm -f " + " ".join(h.backend.quote("%s", p) for p in paths))


def _sentinel_record(backend: SandboxBackend, summary: dict[str, Any], planned: dict[str, str],
                     what: str) -> tuple[dict[str, str], dict[str, str]]:
    """What the static probe says it did with the sentinels it was given (its completeness record's
    ``sentinels``): ``({path: token} written, {path: why not})``. A record that does not account for every
    one of them, or a sentinel written and then left in the sandbox, raises ProofError."""
    record = {entry.get("path"): entry for entry in summary.get("sentinels", []) if isinstance(entry, dict)}
    if set(record) != set(planned):
        raise backend.log.fail(f"{what} in {backend.ref.key} did not account for the sentinels it was given "
                               f"(given {sorted(planned)}, its record names {sorted(map(str, record))})")
    left = [f"{path}: {entry.get('error', '?')}" for path, entry in record.items()
            if entry.get("written") is True and entry.get("removed") is not True]
    if left:
        raise backend.log.fail(f"{what} could not remove its sentinels from {backend.ref.key}: {left}")
    written = {path: planned[path] for path, entry in record.items() if entry.get("written") is True}
    unwritten = {path: f"the probe could not write it: {entry.get('error', '(no reason given)')}"
                 for path, entry in record.items() if entry.get("written") is not True}
    return written, unwritten


def _missing_sentinels(written: dict[str, str], unwritten: dict[str, str], found: Callable[[str, str], bool],
                       planned: dict[str, str]) -> set[str]:
    """The file sentinels a scan or dump did not show: not found where they were written, or not written."""
    missing = {f"{token} (file {path})" for path, token in written.items() if not found(token, path)}
    return missing | {f"{planned[path]} (file {path}, which {why})" for path, why in unwritten.items()}


def judge_completeness(what: str, *, files: int, bytes_read: int, truncated: int, problems: list[str],
                       missing_own: set[str], errors: int | None = None) -> None:
    """Raise ProofError unless a scan or dump read something, cut nothing short, could not read only what
    it was denied or what vanished, and found every one of the prober's own canaries. ``errors`` is how
    many paths failed in all, when the report counts them apart from ``problems`` (a scan's summary lists
    only the first 200): a failure that is not listed cannot be judged a denial."""
    reasons = []
    if files == 0 or bytes_read == 0:
        reasons.append(f"it read nothing ({files} files, {bytes_read} bytes)")
    if truncated:
        reasons.append(f"it cut {truncated} files short")
    odd = [p for p in problems if not p.endswith(_ACCEPTED_PROBLEMS)]
    if odd:
        reasons.append(f"{len(odd)} paths failed for a reason other than a denial: {odd[:5]}")
    if errors is not None and errors != len(problems):
        reasons.append(f"{errors} paths failed but its report lists {len(problems)}: the others cannot be "
                       "judged denials")
    if missing_own:
        reasons.append(f"it did not find {len(missing_own)} of the prober's own canaries "
                       f"({sorted(missing_own)[:4]}): it did not look where they are")
    if reasons:
        raise ProofError(f"{what} did not prove it looked: " + "; ".join(reasons))


@dataclass(frozen=True)
class _Run:
    """One scan's or dump's report and its sentinels: ``lines`` (the completeness record last), the
    environment sentinel, and the file sentinels planned, written (``{path: token}``) and not (``{path: why}``)."""

    lines: list[dict[str, Any]]
    env_token: str
    planned: dict[str, str]
    written: dict[str, str]
    unwritten: dict[str, str]


def _run_with_sentinels(h: testinfra.host.Host, script: Path, roots: list[str], skip: list[str], end_mark: str,
                        what: str, binary: Path | None = None, mode: list[str] | None = None) -> _Run:
    """Run ``script`` (the detector or the dump) in the sandbox over ``roots``, or the static ``binary`` (with
    ``mode``, e.g. ``["--dump"]``) by descriptor, with fresh sentinels: the environment sentinel in its
    environment, file sentinels in the sandbox's /tmp and /data, removed after. The static probe writes and
    removes the file sentinels itself, as the sandbox's uid (their tokens in its environment, never in its
    arguments) and says so in its completeness record; for the script the sandbox's shell does. A probe that
    failed, whose report has no completeness record, or that left a sentinel behind raises ProofError."""
    backend: SandboxBackend = h.backend  # type: ignore[assignment]
    env_token, planned = _plan_sentinels()
    if binary is not None:
        env = {SENTINEL_ENV: env_token}
        args = [*(mode or []), *([] if mode else ["--run", detect_module.run_in_use()])]
        for n, (path, token) in enumerate(planned.items()):
            env[f"{SENTINEL_ENV}_FILE{n}"] = token
            args += ["--sentinel", f"{SENTINEL_ENV}_FILE{n}={path}"]
        args += [*(a for s in skip for a in ("--skip", s)), *roots]
        out = backend.run_binary(binary, args, env=env)
    else:
        written, unwritten = _write_by_shell(h, planned)
        try:
            quoted = " ".join([*([] if script != DETECT else [backend.quote("--run %s", detect_module.run_in_use())]),
                               *(backend.quote("--skip %s", s) for s in skip), *(backend.quote("%s", r) for r in roots)])
            out = backend.run_with_stdin(f"{SENTINEL_ENV}={env_token} /usr/bin/python3 -I -S - {quoted}",
                                         stdin=script.read_bytes())
        finally:
            _remove(h, list(written))
    if out.rc != 0:
        raise backend.log.fail(f"{what} failed in {backend.ref.key} (rc {out.rc}): {out.stderr[-500:]}")
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    if not lines or lines[-1].get("end") != end_mark:
        raise backend.log.fail(f"{what} in {backend.ref.key} did not finish its report (no completeness record): "
                               "it was cut off")
    if binary is not None:
        written, unwritten = _sentinel_record(backend, lines[-1], planned, what)
    return _Run(lines, env_token, planned, written, unwritten)


def _judge_and_keep(h: testinfra.host.Host, kind: str, *, roots: list[str], skip: list[str], own: set[str],
                    sentinels: dict[str, str], files: int, bytes_read: int, truncated: int, problems: list[str],
                    missing: set[str], engine: str = "", unwritten: dict[str, str] | None = None,
                    errors: int | None = None, record_failure: bool = True) -> None:
    """Keep what the scan or dump read as the test's evidence (and in Allure), then judge its completeness
    (``record_failure``: an incomplete one is also the test's proof failure, which makes it broken whatever it
    asserts; off for a scan whose hits already hold a finding)."""
    backend: SandboxBackend = h.backend  # type: ignore[assignment]
    backend.log.note(kind, instance=backend.ref.key, principal=backend.ref.principal.name, roots=list(roots),
                     skip=list(skip), files=files, bytes=bytes_read, truncated=truncated,
                     could_not_read=len(problems) if errors is None else errors, problems=problems[:20], own_canaries=len(own),
                     sentinels=[*sentinels, "(its own environment)"], sentinels_not_written=dict(unwritten or {}),
                     missing_own=sorted(missing), **({"engine": engine} if engine else {}))
    attach(f"{kind} in {backend.ref.principal.name} ({backend.ref.key})", backend.log.evidence[-1])
    try:
        judge_completeness(f"the {kind} in {backend.ref.key}", files=files, bytes_read=bytes_read,
                           truncated=truncated, problems=problems, missing_own=missing, errors=errors)
    except ProofError as exc:
        if not record_failure:
            raise
        raise backend.log.fail(str(exc)) from None


# The environment sentinel must be found in an environ, not just anywhere in /proc: the token is also on
# the command line of the shell that starts the probe, and a probe blind to environments would find it there.
_ENV_SENTINEL = "{} (its own environment, in /proc/<pid>/environ)"


def scan(h: testinfra.host.Host, roots: list[str], *, own: set[str], skip: list[str] = (),
         theirs: set[str] = frozenset()) -> ScanResult:
    """Run the canary detector inside the sandbox over ``roots``, and judge its completeness.

    ``own`` are canaries the prober's instance holds (planted for it): the same scan must find them.
    The detector (the static probe by descriptor, else detect.py fed on stdin) is told nothing about the
    canaries it hunts (carrying them in would plant them in the probe's own /proc/self/cmdline); the
    sentinels it must find are in its environment and in files, never in its arguments. The host
    attributes each hit to its origin. ``theirs``: the run's canaries planted elsewhere; one of them found is an
    observation that stands (the result is returned) even when the scan did not prove it looked everywhere.
    """
    backend: SandboxBackend = h.backend  # type: ignore[assignment]
    binary, engine = engine_for(backend.target)
    run = _run_with_sentinels(h, DETECT, roots, list(skip), detect_module.END_MARK,
                              "the static probe" if binary else "the detector", binary)
    summary = run.lines[-1]
    found = ScanResult(hits=run.lines[:-1], scanned_files=summary["scanned_files"], bytes=summary["bytes"],
                       truncated=summary["truncated"], problems=summary["problems"], errors=summary["errors"])
    where = {(hit["token"], hit["where"]) for hit in found.hits}
    missing = _missing_sentinels(run.written, run.unwritten, lambda token, path: (token, path) in where, run.planned)
    if not any(t == run.env_token and w.startswith("/proc/") and w.endswith("/environ") for t, w in where):
        missing.add(_ENV_SENTINEL.format(run.env_token))
    missing |= own - found.tokens
    # A canary this run planted somewhere else, found here, is an observation: a finding whatever else the scan
    # missed (an incomplete scan that saw a leak is not an unjudged case). Only a scan that found none of them
    # must prove it looked everywhere. (The run's own canaries only: a canary-shaped token of another run, left
    # in a shared folder, is no finding of this one.)
    foreign = found.tokens & set(theirs)
    try:
        _judge_and_keep(h, "scan", roots=roots, skip=list(skip), own=own, sentinels=run.written,
                        files=found.scanned_files, bytes_read=found.bytes, truncated=found.truncated,
                        problems=found.problems, missing=missing, engine=engine, unwritten=run.unwritten,
                        errors=found.errors, record_failure=not foreign)
    except ProofError as exc:
        if not foreign:
            raise
        attach(f"scan in {backend.ref.principal.name}: incomplete, but it found {len(foreign)} canaries not its own",
               {"incomplete": str(exc), "found, not its own": sorted(foreign)})
    return found


DUMP = Path(__file__).resolve().parents[1] / "cases" / "inside" / "dump.py"
DUMP_END = "pairproof-dump-end"


def dump(h: testinfra.host.Host, roots: list[str], *, own: set[str], skip: list[str] = (),
         theirs: Iterable[str] = ()) -> bytes:
    """Carry every file the sandbox can see under ``roots`` (and /proc environ and cmdline) out to the host,
    for a search for known secrets there; judged complete like ``scan`` (same sentinels, same rules). The
    static probe's ``--dump`` carries it where it runs (``engine_for``), else dump.py under the sandbox's python.

    ``theirs``: the secrets the caller will search the bytes for. One of them found, in any encoding
    ``find_known`` reads, is an observation that stands (the bytes are returned) even when the dump did not
    prove it looked everywhere, as a scan's foreign canary is: an incomplete dump that carried out a leak is a
    finding, not an unjudged case."""
    backend: SandboxBackend = h.backend  # type: ignore[assignment]
    binary, engine = engine_for(backend.target)
    run = _run_with_sentinels(h, DUMP, roots, list(skip), DUMP_END, what_dump(binary), binary, ["--dump"])
    summary = run.lines[-1]
    data = dump_files(run.lines[:-1])
    # Every byte it says it read must have come out (a link's target text is not counted): a line lost on
    # the way (a driver's stream that drops or reorders output) would leave a file carried in part.
    carried = sum(len(blob) for path, blob in data.items() if not path.endswith(" (link target)"))
    if carried != summary["bytes"]:
        raise backend.log.fail(f"{what_dump(binary)} in {backend.ref.key} says it read {summary['bytes']} bytes of "
                               f"files but its lines carry {carried}: lines were lost on the way")
    missing = _missing_sentinels(run.written, run.unwritten,
                                 lambda token, path: token.encode() in data.get(path, b""), run.planned)
    if not any(path.startswith("/proc/") and path.endswith("/environ") and run.env_token.encode() in blob
               for path, blob in data.items()):
        missing.add(_ENV_SENTINEL.format(run.env_token))
    joined = b"\n".join(data.values())
    missing |= own - {hit.token for hit in detect_module.find(joined)}
    found = sorted({secret for secret, _ in find_known(joined, theirs)}) if theirs else []
    try:
        _judge_and_keep(h, "dump", roots=roots, skip=list(skip), own=own, sentinels=run.written, files=summary["files"],
                        bytes_read=summary["bytes"], truncated=summary["truncated"], problems=summary["problems"],
                        missing=missing, engine=(f"static probe {binary} --dump by descriptor" if binary
                                                        else engine.replace("detect.py", "dump.py", 1)),
                        unwritten=run.unwritten, record_failure=not found)
    except ProofError as exc:
        if not found:
            raise
        attach(f"dump in {backend.ref.principal.name}: incomplete, but it carried out {len(found)} of the secrets "
               "searched for", {"incomplete": str(exc), "found": len(found)})
    return joined


def what_dump(binary: Path | None) -> str:
    return "the static probe's dump" if binary else "the dump"


def dump_files(lines: list[dict[str, Any]]) -> dict[str, bytes]:
    """``{path: bytes}`` of a dump's chunk lines (dump.py's or the static probe's), chunks joined in order."""
    by_path: dict[str, list[bytes]] = {}
    for line in lines:
        by_path.setdefault(line["path"], []).append(base64.b64decode(line["b64"]))
    return {path: b"".join(chunks) for path, chunks in by_path.items()}


def _line_naming(record: str, nonce: str) -> str | None:
    """The first line of a platform's record that names ``nonce`` beside something else (a line that is the id
    alone records nothing of the request), stripped; None if there is none."""
    return next((line.strip() for line in record.splitlines() if nonce in line and line.strip() != nonce), None)


# The contract's operations that carry a request id to the platform's record (``request_id=``), and the two that
# hand out a product client (whose requests carry it as ``X-Request-Id``).
REQUEST_ID_CALLS = frozenset({"provision", "turn", "wake", "recover", "snapshot", "restore", "runctl", "model_call",
                              "model_stream", "capacity_need", "capacity_admit", "start_with_managed_config"})
CLIENT_CALLS = frozenset({"person", "operator"})


def proving_calls(log: ProbeLog) -> Callable[[str, Any], Any]:
    """The ``wrap`` of a case's ``TargetView``: each platform call the test makes without a request id of its
    own gets a fresh one (``ProbeLog.call_probe``), and the platform's record of it becomes the test's proof
    (``ProbeLog.settle_calls``, once the test is over). A control that observes through the platform (a turn
    answered, a record listed) thus proves what it read came from the platform, as a probe in a sandbox does;
    one that observed nothing the platform recorded has no proof, and the plugin judges it broken."""
    def wrap(name: str, value: Any) -> Any:
        if not callable(value):
            return value
        if name in CLIENT_CALLS:
            return lambda *args, **kwargs: _ProvedClient(value(*args, **kwargs), log, f"{name}{args!r}")

        return _ProvedCall(value, log, name) if name in REQUEST_ID_CALLS and _takes_request_id(value) else value
    return wrap


def _takes_request_id(method: Callable[..., Any]) -> bool:
    """Whether the driver's method takes ``request_id=`` (the contract's do; one that does not is called as it is,
    and its calls lend no proof)."""
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "request_id" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


class _ProvedCall:
    """A contract operation whose call carries a request id of the harness's (unless the test gave one). It
    compares equal to the method it wraps, as two reads of one bound method do (``call == target.turn``)."""

    def __init__(self, method: Callable[..., Any], log: ProbeLog, name: str) -> None:
        self.wrapped, self._log, self.__name__, self.__doc__ = method, log, name, method.__doc__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("request_id"):
            kwargs["request_id"] = self._log.call_probe(self.__name__)
        return self.wrapped(*args, **kwargs)

    def __eq__(self, other: object) -> bool:
        return self.wrapped == (other.wrapped if isinstance(other, _ProvedCall) else other)

    def __hash__(self) -> int:
        return hash(self.wrapped)


class _ProvedClient:
    """A product client whose requests carry a request id of the harness's (unless the test set one)."""

    def __init__(self, client: Any, log: ProbeLog, who: str) -> None:
        self._client, self._log, self._who = client, log, who

    def request(self, method: str, path: str, body: Mapping[str, object] | None = None,
                headers: Mapping[str, str] | None = None) -> tuple[int, object]:
        headers = dict(headers or {})
        if not any(k.lower() == "x-request-id" for k in headers):
            headers["X-Request-Id"] = self._log.call_probe(f"{self._who} {method} {path}")
        return self._client.request(method, path, body, headers)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._client, attr)
