"""Probes: testinfra modules running inside a sandbox, each with proof that it ran there.

``SandboxBackend`` is a testinfra backend whose commands go through ``Target.exec``: ``host.file(...)``,
``host.process``, ``host.mount_point(...)``, ``host.user()`` all run inside the instance, as the agent
would. A container target later uses testinfra's own docker backend the same way.

Proof of execution: every command is wrapped so that its first line of output is the run's nonce, the
namespace identities the shell sees (``/proc/self/ns/*``) and its uid. The backend checks that line
against what the host sees of the instance (``Target.identity``) and strips it. A mismatch or a missing
line raises ``ProofError``: an empty result from a probe that did not run where we think is not a pass.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import testinfra.host
from testinfra.backend import base

from canaries import detect as detect_module

from .contract import InstanceRef, Principal, Target
from .errors import ProofError

PROOF_NAMESPACES = ("mnt", "pid", "net", "user", "uts", "ipc")
PROOF_TAG = "PAIRPROOF-PROOF"
WRAPPER = (
    'printf "%s %s" "' + PROOF_TAG + '" "$1"; '
    'for ns in ' + " ".join(PROOF_NAMESPACES) + '; do printf " %s" "$(readlink /proc/self/ns/$ns)"; done; '
    'printf " uid=%s\\n" "$(id -u)"; '
    'exec /bin/sh -c "$2"'
)
DETECT = Path(detect_module.__file__)


@dataclass
class ProbeRecord:
    """One command run in a sandbox: what ran, where it proved it ran, what came back."""

    instance: str
    principal: str
    command: str
    rc: int
    proof: str
    stdout_head: str
    stderr_head: str


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
    pending: dict[str, tuple[str, str, str]] = field(default_factory=dict)

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
            raise ProofError(f"{nonce!r} is not an unconfirmed platform probe of this test: take a fresh one from "
                             "probe_log.platform_probe() for each probe and confirm it once")
        key, name, what = self.pending[nonce]
        line = next((line.strip() for line in record.splitlines() if nonce in line), None)
        if line is None or line == nonce:
            raise ProofError(f"the platform has no record of the probe {what!r} of {name}@{key} (request id {nonce}): "
                             f"it was not sent with the request, or the request never reached the platform "
                             f"({len(record)} characters of the platform's record searched)")
        del self.pending[nonce]
        proved = ProbeRecord(key, name, what, 0, f"platform {key}: {line[:400]}", "", "")
        self.records.append(proved)
        _attach(proved)
        return line

    def transcript(self) -> str:
        return "\n\n".join(
            f"[{r.principal}@{r.instance}] $ {r.command}\n# proof: {r.proof}\n# rc={r.rc}\n{r.stdout_head}"
            + (f"\n# stderr: {r.stderr_head}" if r.stderr_head else "")
            for r in self.records)

    def as_property(self) -> list[dict[str, Any]]:
        return [asdict(r) for r in self.records]


def verify_proof(line: str, nonce: str, namespaces: dict[str, str], uid: int) -> str:
    """Check a proof line; return it, or raise ProofError saying what did not match."""
    parts = line.split()
    expected = [PROOF_TAG, nonce, *(namespaces[n] for n in PROOF_NAMESPACES), f"uid={uid}"]
    if len(parts) != len(expected) or parts[:2] != expected[:2]:
        raise ProofError(f"probe output did not start with the run's proof line (nonce {nonce}): got {line[:200]!r}")
    for name, seen, want in zip(("tag", "nonce", *PROOF_NAMESPACES, "uid"), parts, expected):
        if seen != want:
            raise ProofError(f"probe ran outside the intended sandbox: {name} is {seen}, the instance's is {want}")
    return line


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
        identity = self.target.identity(self.ref)
        result = self.target.exec(self.ref, ["/bin/sh", "-c", WRAPPER, "pairproof-probe", self.log.nonce, cmd],
                                   stdin=stdin, timeout=timeout)
        first, _, rest = result.stdout.partition(b"\n")
        record = ProbeRecord(self.ref.key, self.ref.principal.name, cmd, result.rc, "",
                             rest[:2000].decode(errors="replace"), result.stderr[:1000].decode(errors="replace"))
        self.log.records.append(record)
        try:
            record.proof = verify_proof(first.decode(errors="replace"), self.log.nonce, dict(identity.namespaces),
                                        identity.uid)
        except ProofError as exc:
            raise ProofError(f"{exc} (rc {result.rc}, stderr {result.stderr[-300:]!r})") from None
        finally:
            _attach(record)
        return self.result(result.rc, self.encode(cmd), rest, result.stderr)


def _attach(record: ProbeRecord) -> None:
    """Attach one probe's transcript to the running test's Allure result (a no-op without Allure)."""
    try:
        import allure
    except ImportError:
        return
    text = (f"[{record.principal}@{record.instance}] $ {record.command}\n# proof: {record.proof or 'NONE'}\n"
            f"# rc={record.rc}\n{record.stdout_head}" + (f"\n# stderr: {record.stderr_head}" if record.stderr_head else ""))
    allure.attach(text, name=f"probe in {record.principal} ({record.instance})", attachment_type=allure.attachment_type.TEXT)


def host(target: Target, ref: InstanceRef, log: ProbeLog) -> testinfra.host.Host:
    """A testinfra Host whose every command runs inside ``ref``'s sandbox."""
    backend = SandboxBackend(target, ref, log)
    h = testinfra.host.Host(backend)
    backend.set_host(h)
    return h


@dataclass(frozen=True)
class ScanResult:
    hits: list[dict[str, Any]]
    scanned_files: int
    errors: int


def scan(h: testinfra.host.Host, roots: list[str], *, skip: list[str] = ()) -> ScanResult:
    """Run the canary detector inside the sandbox over ``roots``.

    The detector is fed on stdin, and it is told nothing about the canaries it hunts: carrying them in
    would plant them in the probe's own /proc/self/cmdline. It reports everything canary-shaped; the
    host attributes each hit to its origin.
    """
    backend: SandboxBackend = h.backend  # type: ignore[assignment]
    quoted = " ".join([*(backend.quote("--skip %s", s) for s in skip), *(backend.quote("%s", r) for r in roots)])
    result = backend.run_with_stdin(f"/usr/bin/python3 -I -S - {quoted}", stdin=DETECT.read_bytes())
    if result.rc != 0:
        raise ProofError(f"the detector failed in {backend.ref.key} (rc {result.rc}): {result.stderr[-500:]}")
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    if not lines or "scanned_files" not in lines[-1]:
        raise ProofError(f"the detector in {backend.ref.key} did not finish its report")
    summary = lines[-1]
    return ScanResult(hits=lines[:-1], scanned_files=summary["scanned_files"], errors=summary["errors"])
