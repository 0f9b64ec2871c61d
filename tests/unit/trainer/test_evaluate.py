"""python -m train evaluate's pure pieces (train/evaluate.py): which checkpoint it loads."""

from __future__ import annotations

import os

import pytest

from train.errors import UsageError
from train.evaluate import find_checkpoint


def test_find_checkpoint_picks_the_newest_under_a_run(tmp_path):
    for index in (0, 1):
        checkpoint = tmp_path / "trial" / f"checkpoint_00000{index}"
        checkpoint.mkdir(parents=True)
        (checkpoint / "rllib_checkpoint.json").write_text("{}")
        os.utime(checkpoint, (index, index))
    assert find_checkpoint(tmp_path).name == "checkpoint_000001"
    assert find_checkpoint(tmp_path / "trial" / "checkpoint_000000").name == "checkpoint_000000"
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="no RLlib checkpoint"):
        find_checkpoint(tmp_path / "empty")
