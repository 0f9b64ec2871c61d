"""Real runs on the 3-host Slurm testbed (tests/slurm/): marked slurm by this folder (root, network namespaces)."""

import pytest


def pytest_itemcollected(item: pytest.Item) -> None:
    item.add_marker(pytest.mark.slurm)
