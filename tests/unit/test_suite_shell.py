"""Which shell a shell probe runs (issue 28 items 4 and 5): the suite's own busybox, by descriptor, where the file
is there, unreadable to others, and the driver's ``exec_binary`` can leave the instance running and name the
program; otherwise the sandbox's /bin/sh, said so, or bad input named with its fix."""

from __future__ import annotations

import pytest

from acceptance.errors import ProofError
from acceptance.harness import probes


@pytest.fixture
def suite_shell(tmp_path, monkeypatch):
    path = tmp_path / "sh"
    path.write_bytes(b"\x7fELF")
    path.chmod(0o711)
    monkeypatch.setenv(probes.SHELL_ENV, str(path))
    return path


class Keywords:
    def exec_binary(self, ref, host_path, args, *, env=None, stdin=None, timeout=60.0, hold=True, by_name=False): ...


class Delegating:
    def exec_binary(self, *args, **kwargs): ...


class NoKeywords:
    def exec_binary(self, ref, host_path, args, *, env=None, stdin=None, timeout=60.0): ...


@pytest.mark.parametrize("driver", [Keywords(), Delegating()])
def test_the_suites_shell_where_the_driver_can_run_it_beside_the_agent(suite_shell, driver):
    shell, how = probes.shell_for(driver)
    assert shell == suite_shell.resolve() and "by descriptor" in how


@pytest.mark.parametrize("driver, why", [(NoKeywords(), "takes no hold= and by_name="), (object(), "no exec_binary")])
def test_otherwise_the_sandbox_sh_and_the_note_says_why(suite_shell, driver, why):
    shell, how = probes.shell_for(driver)
    assert shell is None and how.startswith("the sandbox's /bin/sh") and why in how


def test_a_shell_others_may_read_is_refused_with_its_fix(suite_shell):
    suite_shell.chmod(0o755)
    with pytest.raises(ProofError, match=r"readable by others \(mode 755\).*chmod 0711"):
        probes.shell_binary()


def test_a_named_shell_that_is_not_an_executable_file_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv(probes.SHELL_ENV, str(tmp_path / "nothing"))
    with pytest.raises(ProofError, match="PAIRPROOF_SHELL=.* is not an executable file"):
        probes.shell_binary()
