"""The fast tier: pure functions and the rank protocol in one process (no MPI, no Ray cluster), seconds in all.
A test here marked as a real run is a test in the wrong folder: it stops the collection (tests/real/ is theirs)."""

import pytest

REAL = ("slow", "slurm", "pbs", "train")


def pytest_itemcollected(item: pytest.Item) -> None:
    marked = [name for name in REAL if item.get_closest_marker(name)]
    if marked:
        raise pytest.UsageError(f"{item.nodeid} is marked {', '.join(marked)}: a real run belongs in tests/real/")
