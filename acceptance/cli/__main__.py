"""``python -m acceptance.cli``: the ``pairproof`` command."""

import sys

from acceptance.cli import main

sys.exit(main())
