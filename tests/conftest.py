import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


@pytest.fixture(autouse=True)
def _scans_look_for_the_test_run() -> Iterator[None]:
    """Every scan in this process looks for tests/support/tokens.TEST_RUN's tokens (a run's tokens are what a
    scan finds: canaries.detect.use_run), whatever a test before this one set; a test wanting another says so."""
    from support.tokens import TEST_RUN

    from canaries import detect

    detect.use_run(TEST_RUN)
    yield
