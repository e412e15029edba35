"""The reference target: the suite's driver for pairproof's own runtime (``runtime/``), and the worked example
of the contract. ``driver`` is the core and the facets, ``breakers`` the deliberately broken arrangements,
``helpers`` what both share. This package is the only part of the harness that imports ``runtime``."""

from acceptance.targets.reference.driver import ReferenceTarget, clean, create, preflight

__all__ = ["ReferenceTarget", "clean", "create", "preflight"]
