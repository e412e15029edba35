"""Every public method of the reference driver reports a runtime failure as the contract's error
(TargetError, CapacityRefusedError), never as the runtime's own exception or a bare OSError: the plugin
counts a TargetError as *broken*, and a driver a security team copies must show them how."""

from __future__ import annotations

import inspect
import sqlite3
import typing
from contextlib import AbstractContextManager

import pytest

from acceptance.contract import InstanceRef, Lab, Principal
from acceptance.errors import CapacityRefusedError, HarnessError, TargetError
from acceptance.targets import TargetOptions
from acceptance.targets.reference import driver
from runtime.errors import CapacityRefused, RuntimeFault, SandboxError
from runtime.product.store import ProductError
from runtime.snapshots import SnapshotError

A = Principal("A", "org1", "alice")
REF = InstanceRef(A, "i-1", 1)


class FailingRuntime:
    """Stands for the provider, the platform and the controller: starts and stops, and every other use
    fails with ``error`` (as a runtime whose sandbox died, whose disk is full, ... would)."""

    url = "http://127.0.0.1:1"  # the provider's address, handed to the platform's configuration

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def start(self) -> FailingRuntime:
        return self

    def stop(self) -> None:
        pass

    def __getattr__(self, name: str):
        raise self.error


def _target(monkeypatch, tmp_path, error: BaseException) -> driver.ReferenceTarget:
    failing = FailingRuntime(error)
    monkeypatch.setattr(driver, "ProviderMock", lambda key: failing)
    monkeypatch.setattr(driver, "Platform", lambda state, config: failing)
    monkeypatch.setattr(driver, "Controller", lambda *a, **k: failing)
    return driver.ReferenceTarget(TargetOptions(run="unit", state_dir=tmp_path, secrets={"PAIRPROOF_PROVIDER_KEY": "k"}))


def _argument(parameter: inspect.Parameter, hints: dict):
    if parameter.name == "location":
        return "memory"
    if parameter.name == "name":
        return "notes_list"  # pin_tool: a tool the product has
    hint = str(hints.get(parameter.name, ""))
    if "InstanceRef" in hint:
        return REF
    if "Principal" in hint:
        return A
    if "bytes" in hint:
        return b"{}"
    if "float" in hint or "int" in hint:
        return 1
    if "Mapping" in hint or "dict" in hint:
        return {}
    if "Sequence" in hint or "list" in hint:
        return ["true"]
    return "x"


def _call(target, name: str):
    """Call the public method ``name`` with plausible arguments; enter what it returns if it is a context."""
    method = getattr(target, name)
    hints = typing.get_type_hints(method, globalns=vars(driver), localns={"Principal": Principal,
                                                                       "InstanceRef": InstanceRef, "Lab": Lab})
    args = [_argument(p, hints) for p in inspect.signature(method).parameters.values()
            if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    result = method(*args)
    if isinstance(result, AbstractContextManager):
        with result:
            pass
    return result


PUBLIC = sorted(n for n, v in inspect.getmembers(driver.ReferenceTarget, inspect.isfunction) if not n.startswith("_"))
FAILURES = [RuntimeFault("the runtime failed"), SandboxError("the sandbox died"), OSError(28, "No space left on device"),
            SnapshotError("corrupt", "the snapshot is damaged"), ProductError(500, "internal", "the product failed"),
            sqlite3.OperationalError("database is locked")]


@pytest.mark.parametrize("error", FAILURES, ids=lambda e: type(e).__name__)
def test_every_public_method_reports_a_runtime_failure_as_a_target_error(monkeypatch, tmp_path, error):
    target = _target(monkeypatch, tmp_path, error)
    leaked, mapped = {}, []
    for name in PUBLIC:
        if name == "close":
            continue
        try:
            _call(target, name)
        except HarnessError as exc:
            mapped.append(name)
            assert isinstance(exc, TargetError), f"{name}: {exc!r}"
            # The runtime's error (or, where the driver talks HTTP to the failed runtime, the socket's) is kept.
            assert exc.__cause__ is error or isinstance(exc.__cause__, OSError), f"{name}: {exc.__cause__!r}"
        except Exception as exc:
            leaked[name] = repr(exc)
    assert leaked == {}
    # The sweep reached the runtime through most of the contract (the rest answer from the driver alone:
    # its declared tools, its secrets, the shipped managed config, the broker's fixed address).
    assert {"provision", "wake", "sleep", "destroy", "exec", "turn", "snapshot", "restore", "capabilities",
            "platform_log", "person", "broken_shared_volume", "broken_debug_logging", "host_limits"} - set(mapped) == set()
    assert len(mapped) >= len(PUBLIC) - 10, sorted(set(PUBLIC) - set(mapped))


def test_a_capacity_refusal_keeps_its_reason(monkeypatch, tmp_path):
    target = _target(monkeypatch, tmp_path, CapacityRefused("memory: need 900 MB, have 512 MB", "wake of i-1"))
    with pytest.raises(CapacityRefusedError) as caught:
        target.wake(REF)
    assert caught.value.reason == "memory: need 900 MB, have 512 MB"


def test_what_a_broken_arrangements_block_raises_is_its_own(monkeypatch, tmp_path):
    """Only the arrangement's set-up and tear-down are the driver's: an assertion or an OSError raised by the
    test inside the ``with`` passes through unchanged."""
    target = _target(monkeypatch, tmp_path, RuntimeFault("unused"))
    target.platform = type("Platform", (), {"set_log_level": lambda self, level: 20})()
    for raised in (AssertionError("a finding"), OSError("the test's own")):
        with pytest.raises(type(raised)) as caught:
            with target.broken_debug_logging():
                raise raised
        assert caught.value is raised


def test_a_failing_tear_down_is_a_target_error(monkeypatch, tmp_path):
    target = _target(monkeypatch, tmp_path, RuntimeFault("unused"))
    levels = []

    class Platform:
        def set_log_level(self, level):
            if levels:
                raise OSError("the log could not be reconfigured")
            levels.append(level)
            return 20

    target.platform = Platform()
    with pytest.raises(TargetError, match="could not be reconfigured"):
        with target.broken_debug_logging():
            pass
