"""Flags -> RLlib's AlgorithmConfig (train/config.py): hyperparameters, learners, stop criteria, checkpoints
and the result hooks. Pure: no Ray started."""

from __future__ import annotations

import math

import pytest

from train import config
from train.envs import inspect_env

from trainer_args import TINY, parse_train


# Tiny, fast runs: 200-step batches on BasicEnv with a 16-unit network.
def algorithm_config_for(argv, num_env_runners=2):
    options = parse_train(argv)
    return config.build_algorithm_config(options, inspect_env(options.env, options.env_config), num_env_runners)


def test_flags_map_onto_the_algorithm_config():
    algorithm_config = algorithm_config_for(
        ["--run", "PPO", "--env", "CartPole-v1", "--lr", "0.001", "--train-batch-size", "1000",
         "--fcnet-hiddens", "64,32", "--seed", "7", "--num-envs-per-env-runner", "2"],
        num_env_runners=3,
    )
    assert type(algorithm_config).__name__ == "PPOConfig"
    assert algorithm_config.env == "CartPole-v1"
    assert algorithm_config.lr == 0.001
    assert algorithm_config.train_batch_size_per_learner == 1000
    assert algorithm_config.model_config["fcnet_hiddens"] == [64, 32]
    assert algorithm_config.seed == 7
    assert algorithm_config.num_env_runners == 3
    assert algorithm_config.num_envs_per_env_runner == 2
    assert algorithm_config.framework_str == "torch"
    assert algorithm_config.num_learners == 0
    assert algorithm_config.num_gpus_per_learner == 0
    assert algorithm_config.placement_strategy == "SPREAD"
    assert algorithm_config.restart_failed_env_runners is True
    assert algorithm_config.enable_rl_module_and_learner and algorithm_config.enable_env_runner_and_connector_v2


def test_defaults_keep_the_algorithms_own_hyperparameters():
    options = parse_train([])
    assert (options.run, options.env, options.fcnet_hiddens) == ("PPO", "CartPole-v1", (256, 256))
    algorithm_config = algorithm_config_for([])
    assert algorithm_config.lr == config.default_algorithm_config("PPO").lr
    assert algorithm_config.train_batch_size_per_learner == 4000


def test_tutorial_aliases_and_case_insensitive_algorithm():
    options = parse_train(["--run", "dqn", "--name-env", "BasicEnv", "--worker-num", "3", "--env-config", '{"a": 1}'])
    assert (options.env, options.num_env_runners, dict(options.env_config)) == ("BasicEnv", 3, {"a": 1})
    assert config.resolve_algorithm(options.run) == "DQN"
    assert type(algorithm_config_for(["--run", "dqn", "--env", "CartPole-v1"])).__name__ == "DQNConfig"


def test_algo_config_json_is_applied():
    algorithm_config = algorithm_config_for(["--algo-config", '{"num_epochs": 6, "gamma": 0.95, "lambda": 0.9}'])
    assert (algorithm_config.num_epochs, algorithm_config.gamma, algorithm_config.lambda_) == (6, 0.95, 0.9)


def test_small_batch_shrinks_the_ppo_minibatch():
    assert algorithm_config_for(["--train-batch-size", "64"]).minibatch_size == 64


def test_discrete_observations_get_flattened_box_ones_do_not():
    assert algorithm_config_for(TINY)._env_to_module_connector is config.flatten_observations
    assert algorithm_config_for(["--env", "Corridor"])._env_to_module_connector is None


def test_nested_checkpoint_score_is_copied_to_the_top_level():
    algorithm_config = algorithm_config_for([])
    (copy_hook,) = [hook for hook in algorithm_config.callbacks_on_train_result if isinstance(hook, config.ScoreMetricCopy)]
    result = {"env_runners": {"episode_return_mean": 12.5}}
    copy_hook(result=result, algorithm=None, metrics_logger=None)
    assert result["env_runners/episode_return_mean"] == 12.5
    empty = {"env_runners": {}}
    copy_hook(result=empty)
    assert math.isnan(empty["env_runners/episode_return_mean"])


def test_every_result_says_where_the_learners_and_env_runners_run_as_they_said_it_once():
    from types import SimpleNamespace

    from ray.rllib.utils.actor_manager import RemoteCallResults, ResultOrError

    (hook,) = [hook for hook in algorithm_config_for([]).callbacks_on_train_result if isinstance(hook, config.LearnerPlaces)]
    asked = []

    def foreach_learner(func):
        asked.append(func)
        answers = RemoteCallResults()
        for address in ("10.0.0.1", "10.0.0.2", "10.0.0.1"):
            answers.add_result(None, ResultOrError(result=address), None)
        return answers

    def foreach_env_runner(func, local_env_runner, timeout_seconds):
        asked.append(func)
        assert not local_env_runner  # the remote ones: the local one is the algorithm's process
        return ["10.0.0.3", "10.0.0.3"]

    runners = SimpleNamespace(num_remote_env_runners=lambda: 2, foreach_env_runner=foreach_env_runner)
    algorithm = SimpleNamespace(learner_group=SimpleNamespace(is_local=False, foreach_learner=foreach_learner),
                                env_runner_group=runners)
    first, second = {}, {}
    hook(algorithm=algorithm, result=first)
    hook(algorithm=algorithm, result=second)
    assert first[config.LEARNERS_KEY] == second[config.LEARNERS_KEY] == "10.0.0.1,10.0.0.2,10.0.0.1"
    assert first[config.ENV_RUNNERS_KEY] == second[config.ENV_RUNNERS_KEY] == "10.0.0.3,10.0.0.3"
    assert len(asked) == 2  # the learners and the env runners are asked once
    from train.progress import format_learners

    assert format_learners(first[config.LEARNERS_KEY].split(",")) == \
        "learners: 3 on 2 nodes: 10.0.0.1, 10.0.0.2, 10.0.0.1"


def test_tunes_checkpoint_manager_keeps_the_best_score_thanks_to_the_copy(tmp_path):
    # Tune's own bookkeeping (private API): without the top-level copy it keeps by age.
    from ray.train._internal.checkpoint_manager import _CheckpointManager, _TrainingResult
    from ray.tune import Checkpoint

    options = parse_train(["--checkpoints-to-keep", "1"])
    copy_hook = config.ScoreMetricCopy(options.checkpoint_score)
    manager = _CheckpointManager(config.checkpoint_config(options))
    for index, score in enumerate([5.0, 9.0, 1.0]):
        directory = tmp_path / f"checkpoint_{index}"
        directory.mkdir()
        result = {"env_runners": {"episode_return_mean": score}}
        copy_hook(result=result)
        manager.register_checkpoint(_TrainingResult(Checkpoint.from_directory(str(directory)), result))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["checkpoint_1", "checkpoint_2"]  # best + latest


@pytest.mark.parametrize(
    ("num_gpus", "expected"),
    [(0, (0, 0)), (0.5, (0, 0.5)), (1, (0, 1)), (2, (2, 1)), (4, (4, 1))],
)
def test_num_gpus_maps_onto_learners(num_gpus, expected):
    settings = config.learner_settings(num_gpus)
    assert (settings["num_learners"], settings["num_gpus_per_learner"]) == expected


@pytest.mark.parametrize("num_gpus", [1.5, -1])
def test_impossible_gpu_counts_are_rejected(num_gpus):
    with pytest.raises(config.OptionError, match="--num-gpus"):
        config.learner_settings(num_gpus)


def test_stop_criteria_default_to_the_env_threshold_and_can_be_disabled():
    cartpole = inspect_env("CartPole-v1")
    assert config.stop_criteria(parse_train([]), cartpole) == {
        "num_env_steps_sampled_lifetime": 1_000_000,
        "env_runners/episode_return_mean": 475.0,
    }
    options = parse_train(["--stop-iters", "5", "--stop-timesteps", "none", "--stop-reward", "off"])
    assert config.stop_criteria(options, cartpole) == {"training_iteration": 5}
    options = parse_train(["--stop-reward", "100"])
    assert config.stop_criteria(options, cartpole)["env_runners/episode_return_mean"] == 100.0
    assert config.stop_criteria(parse_train([]), inspect_env("BasicEnv"))["env_runners/episode_return_mean"] == 1.0


def test_checkpoint_flags_map_onto_checkpoint_config():
    options = parse_train(["--checkpoint-frequency", "5", "--checkpoints-to-keep", "2",
                           "--checkpoint-score", "env_runners/episode_len_mean", "--checkpoint-score-order", "min"])
    checkpoint_config = config.checkpoint_config(options)
    assert checkpoint_config.checkpoint_frequency == 5
    assert checkpoint_config.num_to_keep == 2
    assert checkpoint_config.checkpoint_score_attribute == "env_runners/episode_len_mean"
    assert checkpoint_config.checkpoint_score_order == "min"
    assert checkpoint_config.checkpoint_at_end is True
    assert config.checkpoint_config(parse_train(["--checkpoints-to-keep", "none"])).num_to_keep is None
