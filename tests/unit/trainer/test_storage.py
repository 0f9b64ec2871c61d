"""Where results go and what experiments are called (train/storage.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from train import storage


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"MPIRAY_LOG_DIR": "/work/logs/123", "MPIRAY_JOB_ID": "123"}, "/work/results"),
        ({"MPIRAY_LOG_DIR": "/work/logs", "MPIRAY_JOB_ID": "123"}, "/work/results"),
    ],
)
def test_default_storage_sits_beside_the_logs(environ, expected):
    assert storage.default_storage_path(environ) == Path(expected)


def test_default_storage_without_launcher_is_cwd_results(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert storage.default_storage_path({}) == tmp_path / "results"


def test_experiment_names_are_file_safe():
    assert storage.experiment_prefix("PPO", "my.pkg:My Env") == "PPO_my.pkg_My_Env_"
    assert re.fullmatch(r"DQN_CartPole-v1_\d{8}-\d{6}", storage.experiment_name("DQN", "CartPole-v1"))
