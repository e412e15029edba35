"""Errors raised by the reference runtime.

Every failure the runtime reports is one of these; ``OSError`` and ``subprocess`` failures are mapped to
them at the edge, keeping the detail (the command, its stderr, the path) in the message. Three refusals
live beside the code that makes them (named by module below), each with a machine-readable ``reason``::

    RuntimeFault
    ├── PreflightError      the machine lacks something the runtime needs (tool, kernel feature, root)
    ├── ConfigError         a value given to the runtime is invalid; nothing was changed
    │   └── ManagedConfigError  (agents/managed.py) the managed config is not one the platform can enforce
    ├── InstanceError       an instance operation cannot be done in the instance's current state
    │   ├── InstanceNotFound    no instance for that id or (org, user) pair
    │   └── CapacityRefused     the capacity model does not admit the wake or provision; nothing changed
    ├── SandboxError        a sandbox failed to start, become ready or run a command
    ├── CgroupError         a cgroup could not be created, joined, limited or removed
    ├── DeadlineExceeded    a wait for a condition ran past its deadline (``runtime/wait.py``)
    ├── UnsafeTarget        (httpjson.py) a composed URL whose host a joined path could have changed; also an OSError
    ├── AuthorityError      (authority/capabilities.py) a grant or capability was refused
    ├── ProductError        (product/store.py) the product refused a request (with its HTTP ``status``)
    └── SnapshotError       (snapshots.py) a snapshot was refused: not the owner's, corrupt, truncated

Not here, on purpose: the reference agent (agents/reference.py) is a stdlib-only script inside the sandbox
and cannot import this module; its errors never leave its process. ``mcp_filter``'s private
``_DuplicateKey`` is a ``ValueError`` its JSON parser raises and catches itself.
"""

from __future__ import annotations


class RuntimeFault(Exception):
    """Base of every error the reference runtime raises."""


class PreflightError(RuntimeFault):
    """The machine lacks a tool, a kernel feature or a privilege; the message says how to get it."""


class ConfigError(RuntimeFault):
    """A value handed to the runtime is invalid; raised before anything is changed."""


class InstanceError(RuntimeFault):
    """An operation does not fit the instance's state (waking a destroyed instance, say)."""


class InstanceNotFound(InstanceError):
    """No instance is registered under that id or (org, user) pair."""


class CapacityRefused(InstanceError):
    """The capacity model does not admit a wake or a provision on this host; ``reason`` names each resource
    that does not fit, with the MB needed and available. Unlike other InstanceErrors the instance's state
    allows the operation: the host has no room for it. Nothing was started or written."""

    def __init__(self, reason: str, operation: str = "the operation") -> None:
        super().__init__(f"{operation} refused by the capacity model: {reason}")
        self.reason = reason


class SandboxError(RuntimeFault):
    """A sandbox did not start, did not become ready in time, or could not run a command."""


class CgroupError(RuntimeFault):
    """A cgroup operation failed; unlike SandboxError this is about the limits, not the process."""


class DeadlineExceeded(RuntimeFault):
    """A condition the runtime waited for (an agent ready, a container gone, a cgroup frozen or empty) did
    not hold within its deadline; raised by ``runtime.wait.until`` only. Unlike SandboxError or CgroupError
    nothing is known to have failed: it was still not done when the runtime stopped waiting."""


class UnsafeTarget(RuntimeFault, ConnectionRefusedError):
    """A URL the platform composed (a base it holds + a path it was given) whose host is not the base's: the
    path carried a userinfo (``http://127.0.0.1:8642@elsewhere/...``) or did not start with ``/``. Refused
    before any connection, as an OSError, so every caller's "unreachable" handling fails it closed."""
