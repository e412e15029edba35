"""The facets: one module per group, each holding its Protocol(s) and, beside them, its check-driver round trip
(``round_trip(checker) -> str``), so what a facet asks and how check-driver tries it read together. The
registry (``acceptance/contract/registry.py``) names them; nothing here knows of it."""
