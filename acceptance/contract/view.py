"""The target as one case's tests see it (``TargetView``): the core and the facets the case declared, checked
rather than trusted; and the error raised, and remembered, when a test reaches past its declaration."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from acceptance.contract.registry import CORE, FACET_OF, OPTIONAL_CORE


class UndeclaredFacetError(Exception):
    """A case's test reached a method of a facet its catalogue entry does not declare, or one outside the
    contract. Not an assertion and not a ``TargetError`` (which tests may expect): the plugin counts the test
    broken, whether or not the test caught it."""


class TargetView:
    """The target as one case's tests see it: the core and the facets the case declared, nothing else.

    The catalogue's ``facets`` of a case is what decides whether a target that lacks one may run it; the
    view makes that declaration checked, not trusted: reaching another facet's method raises
    ``UndeclaredFacetError`` naming it (and is remembered, for ``view_violations``, in case the test caught
    it). Every attribute goes through the check, the view's own state included (it has no ``__dict__``, and
    ``_target`` is refused like any other name): the driver behind it is not one attribute away."""

    __slots__ = ("_target", "_case", "_facets", "_violations", "_wrap")

    def __init__(self, target: object, case: str, facets: Iterable[str],
                 wrap: Callable[[str, Any], Any] | None = None) -> None:
        """``wrap(name, value)``, when given, is applied to every attribute the view hands out (the harness
        uses it to give each platform call a request id of its own and take the call's proof from the
        platform's record: ``acceptance.harness.probes.proving_calls``)."""
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_case", case)
        object.__setattr__(self, "_facets", frozenset(facets))
        object.__setattr__(self, "_violations", [])
        object.__setattr__(self, "_wrap", wrap)

    def __getattribute__(self, attr: str) -> Any:
        if attr in ("__class__", "__repr__", "__str__", "__eq__", "__hash__", "__ne__", "__setattr__",
                    "__delattr__", "__init_subclass__", "__subclasshook__"):
            return object.__getattribute__(self, attr)
        state = object.__getattribute__
        case, target, facets = state(self, "_case"), state(self, "_target"), state(self, "_facets")
        facet = FACET_OF.get(attr)
        if attr in CORE or attr in OPTIONAL_CORE or (facet is not None and facet in facets):
            wrap = state(self, "_wrap")
            return getattr(target, attr) if wrap is None else wrap(attr, getattr(target, attr))
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)  # Python's own protocol probes (copy, pickle, ...): the view has none
        if facet is None:
            why = (f"{case} reached target.{attr}, which is not part of the target contract "
                   "(acceptance/contract/): a case may use only the core and its declared facets")
        else:
            why = (f"{case} reached target.{attr} of facet {facet!r}, which its catalogue entry does not "
                   f"declare: add {facet!r} to facets of [{case}] in acceptance/catalogue.toml")
        state(self, "_violations").append(why)
        raise UndeclaredFacetError(why)

    def __setattr__(self, attr: str, value: object) -> None:
        raise AttributeError(f"the target of a case is read-only (set {attr!r} on the driver instead)")

    def __delattr__(self, attr: str) -> None:
        raise AttributeError(f"the target of a case is read-only (delete {attr!r} on the driver instead)")

    def __repr__(self) -> str:
        state = object.__getattribute__
        return f"<{state(self, '_case')}'s view of {getattr(state(self, '_target'), 'name', '?')}: core + " \
               f"{sorted(state(self, '_facets'))}>"


def view_violations(view: TargetView) -> tuple[str, ...]:
    """What the case's tests reached outside their declaration (for the plugin; a test cannot clear it)."""
    return tuple(object.__getattribute__(view, "_violations"))
