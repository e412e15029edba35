"""The pairproof reference runtime: the platform around one agent instance per (organization, user).

It is the embedded default target of the suite and the worked example of each contract: a controller
that owns instance lifecycle, a namespace/cgroup sandbox per instance running as its own host uid, a
private volume, and a minimal agent. It imports nothing from ``acceptance``, ``canaries``, ``mutants``
or ``reports`` (a test enforces this), so a mutant can be made from a copy of this folder alone.
"""
