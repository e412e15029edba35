"""The mutant runner's verdict depends on the suite: a suite that asserts nothing kills no mutant, a
stale catalogue entry is an error, and a real mutant is killed by its expected case.

The full qualification (the whole catalogue against the real suite) runs as ``tox -e mutants``.
"""

from __future__ import annotations

import json

import pytest

from mutants import runner
from mutants.catalogue import CATALOGUES, Edit, Mutant, apply, copy_suite, load

pytestmark = pytest.mark.slow
CATALOGUE = load()

def useless_suite(cases: list[str]) -> str:
    """A suite with a refusal and every control of each case: each probes and reads the probe's result (so the
    pairing and proof rules are met: a test's proof is that of the probes whose results it read) and asserts
    nothing about it."""
    from acceptance.catalogue import load as load_cases

    catalogue = load_cases()
    lines = ["import pytest", ""]
    for case in cases:
        for role in ["refusal", *catalogue[case].controls]:
            name = f"test_{case.replace('-', '_')}_{role}"
            lines += [f"@pytest.mark.case({case!r}, {role!r})", f"def {name}(sandbox_host, instances):",
                      '    sandbox_host(instances["A"]).run("true").rc', ""]
    return "\n".join(lines)


def test_a_suite_that_asserts_nothing_kills_no_mutant(tmp_path):
    """Every mutant survives a useless suite, so a 'killed' verdict really comes from the suite."""
    suite = tmp_path / "useless"
    suite.mkdir()
    cases = sorted({c for m in CATALOGUE for c in m.kills})
    (suite / "test_useless.py").write_text(useless_suite(cases))
    chosen = [m for m in CATALOGUE if m.name in ("shared-volume", "spend-cap-ignored", "audience-check-skipped")]
    code = runner.run(reports=tmp_path / "reports", jobs=2, suite=suite, catalogue=chosen, progress=lambda _: None)
    report = json.loads((tmp_path / "reports" / "mutants.json").read_text())
    assert report["control"]["exit"] == 0, report["control"]["tail"]
    assert code == 1
    assert {m["name"]: m["status"] for m in report["mutants"]} == {m.name: "survived" for m in chosen}
    assert (report["partial"], report["suite"]) == (True, str(suite))


def test_a_control_that_does_not_pass_is_shown_whole(tmp_path):
    """The unmodified control failing: no mutant runs, and its output (tracebacks included) is printed and kept
    beside the report, so a broken control can be read (its tail alone once hid the cause of one)."""
    suite = tmp_path / "failing"
    suite.mkdir()
    text = useless_suite(["FS-1"]).replace('.run("true").rc',
                                           '.run("true").rc\n    raise AssertionError("control-marker-7f3a")', 1)
    (suite / "test_failing.py").write_text(text)
    said = []
    code = runner.run(reports=tmp_path / "reports", jobs=1, suite=suite, catalogue=CATALOGUE[:1], progress=said.append)
    report = json.loads((tmp_path / "reports" / "mutants.json").read_text())
    assert code == 1 and report["control"]["exit"] != 0 and report["mutants"] == []
    log = (tmp_path / "reports" / "mutants-control.log").read_text()
    assert 'raise AssertionError("control-marker-7f3a")' in log  # the traceback, not only the summary line
    assert any("control-marker-7f3a" in line and "mutants-control.log" in line for line in said)


def test_a_real_mutant_is_killed_by_its_expected_case(tmp_path):
    """``pairproof mutants --only NAME``: the mutant is killed, and the report says which source it judged
    and that it was partial, so the gate refuses it (it once accepted it)."""
    from reports import gate

    code = runner.run(reports=tmp_path, jobs=1, only=["memory-limit-not-enforced"], progress=lambda _: None)
    report = json.loads((tmp_path / "mutants.json").read_text())
    assert code == 0, (tmp_path / "mutants.txt").read_text()
    assert report["mutants"][0]["status"] == "killed" and "RS-1" in report["mutants"][0]["killed_by"]
    assert "RS-1" in (tmp_path / "mutants.txt").read_text()
    assert report["source"] == runner.source_digest() and report["partial"] is True
    assert report["catalogued"] == [m.name for m in CATALOGUE]
    judged = gate.judge_mutants(tmp_path / "mutants.json")
    assert not judged.passed
    assert any("is a partial report" in r for r in judged.reasons), judged.reasons
    assert any(r.startswith(f"{len(CATALOGUE) - 1} catalogued mutants not in the report") for r in judged.reasons), \
        judged.reasons
    assert not any("judged another" in r or "control did not pass" in r for r in judged.reasons), judged.reasons


def test_the_source_digest_is_the_source_as_shipped(tmp_path):
    """A copy of the suite hashes like the source it was copied from (compiled files aside); one byte
    changed in the copy's runtime changes the runtime's digest and nothing else."""
    tree = copy_suite(tmp_path / "tree")
    assert runner.source_digest(tree) == runner.source_digest()
    (tree / "runtime" / "__pycache__").mkdir(exist_ok=True)
    (tree / "runtime" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"compiled")
    assert runner.source_digest(tree) == runner.source_digest()
    sandbox = tree / "runtime" / "isolation" / "sandbox.py"
    sandbox.write_bytes(sandbox.read_bytes() + b" ")
    changed = runner.source_digest(tree)
    assert changed["runtime"] != runner.source_digest()["runtime"]
    assert {k: v for k, v in changed.items() if k != "runtime"} == \
        {k: v for k, v in runner.source_digest().items() if k != "runtime"}
    (tree / "runtime" / "new_module.py").write_text("")
    assert runner.source_digest(tree)["runtime"] != changed["runtime"]


def test_a_mutant_that_no_longer_applies_is_an_error(tmp_path):
    from mutants.errors import PatchDoesNotApply

    tree = copy_suite(tmp_path / "tree")
    stale = Mutant("stale", "", ("FS-1",), (Edit("isolation/sandbox.py", "text that is not in the runtime", ""),))
    with pytest.raises(PatchDoesNotApply, match="no longer applies"):
        apply(stale, tree)
    outcome = runner.run_mutant(stale, tmp_path / "work", None, "/var/lib/pairproof")
    assert (outcome.status, "no longer applies" in outcome.detail) == ("error", True)


@pytest.mark.parametrize("target", sorted(CATALOGUES))
def test_every_catalogue_entry_applies_to_the_current_runtime(tmp_path, target):
    """A catalogue (each target's) that drifted from the runtime fails here, fast, before any suite runs."""
    tree = copy_suite(tmp_path / "tree")
    pristine = tmp_path / "pristine"
    import shutil

    shutil.copytree(tree, pristine)
    for mutant in load(CATALOGUES[target]):
        apply(mutant, tree)
        shutil.rmtree(tree)
        shutil.copytree(pristine, tree)


# Run in the mutated copy: the configuration ``container_config`` gives an instance, as JSON. The engine is
# never asked (a mutant that would make a network on it gets a stand-in client that records the call).
_CONFIG_OF = """
import json, sys
from pathlib import Path
from runtime.isolation import containers
from runtime.isolation.cgroups import Limits
from runtime.isolation.sandbox import SandboxSpec

made = []
class Networks:
    def list(self, **kwargs):
        return []
    def create(self, name, **kwargs):
        made.append([name, kwargs])
class Client:
    networks = Networks()
    def close(self):
        pass
containers.client = lambda *a, **k: Client()
state = Path(sys.argv[1])
home = state / "instances" / "i-1"
(home / "volume").mkdir(parents=True)
spec = SandboxSpec(instance_id="i-1", uid=61001, gid=61001, volume=home / "volume", control_dir=home / "control",
                   etc_dir=home / "etc", image_dir=home / "image", hostname="i-1")
config = containers.container_config(spec, Limits(memory_bytes=256 << 20, pids_max=64), ["true"], image="x",
                                     run="r1", name="n")
print(json.dumps({"config": config, "networks": made}, sort_keys=True, default=str))
"""


def _config_in(tree, tmp_path) -> dict:
    import subprocess
    import sys

    state = tmp_path / f"state-{len(list(tmp_path.glob('state-*')))}"
    done = subprocess.run([sys.executable, "-c", _CONFIG_OF, str(state)], cwd=tree, env={"PYTHONPATH": str(tree)},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_every_docker_mutant_changes_what_a_container_is_made_with(tmp_path):
    """Each Docker mutant applies, its runtime still imports, and the configuration ``container_config``
    gives an instance differs from the shipped one: an edit that changes nothing would be a mutant no case
    could kill. (Only the configuration: the suite on the docker target is ``pairproof mutants --target
    docker``.)"""
    import shutil

    tree = copy_suite(tmp_path / "tree")
    pristine = tmp_path / "pristine"
    shutil.copytree(tree, pristine)
    shipped = _config_in(tree, tmp_path)
    assert shipped["networks"] == [] and shipped["config"]["network_mode"] == "none"
    docker_mutants = load(CATALOGUES["docker"])
    # Each changes how a container is made (its configuration, its seccomp profile), the agent the image runs (whose
    # effect is in the container, not its configuration), or how the platform runs its probes in a container (the
    # controller's hold, the engine's ``run_binary_inside``: PB-1's, PS-1's): all but the first are judged by the
    # docker target's suite alone.
    assert {e.file for m in docker_mutants for e in m.edits} <= {"isolation/containers.py", "agents/reference.py",
                                                                 "controller.py", "isolation/seccomp.py"}
    engine = (tree / "runtime" / "isolation" / "containers.py").read_text()
    probing = engine[engine.index("    def run_binary_inside("):engine.index("\ndef agent_groups(")]
    docker_mutants = [m for m in docker_mutants if {e.file for e in m.edits} == {"isolation/containers.py"}
                      and not all(e.old in probing for e in m.edits)]
    for mutant in docker_mutants:
        apply(mutant, tree)
        mutated = _config_in(tree, tmp_path)
        assert mutated != shipped, f"{mutant.name} changes nothing in the container's configuration"
        shutil.rmtree(tree)
        shutil.copytree(pristine, tree)


@pytest.mark.parametrize("signum", ["SIGINT", "SIGTERM"])
def test_an_interrupted_runner_stops_every_run_it_started(tmp_path, signum):
    """SIGINT or SIGTERM to ``pairproof mutants`` while its control runs: the run's pytest gets SIGINT (and
    tears its target down), the runner exits 130, and no process of the run is left."""
    import os
    import signal
    import subprocess
    import sys
    import time

    suite = tmp_path / "slow"
    suite.mkdir()
    started = tmp_path / "started"
    (suite / "test_slow.py").write_text(
        "import pathlib, time\n\nimport pytest\n\n"
        "@pytest.mark.case('FS-1', 'P')\n"
        "def test_waits():\n"
        f"    pathlib.Path({str(started)!r}).write_text('x')\n"
        "    time.sleep(600)\n")
    runner_proc = subprocess.Popen([sys.executable, "-m", "acceptance.cli", "mutants", "--suite", str(suite), "-j", "1",
                                    "--only", "shared-volume", "--reports-dir", str(tmp_path / "reports")],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not started.exists():
            assert runner_proc.poll() is None, runner_proc.communicate()[0]
            assert time.monotonic() < deadline, "the slow suite never started"
            time.sleep(0.05)
        runner_proc.send_signal(getattr(signal, signum))
        output, _ = runner_proc.communicate(timeout=90)
    finally:
        if runner_proc.poll() is None:
            runner_proc.kill()
    assert runner_proc.returncode == 130, output
    left = [pid for pid in os.listdir("/proc") if pid.isdigit() and str(suite).encode() in _cmdline(pid)]
    assert left == [], f"processes of the interrupted run remain: {left}"
    assert not (tmp_path / "reports" / "mutants.json").exists()


def _cmdline(pid: str) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def test_a_mutant_that_runs_alone_runs_after_the_others_with_none_beside_it(tmp_path, monkeypatch):
    """``alone = true`` (the shared bridge: a network in the engine's namespace, which any docker target made
    meanwhile refuses): the pooled mutants run in parallel, and the alone one starts after the last of them
    ended. The suite runs are replaced by a record of when each mutant started and ended."""
    import threading

    events, lock = [], threading.Lock()
    both_started = threading.Barrier(2, timeout=30)

    def fake_run_mutant(mutant, workdir, suite, state_dir, target):
        with lock:
            events.append(("start", mutant.name))
        if not mutant.alone:
            both_started.wait()  # the two pooled mutants run at the same time, or this times out
        with lock:
            events.append(("end", mutant.name))
        return runner.Outcome(mutant.name, list(mutant.kills), status="killed", killed_by=list(mutant.kills))

    monkeypatch.setattr(runner, "run_mutant", fake_run_mutant)
    monkeypatch.setattr(runner, "run_suite", lambda *a, **k: runner.SuiteRun(0, 0.0, [], {}, ""))
    alone = Mutant("bridge", "", ("NT-3",), (), alone=True)
    pooled = [Mutant("one", "", ("PR-1",), ()), Mutant("two", "", ("PR-2",), ())]
    code = runner.run(reports=tmp_path, jobs=2, catalogue=[alone, *pooled], target="docker", progress=lambda _: None)
    assert code == 0
    starts = {name: i for i, (kind, name) in enumerate(events) if kind == "start"}
    ends = {name: i for i, (kind, name) in enumerate(events) if kind == "end"}
    assert starts["bridge"] > max(ends["one"], ends["two"]), events
    report = json.loads((tmp_path / "mutants.json").read_text())
    assert (report["target"], report["catalogue"], report["partial"]) == ("docker", "mutants/docker.toml", True)


def test_what_a_run_leaves_in_the_shared_temporary_folders_goes_with_it(tmp_path):
    """A mutant once left its broker's dump in the host's /var/tmp. Each run of the suite (the control's and each
    mutant's) has private /var/tmp and /dev/shm: a suite writing there (and reading it back, so the write is
    shown to have happened) leaves nothing on the host."""
    import secrets
    from pathlib import Path

    name = f"pairproof-leftover-{secrets.token_hex(6)}"
    suite = tmp_path / "writes"
    suite.mkdir()
    writes = "".join(f'    Path("{root}/{name}").write_text("x")\n    assert Path("{root}/{name}").read_text() == "x"\n'
                     for root in runner.PRIVATE_ROOTS)
    text = useless_suite(["FS-1"]).replace('.run("true").rc', '.run("true").rc\n' + writes, 1)
    (suite / "test_writes.py").write_text("from pathlib import Path\n" + text)
    chosen = [m for m in CATALOGUE if m.name == "shared-volume"]
    runner.run(reports=tmp_path / "reports", jobs=1, suite=suite, catalogue=chosen, progress=lambda _: None)
    report = json.loads((tmp_path / "reports" / "mutants.json").read_text())
    assert report["control"]["exit"] == 0, report["control"]["tail"]  # the writes were made, in the run
    assert [str(Path(root) / name) for root in runner.PRIVATE_ROOTS if (Path(root) / name).exists()] == []
