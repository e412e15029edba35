"""Checks of what a ``pairproof`` command was given, made before anything is written or started.

Each check raises ``SetupError`` with one line naming the input and the fix (the CLI prints it and exits 2)
and leaves the folders it looks at as it found them: a folder that does not exist yet is not created, and
a folder's fitness is tried in a scratch folder removed again at once.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from acceptance.errors import SetupError

# Filesystems that only look like folders: the kernel's views and control files, never a place for state.
PSEUDO = frozenset({"proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs",
                    "pstore", "bpf", "configfs", "fusectl", "mqueue", "hugetlbfs", "autofs", "binfmt_misc",
                    "efivarfs", "nsfs", "rpc_pipefs", "nfsd"})


def case_ids(ids: Sequence[str]) -> list[str]:
    from acceptance import catalogue

    known = catalogue.load()
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise SetupError(f"--case {', '.join(repr(i) for i in unknown)}: not in acceptance/catalogue.toml; "
                         f"give a catalogue id ({', '.join(list(known)[:6])}, ...: see the README's case table)")
    return list(ids)


def positive(value: int, option: str, *, zero: bool = False) -> int:
    if value < 0 or (value == 0 and not zero):
        raise SetupError(f"{option} {value}: must be a whole number {'of 0 or more' if zero else 'above 0'}")
    return value


def nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path("/")


def _fs_type(path: Path) -> str:
    """The type of the filesystem holding ``path`` (the longest mount point above it in mountinfo)."""
    best, kind = "", ""
    real = os.path.realpath(path)
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return ""
    for line in lines:
        fields = line.split(" ")
        mount = fields[4].encode().decode("unicode_escape")
        inside = real == mount or real.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best) and " - " in line:
            best, kind = mount, line.split(" - ", 1)[1].split(" ")[0]
    return kind


def _given(value: str | Path, option: str, what: str) -> Path:
    # Path("") is ".": an empty option must be caught before it becomes the current folder.
    if str(value).strip() == "":
        raise SetupError(f"{option} is empty: give the path of {what}")
    return Path(value)


def _folder(path: Path, option: str, what: str) -> Path:
    """The folder ``path`` is, or the existing folder it would be created in; SetupError if neither."""
    existing = nearest_existing(path)
    if existing.is_symlink() and not existing.exists():
        raise SetupError(f"{option} {path}: {existing} is a link to {os.readlink(existing)}, which does not exist; "
                         f"create that folder or give another ({what})")
    if not existing.is_dir():
        where = "is" if existing == path else f"would be inside {existing}, which is"
        raise SetupError(f"{option} {path}: {where} a file, not a folder; give a folder ({what})")
    kind = _fs_type(existing)
    if kind in PSEUDO:
        raise SetupError(f"{option} {path}: {existing} is on {kind}, the kernel's view, not a real filesystem; "
                         f"choose a folder on a disk or tmpfs ({what})")
    return existing


def _try_scratch(existing: Path, path: Path, option: str, what: str) -> Path:
    try:
        return Path(tempfile.mkdtemp(prefix=".pairproof-check-", dir=existing))
    except OSError as exc:
        verb = "write in" if existing == path else f"create it in {existing}:"
        raise SetupError(f"{option} {path}: cannot {verb} {exc.strerror}; choose another with {option} ({what})") from None


def state_dir(value: str | Path, option: str = "--state-dir") -> Path:
    """A folder (or one creatable) on a real filesystem where the runtime can create folders, give them to
    an instance's own uid and keep its sqlite databases."""
    what = "the runtime's state folder"
    path = _given(value, option, "a folder (" + what + ")")
    existing = _folder(path, option, what)
    if os.geteuid() == 0:
        # Instance uids reach their volumes through every folder above the state folder (runtime.controller
        # checks it too, but only once a run has started and made its folder there).
        above = Path(os.path.realpath(existing))
        for folder in ((above, *above.parents) if existing != path else above.parents):
            if not os.stat(folder).st_mode & 0o001:
                raise SetupError(f"{option} {path}: {folder} lets no other user enter it (no o+x), so no instance "
                                 f"could reach its volume; choose a folder elsewhere, e.g. /var/lib/pairproof ({what})")
    scratch = _try_scratch(existing, path, option, what)
    try:
        if os.geteuid() == 0:
            try:
                os.chown(scratch, 65534, 65534)  # an instance's volume belongs to its own host uid
            except OSError as exc:
                raise SetupError(f"{option} {path}: its filesystem cannot give a folder to another uid "
                                 f"({exc.strerror}); choose a folder on ext4, xfs, btrfs or tmpfs ({what})") from None
        db = None
        try:
            db = sqlite3.connect(scratch / "check.db")
            db.execute("create table t (x)")
            db.execute("insert into t values (1)")
            db.commit()
        except sqlite3.Error as exc:
            raise SetupError(f"{option} {path}: sqlite cannot keep a database there ({exc}); choose a folder on "
                             f"a local filesystem ({what})") from None
        finally:
            if db is not None:
                db.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return path


def unmake(path: Path, existing: Path) -> None:
    """Remove the empty folders from ``path`` up to (not including) ``existing``: what a run that ends with
    nothing to publish created to hold its reports."""
    for folder in (path, *path.parents):
        if folder == existing or not folder.is_relative_to(existing):
            return
        try:
            folder.rmdir()
        except OSError:
            return


def reports_dir(value: str | Path, option: str = "--reports-dir") -> Path:
    """A folder (or one creatable) where files can be written; created only when the run starts."""
    what = "where the reports go"
    path = _given(value, option, "a folder (" + what + ")")
    existing = _folder(path, option, what)
    shutil.rmtree(_try_scratch(existing, path, option, what), ignore_errors=True)
    return path


def existing_folder(value: str | Path, option: str, what: str) -> Path:
    path = _given(value, option, f"the folder {what}")
    if not path.exists():
        raise SetupError(f"{option} {path}: no such folder; give the folder {what}")
    if not path.is_dir():
        raise SetupError(f"{option} {path}: is a file, not a folder; give the folder {what}")
    if not os.access(path, os.R_OK | os.X_OK):
        raise SetupError(f"{option} {path}: cannot read it (permission denied); give a folder you can read")
    return path


def json_file(value: str | Path, option: str, what: str) -> object:
    """The JSON document in ``value``; SetupError naming the file and what is wrong with it."""
    import json

    path = _given(value, option, what)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise SetupError(f"{option} {path}: no such file; give the path of {what}, or drop {option}") from None
    except IsADirectoryError:
        raise SetupError(f"{option} {path}: is a folder, not a file; give the path of {what}") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise SetupError(f"{option} {path}: cannot read it ({reason}); give the path of {what}") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise SetupError(f"{option} {path}: not JSON ({exc}); give {what}, as written by pairproof") from None


# pytest options ``qualify`` gives from what it checked, and how a user gives them to it instead. Given
# again after ``--`` they would win over the checked value (argparse keeps the last one) or write outside
# the run's own report set: ``--pairproof-verdict reports/verdict.json`` writes through the published set's
# link, leaving a verdict of one run beside the pages of another.
OWNED = {"--target": "--target", "--profile": "--profile", "--pairproof-state-dir": "--state-dir",
         "--pairproof-verdict": "--reports-dir", "--alluredir": "--reports-dir", "--clean-alluredir": "--reports-dir",
         "-n": "-n", "--numprocesses": "-n", "--dist": "-n", "--maxprocesses": "-n",
         "--confcutdir": "nothing (conftest files come from the suite's own package only)"}
# Options that write to a path of their own: refused when it is inside the reports or state folder (or, for
# --basetemp, which pytest empties first, holds one).
WRITES = ("--junitxml", "--junit-xml", "--basetemp")
# Plugins the run itself needs: `-p no:NAME` of one would end the run without a verdict or Allure results.
NEEDED = frozenset({"pairproof", "acceptance.harness.plugin", "allure_pytest", "xdist", "xdist.plugin"})


def _option(word: str, name: str) -> bool:
    if name.startswith("--"):
        return word == name or word.startswith(name + "=")
    return word == name or (word.startswith(name) and not word.startswith("--"))  # -n4, -nauto


def owned_pytest_args(extra: Sequence[str], folders: Sequence[Path]) -> None:
    """SetupError for a pytest argument after ``--`` that would bypass a check or write into ``folders``
    (the reports and state folders)."""
    words = list(extra)
    for at, word in enumerate(words):
        for name, instead in OWNED.items():
            if _option(word, name):
                raise SetupError(f"pytest argument {word!r}: pairproof qualify sets it itself from what it checked; "
                                 f"give {instead} before `--` instead")
        if word.startswith("-p"):
            plugin = (word[2:] or (words[at + 1] if at + 1 < len(words) else "")).lstrip("=")
            if plugin.startswith("no:") and plugin[3:] in NEEDED:
                raise SetupError(f"pytest arguments '-p {plugin}': the run needs that plugin for its verdict and "
                                 "reports; drop it")
            if not plugin.startswith("no:"):
                # Code loaded into the run that no hash of the verdict names (reports/identity.py) could turn a
                # refusal's outcome: a qualification runs the suite it names, and only that.
                raise SetupError(f"pytest arguments '-p {plugin}': a plugin added to a qualification is code its "
                                 "verdict does not name; drop it (a plugin may only be disabled, -p no:NAME)")
        for name in WRITES:
            if _option(word, name):
                value = word.partition("=")[2] if "=" in word else (words[at + 1] if at + 1 < len(words) else "")
                target = Path(os.path.abspath(value or "."))
                for folder in folders:
                    folder = Path(os.path.abspath(folder))
                    inside = target.is_relative_to(folder) or target.resolve().is_relative_to(folder.resolve())
                    holds = name == "--basetemp" and folder.resolve().is_relative_to(target.resolve())
                    if inside or holds:
                        raise SetupError(f"pytest argument {name} {value}: {'holds' if holds else 'is inside'} "
                                         f"{folder}, which the run must not write to (pytest empties --basetemp); "
                                         "give a path elsewhere or drop it")


def pytest_args(base: Sequence[str], extra: Sequence[str]) -> None:
    """Collect the suite with ``base + extra`` in a separate process (``--collect-only``: nothing runs,
    nothing is written: no Allure or verdict option is given), so that pytest's own usage check, an unknown
    ``-k``/``-m`` expression, a collection error or a selection of nothing is known before the reports
    folder is touched."""
    # The collection must import the very packages this process runs (the suite's path is theirs): ``-P`` keeps
    # the current folder off sys.path (under tox it is a checkout beside the installed package, and pytest then
    # refuses every test file as an "import file mismatch"), and this process's own root goes first.
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])}
    command = [sys.executable, "-P", "-m", "pytest", *base, "--collect-only", "-q", "-p", "no:cacheprovider", *extra]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, env=env)
    except subprocess.TimeoutExpired:
        raise SetupError("collecting the suite took over 300 s: check the machine and the pytest arguments") from None
    if done.returncode == 0:
        return
    given = f"pytest arguments {' '.join(extra)!r}" if extra else "the suite"
    lines = [line.strip() for line in (done.stderr + "\n" + done.stdout).splitlines() if line.strip()]
    said = next((line for line in lines if "error:" in line.lower() and "usage:" not in line), None)
    if done.returncode == 5:
        raise SetupError(f"{given} select no test of the suite: widen -k/-m/--case (`pairproof qualify -- "
                         "--collect-only -q` lists the tests)")
    if done.returncode == 2:
        said = next((line for line in lines if line.startswith("E ")), said)
        raise SetupError(f"{given}: collecting the suite failed ({said or 'see pytest --collect-only'}); fix the "
                         "argument or the suite, then run again")
    raise SetupError(f"{given} refused by pytest ({(said or (lines or ['exit ' + str(done.returncode)])[-1])[:300]});"
                     " fix or drop them (`pytest --help` lists the options)")


def environment() -> None:
    """The environment variables that name a tool the run uses (``PAIRPROOF_PROBE``, ``PAIRPROOF_SHELL``,
    ``PAIRPROOF_ALLURE``): one naming something that is not an executable file (or a suite shell others may
    read) is bad input before anything starts, not a run whose every scan is broken (or, for Allure, a quiet
    fallback to another one). The probe and shell found in the checkout's build/ are named in the environment
    from here on, so every process the command starts (a mutant's copy of the suite, which has no build/)
    runs the same files."""
    from acceptance.errors import ProofError
    from acceptance.harness.probes import PROBE_ENV, SHELL_ENV, probe_binary, shell_binary

    try:
        for name, found in ((PROBE_ENV, probe_binary()), (SHELL_ENV, shell_binary())):
            if found is not None:
                os.environ.setdefault(name, str(found))
    except ProofError as exc:
        raise SetupError(str(exc)) from None
    for name in ("PYTEST_PLUGINS", "PYTEST_ADDOPTS"):
        if os.environ.get(name):
            raise SetupError(f"{name}={os.environ[name]}: it adds code or options to the run that its verdict does "
                             f"not name; unset {name} (give pytest's own options after `--`)")
    named = os.environ.get("PAIRPROOF_ALLURE")
    if named and not (Path(named).is_file() and os.access(named, os.X_OK)):
        raise SetupError(f"PAIRPROOF_ALLURE={named} is not an executable file: name the `allure` executable "
                         "(tools/setup-machine installs one under .tools/) or unset PAIRPROOF_ALLURE")


def outside_state(reports: Path, state: str | Path, option: str = "--reports-dir") -> None:
    """SetupError when the reports folder is the state folder or inside it: the runtime owns that folder
    (``pairproof clean`` removes every folder under its ``runs/`` whose owner process is gone, a report set
    included)."""
    inner, outer = Path(os.path.realpath(reports)), Path(os.path.realpath(state))
    if inner.is_relative_to(outer):
        raise SetupError(f"{option} {reports}: is inside the state folder {state}, which the runtime owns (pairproof "
                         f"clean removes what it finds there); give a reports folder outside it")
