"""Real runs on the 3-host PBS testbed (tests/pbs/): marked pbs by this folder; they run where an OpenPBS or
PBS Professional is installed (bash tests/envs.sh pbs), and skip elsewhere."""

import pytest


def pytest_itemcollected(item: pytest.Item) -> None:
    item.add_marker(pytest.mark.pbs)
