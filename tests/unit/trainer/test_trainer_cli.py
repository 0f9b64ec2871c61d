"""python -m train's arguments (train/cli.py): what is refused before Ray starts, with exit 2 and the flag
named; --help; --stop-grace from the launcher. Pure: no Ray started."""

from __future__ import annotations

import re
import time

import pytest

from train import cli

from trainer_args import parse_train


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"MPIRAY_STOP_GRACE": "30"}, 28.0),
        ({"MPIRAY_STOP_GRACE": "2"}, 1.0),
        ({}, cli.DEFAULT_STOP_GRACE_S),
    ],
)
def test_stop_grace_follows_the_launcher(environ, expected):
    assert parse_train([], environ).stop_grace_s == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--run", "PPOO"], r"unknown --run 'PPOO'.*Valid algorithms: .*DQN.*PPO"),
        (["--env", "CartPol-v1"], r"unknown --env 'CartPol-v1'.*Did you mean CartPole-v1.*BasicEnv"),
        (["--env", "no_such_module:Env"], r"cannot import module 'no_such_module'"),
        (["--env", "Corridor", "--env-config", '{"corridor_length": 0}'], r"could not be built"),
        (["--framework", "tf2"], r"supports only torch"),
        (["--algo-config", '{"num_epoch": 3}'], r"unknown AlgorithmConfig key.*num_epochs"),
        (["--num-samples", "4", "--seed", "7"], r"4 identical trials: leave --seed out"),
        (["--num-gpus", "2", "--num-learners", "2"], r"either --num-gpus \(a shorthand\) or --num-learners"),
        (["--num-gpus-per-learner", "2"], r"without --num-learners: the local learner uses at most 1 GPU"),
    ],
)
def test_bad_setups_fail_before_starting_ray(argv, message, tmp_path, capsys):
    started = time.monotonic()
    assert cli.main([*argv, "--storage-path", str(tmp_path)]) == cli.EXIT_USAGE
    assert re.search(message, capsys.readouterr().err, re.DOTALL)
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("flag, value", [("--num-learners", "-1"), ("--num-learners", "1.5"),
                                         ("--num-cpus-per-learner", "0"), ("--num-gpus-per-learner", "-1")])
def test_learner_counts_are_whole_and_amounts_not_negative(flag, value, capsys):
    assert cli.main([flag, value]) == cli.EXIT_USAGE
    assert flag in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_num_samples_is_a_whole_number_of_at_least_one(value, capsys):
    assert cli.main(["--num-samples", value]) == cli.EXIT_USAGE
    assert "--num-samples" in capsys.readouterr().err


def test_unwritable_storage_path_fails_before_starting_ray(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert cli.main(["--storage-path", str(blocker / "results")]) == cli.EXIT_USAGE
    assert "is not writable" in capsys.readouterr().err


@pytest.mark.parametrize("env_config", ["{bad json", "[1, 2]"])
def test_bad_json_is_an_argument_error(env_config, capsys):
    assert cli.main(["--env-config", env_config]) == 2
    assert "--env-config" in capsys.readouterr().err


def test_help_lists_every_flag(capsys):
    assert cli.main(["--help"]) == 0
    help_text = capsys.readouterr().out
    for flag in ["--run", "--env", "--name-env", "--env-config", "--num-env-runners", "--worker-num", "--num-gpus",
                 "--framework", "--lr", "--train-batch-size", "--fcnet-hiddens", "--stop-iters", "--stop-timesteps",
                 "--stop-reward", "--checkpoint-frequency", "--checkpoints-to-keep", "--checkpoint-score",
                 "--storage-path", "--name", "--resume", "--seed", "--num-cpus", "--local-mode"]:
        assert flag in help_text
