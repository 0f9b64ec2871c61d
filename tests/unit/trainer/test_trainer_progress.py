"""The trainer's one-line summaries (train/progress.py): an iteration, the checkpoints."""

from __future__ import annotations

from train.evaluate import format_returns
from train.progress import format_progress


def test_progress_line_and_return_summary():
    result = {"training_iteration": 3, "num_env_steps_sampled_lifetime": 1200.0, "time_total_s": 4.25,
              "env_runners": {"episode_return_mean": 1.0, "episode_return_min": 1.0, "episode_return_max": 1.0}}
    assert format_progress("abc", result) == (
        "[train] abc iter 3 | 1200 env steps | return 1.000 (min 1.000, max 1.000) | 4.2 s"
    )
    assert format_returns([1.0, -1.0]) == "episodes: 2  mean return: 0.000  min: -1.000  max: 1.000"


def test_checkpoint_summary_line():
    from train.progress import format_checkpoints

    assert format_checkpoints(5, 2) == "checkpoints: 5 saved, 2 kept"
