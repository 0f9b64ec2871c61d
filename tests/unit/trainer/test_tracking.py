"""Where --mlflow and --wandb send a run's records (train/tracking.py): offline by default, the user's choice kept."""

from __future__ import annotations

from pathlib import Path

from train import tracking
from train.options import TrainOptions


def test_mlflow_logs_to_a_file_store_beside_the_experiments_unless_a_uri_is_given(tmp_path):
    experiment = tmp_path / "results" / "PPO_CartPole"
    assert tracking.mlflow_uri(None, experiment) is None
    assert tracking.mlflow_uri("", experiment) == (tmp_path / "results" / "mlruns").as_uri()
    assert tracking.mlflow_uri("http://login1:5000", experiment) == "http://login1:5000"


def test_wandb_is_offline_unless_the_job_chose_and_each_tracker_says_where(tmp_path):
    experiment = tmp_path / "PPO_CartPole"
    environ: dict[str, str] = {}
    found, notes = tracking.callbacks(TrainOptions(mlflow="", wandb="proj"), experiment, environ)
    assert len(found) == 2 and environ == {"WANDB_MODE": "offline", "MLFLOW_ALLOW_FILE_STORE": "true"}
    assert notes[1] == f"W&B: project proj, offline in {tmp_path / 'wandb'}; from a login node: " \
                       f"wandb sync {tmp_path / 'wandb'}/offline-run-*"
    chosen = {"WANDB_MODE": "online"}
    _, notes = tracking.callbacks(TrainOptions(wandb="proj", mlflow="http://login1:5000"), experiment, chosen)
    assert chosen == {"WANDB_MODE": "online"} and notes[1].endswith(f"online, runs in {Path(tmp_path, 'wandb')}")
    assert tracking.callbacks(TrainOptions(), experiment, {}) == ([], [])
