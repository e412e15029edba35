"""``python -m acceptance.cli``: the ``pairproof`` command."""

from acceptance.cli import entry

entry()
