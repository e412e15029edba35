"""Running the network probes (``egress_probe.py``, ``socket_probe.py``, both using ``listeners.py``) inside
a sandbox, and attaching what a network case looked at to its report.

Test modules define their fixtures over these (``acceptance/harness/fixtures.py`` keeps the shared ones).
"""

from __future__ import annotations

import json
from pathlib import Path

from acceptance.contract import InstanceRef
from acceptance.errors import ProofError

CASES = Path(__file__).resolve().parents[1] / "inside"
# What the kernel of a loopback-only sandbox answers (Linux errnos): no route to the address, nothing
# listening on the loopback address glibc's resolver asks, and getaddrinfo's "no resolver answered"
# (EAI_AGAIN) as opposed to a resolver's "no such name" (EAI_NONAME, what the lab's NXDOMAIN gives).
NO_ROUTE = "OSError: errno 101"
REFUSED = "ConnectionRefusedError: errno 111"
NO_RESOLVER_ANSWERED = "gaierror: errno -3"
A_RESOLVER_ANSWERED = "gaierror: errno -2"


def _script(name: str) -> bytes:
    """The probe ``name`` as one script for the sandbox's python (it reads its program from stdin, so it
    cannot import from a folder): ``listeners.py`` is installed as the module ``listeners`` first."""
    library = (CASES / "listeners.py").read_text()
    bootstrap = ("import sys, types\n_library = types.ModuleType('listeners')\n"
                 f"exec(compile({library!r}, 'listeners.py', 'exec'), _library.__dict__)\n"
                 "sys.modules['listeners'] = _library\n")
    return (bootstrap + (CASES / name).read_text()).encode()


def run_probe(host, script: str, args: list[str]) -> dict:
    quoted = " ".join(host.backend.quote("%s", a) for a in args)
    out = host.backend.run_with_stdin(f"/usr/bin/python3 -I -S - {quoted}", stdin=_script(script))
    return json.loads(out.stdout.strip().splitlines()[-1])


def runctl_knocks(host, keys: dict[str, str]) -> dict:
    """``GET /v1/runs/run_doesnotexist`` on every stream socket the sandbox sees, with no key and with each of
    ``keys`` (label -> key, handed over with the script on stdin, not in argv): {where: {label: {status, body}}}."""
    script = f"KEYS = {json.dumps(keys)}\n".encode() + _script("runctl_probe.py")
    out = host.backend.run_with_stdin("/usr/bin/python3 -I -S -", stdin=script)
    return json.loads(out.stdout.strip().splitlines()[-1])["knocks"]


def lab_targets() -> list[str]:
    """The egress probe's targets: the lab's resolver and its TCP stand-ins, over IPv4 and IPv6."""
    from acceptance.harness.lab import ADDRESSES, ADDRESSES6

    ports = {"internet": 443, "metadata": 80, "product": 8080, "proxy": 8080, "provider": 8080}
    targets = [f"dns={ADDRESSES['resolver']}:53", f"dns6=[{ADDRESSES6['resolver']}]:53"]
    for name, port in ports.items():
        targets += [f"{name}={ADDRESSES[name]}:{port}", f"{name}6=[{ADDRESSES6[name]}]:{port}"]
    return targets


def egress(host, target, ref: InstanceRef, label: str) -> dict:
    broker = target.broker_endpoint(ref).split("//", 1)[1]
    return run_probe(host, "egress_probe.py", [label, broker, *lab_targets()])


def sweep(host, urls: list[str]) -> dict[str, object]:
    """``GET /whoami`` on every socket the sandbox sees and on ``urls``: {where: answer or error}."""
    return sweep_report(host, urls)["knocks"]


# Why a folder may go unlisted without the sweep being incomplete: a denial of a folder this uid cannot search
# either (nothing under it is reachable by any name), or the folder gone meanwhile.
ACCEPTED_UNLISTED = ("errno 1", "errno 2", "errno 13", "errno 20")


def sweep_problems(report: dict) -> list[str]:
    """Why a sweep did not see every socket file it can reach (``listeners.py``'s completeness record): no
    record, a walk cut at its limit, a folder unlisted for a reason other than a denial or the folder going, or
    unlisted yet searchable (a socket under it is reachable by a name the walk cannot see)."""
    walk = report.get("walk")
    if not isinstance(walk, dict):
        return ["the sweep gave no completeness record of its filesystem walk"]
    problems = []
    if walk.get("cut"):
        problems.append(f"the sweep's filesystem walk {walk['cut']}: the sockets after it are unseen")
    unlisted = walk.get("unlisted") or {}
    odd = {p: u for p, u in unlisted.items() if not isinstance(u, dict) or u.get("error") not in ACCEPTED_UNLISTED}
    if odd:
        problems.append(f"the sweep could not list {len(odd)} folders for a reason other than a denial: "
                        f"{dict(sorted(odd.items())[:5])}")
    searchable = sorted(p for p, u in unlisted.items() if isinstance(u, dict) and u.get("searchable") and p not in odd)
    if searchable:
        problems.append(f"the sweep could not list {len(searchable)} folders it may search (a socket in one is "
                        f"reachable by a name the walk cannot see): {searchable[:5]}")
    return problems


def sweep_report(host, urls: list[str]) -> dict:
    """The socket probe's whole report: ``knocks``, ``connected`` (the sockets a connect reached), ``entries``
    (what each is) and ``walk`` (the completeness record), judged complete first (``sweep_problems``): a sweep
    that did not look everywhere raises ProofError, whatever it knocked on."""
    report = run_probe(host, "socket_probe.py", urls)
    problems = sweep_problems(report)
    if problems:
        raise ProofError("the socket sweep did not look everywhere: " + "; ".join(problems))
    return report
