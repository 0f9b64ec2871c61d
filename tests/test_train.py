"""Tests of the RLlib trainer (train/).

Unmarked tests are pure (no Ray). Tests marked ``train`` run the trainer in a
subprocess on a local Ray (or a small fake multi-node cluster) with tiny
budgets; select them with ``pytest -m train``.
"""

from __future__ import annotations

import csv
import json
import math
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from train import cli, cluster, config, storage
from train.envs import BasicEnv, CorridorEnv, EnvConfigError, EnvFactory, EnvNotFoundError, inspect_env
from train.evaluate import find_checkpoint, format_returns
from train.options import UsageError
from train.plot import find_progress_files, plot_runs, read_curve
from train.progress import format_progress

from helpers import exit_codes, launch

REPO_ROOT = Path(__file__).resolve().parents[1]
TRAIN_TIMEOUT_S = 240
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# Tiny, fast runs: 200-step batches on BasicEnv with a 16-unit network.
TINY = ["--env", "BasicEnv", "--train-batch-size", "200", "--fcnet-hiddens", "16", "--seed", "1"]


def parse_train(argv, environ=None):
    """argv -> TrainOptions through the real parser."""
    return cli.train_options(cli.build_train_parser(environ or {}).parse_args(argv))


def algorithm_config_for(argv, num_env_runners=2):
    options = parse_train(argv)
    return config.build_algorithm_config(options, inspect_env(options.env, options.env_config), num_env_runners)


# ---------------------------------------------------------------- flags -> RLlib config


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


def test_every_result_says_where_the_learners_run_as_they_said_it_once():
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

    algorithm = SimpleNamespace(learner_group=SimpleNamespace(is_local=False, foreach_learner=foreach_learner))
    first, second = {}, {}
    hook(algorithm=algorithm, result=first)
    hook(algorithm=algorithm, result=second)
    assert first[config.LEARNERS_KEY] == second[config.LEARNERS_KEY] == "10.0.0.1,10.0.0.2,10.0.0.1"
    assert len(asked) == 1  # the learners are asked once
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


@pytest.mark.parametrize(
    ("total_cpus", "reserved", "expected"),
    [(2, 1, 1), (4, 1, 3), (1, 1, 0), (0.5, 1, 0), (16, 2, 14)],
)
def test_default_env_runners_use_every_cpu_but_the_learners(total_cpus, reserved, expected):
    assert cluster.default_num_env_runners(total_cpus, reserved) == expected


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


# ---------------------------------------------------------------- validation before Ray


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


def test_learners_map_onto_rllib_and_more_than_the_nodes_can_hold_is_refused_with_what_fits(monkeypatch):
    options = parse_train(["--num-learners", "3", "--num-cpus-per-learner", "2"])
    assert config.learners_of(options) == {"num_learners": 3, "num_gpus_per_learner": 0.0, "num_cpus_per_learner": 2.0}
    node = {"CPU": 2.0, "GPU": 0.0, cluster.LEARNER_SLOT: 1.0}
    three = cluster.ClusterInfo(None, 3, 6.0, 0.0, nodes=({**node, cluster.HEAD_RESOURCE: 1.0}, node, node))
    learners = config.default_algorithm_config("PPO").learners(num_learners=4)
    with pytest.raises(cluster.ResourceError, match="4 learners, but the cluster's nodes can hold 3: they offer 3 "
                                                    "learner slots.*--num-learners 3 or fewer"):
        cluster.check_learners(learners, three, spread=True, main_on_head=True)
    cluster.check_learners(config.default_algorithm_config("PPO").learners(num_learners=3), three, spread=True,
                           main_on_head=True)
    # Learners of 1.5 CPUs: the head's 2 CPUs less the main process's 1 hold none, the others one each.
    big = config.default_algorithm_config("PPO").learners(num_learners=3, num_cpus_per_learner=1.5)
    with pytest.raises(cluster.ResourceError, match="can hold 2: .*of its node's, the head's after the algorithm's"):
        cluster.check_learners(big, three, spread=True, main_on_head=True)
    # Ray 2.52's RLlib: one bundle for all learners, which must then fit one node.
    monkeypatch.setattr(cluster, "learner_bundles", lambda algorithm_config: [{"CPU": 3.0, "GPU": 0.0}])
    with pytest.raises(cluster.ResourceError, match="3 learners need 3 CPUs and 0 GPUs on one node: .* places all "
                                                    "learners in one bundle.*the largest: 2 CPUs"):
        cluster.check_learners(config.default_algorithm_config("PPO").learners(num_learners=3), three, spread=False)


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


# ---------------------------------------------------------------- envs


def test_basic_env_rewards_only_action_two():
    env = BasicEnv()
    assert (env.observation_space.n, env.action_space.n) == (2, 5)
    for action in range(5):
        observation, info = env.reset(seed=0)
        assert observation == 0
        observation, reward, terminated, truncated, info = env.step(action)
        assert (observation, reward, terminated, truncated) == (1, 1.0 if action == 2 else -1.0, True, False)


def test_corridor_env_walks_to_the_goal():
    env = CorridorEnv({"corridor_length": 3})
    observation, _ = env.reset(seed=0)
    assert env.observation_space.contains(observation)
    rewards = [env.step(1)[1] for _ in range(3)]
    assert rewards == [-0.1, -0.1, 1.0]
    assert env.reward_threshold == pytest.approx(0.6)
    assert env.step(0)[0] == np.array([2.0], dtype=np.float32)


class KeywordEnv(BasicEnv):
    def __init__(self, reward_scale=1.0):
        super().__init__()
        self.reward_scale = reward_scale


class RequiredConfigEnv(BasicEnv):
    def __init__(self, settings):
        super().__init__()
        self.settings = settings


def test_env_factory_supports_both_constructor_conventions():
    assert EnvFactory(CorridorEnv)({"corridor_length": 4}).corridor_length == 4
    assert EnvFactory(CorridorEnv)({}).corridor_length == 10
    assert EnvFactory(KeywordEnv)({"reward_scale": 2.0}).reward_scale == 2.0
    assert EnvFactory(KeywordEnv)({}).reward_scale == 1.0
    assert EnvFactory(RequiredConfigEnv)({"x": 1}).settings == {"x": 1}
    assert isinstance(EnvFactory(BasicEnv)({}), BasicEnv)


def test_envs_resolve_by_name_class_path_and_gymnasium_id():
    assert inspect_env("BasicEnv").factory == EnvFactory(BasicEnv)
    assert inspect_env("train.envs.corridor:CorridorEnv").factory == EnvFactory(CorridorEnv)
    cartpole = inspect_env("CartPole-v1")
    assert cartpole.factory is None and cartpole.reward_threshold == 475.0
    with pytest.raises(EnvNotFoundError):
        inspect_env("NoSuchEnv-v0")
    with pytest.raises(EnvConfigError):
        inspect_env("CartPole-v1", {"no_such_kwarg": 1})


# ---------------------------------------------------------------- storage, naming, small pieces


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


def test_progress_line_and_return_summary():
    result = {"training_iteration": 3, "num_env_steps_sampled_lifetime": 1200.0, "time_total_s": 4.25,
              "env_runners": {"episode_return_mean": 1.0, "episode_return_min": 1.0, "episode_return_max": 1.0}}
    assert format_progress("abc", result) == (
        "[train] abc iter 3 | 1200 env steps | return 1.000 (min 1.000, max 1.000) | 4.2 s"
    )
    assert format_returns([1.0, -1.0]) == "episodes: 2  mean return: 0.000  min: -1.000  max: 1.000"


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


# ---------------------------------------------------------------- plot (no Ray)


def write_progress(path: Path, rows: list[dict]) -> Path:
    path.mkdir(parents=True)
    with open(path / "progress.csv", "w", newline="") as csv_file:
        writer = csv.DictWriter(csv_file, fieldnames=list(rows[-1]))
        writer.writeheader()
        writer.writerows(rows)
    return path / "progress.csv"


def progress_rows(returns):
    """progress.csv rows; "" stands for an iteration without finished episodes."""
    return [
        {"training_iteration": i + 1, "num_env_steps_sampled_lifetime": 100 * (i + 1), "time_total_s": 2.0 * (i + 1),
         "env_runners/episode_return_mean": value,
         "env_runners/episode_return_min": "" if value == "" else value - 1,
         "env_runners/episode_return_max": "" if value == "" else value + 1}
        for i, value in enumerate(returns)
    ]


def test_plot_draws_runs_into_a_real_png(tmp_path):
    write_progress(tmp_path / "one_core" / "PPO_x_00000_0", progress_rows([1, 2, 3]))
    write_progress(tmp_path / "all_cores" / "PPO_x_00000_0", progress_rows(["", 5, 9]))
    output = tmp_path / "out" / "curves.png"
    options = cli.plot_options(cli.build_plot_parser({}).parse_args(
        [str(tmp_path / "one_core"), str(tmp_path / "all_cores"), "-o", str(output), "--labels", "1 core,all cores"]))
    assert plot_runs(options) == 0
    assert output.read_bytes()[:8] == PNG_MAGIC
    import matplotlib.image

    assert matplotlib.image.imread(output).shape[:2] == (450, 1200)


def test_plot_skips_iterations_without_episodes(tmp_path):
    curve = read_curve(write_progress(tmp_path / "run", progress_rows(["", 2.0])), "run")
    assert (curve.env_steps, curve.mean_return) == ([200.0], [2.0])


def test_plot_without_progress_files_is_a_usage_error(tmp_path, capsys):
    assert cli.main(["plot", str(tmp_path), "-o", str(tmp_path / "x.png")]) == cli.EXIT_USAGE
    assert "no non-empty progress.csv" in capsys.readouterr().err
    with pytest.raises(UsageError):
        find_progress_files([tmp_path / "missing"])


# ---------------------------------------------------------------- real training (Ray), marked


def trainer_env(**extra):
    """The test's environment minus any cluster/auth settings, so the trainer starts its own Ray."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MPIRAY_"))}
    environ["PYTHONUNBUFFERED"] = "1"
    environ.update(extra)
    return environ


def run_train_command(args, environ=None, timeout=TRAIN_TIMEOUT_S) -> subprocess.CompletedProcess:
    """`python -m train ARGS` from the repo root; the whole process group is killed on timeout."""
    process = subprocess.Popen(
        [sys.executable, "-m", "train", *args], cwd=REPO_ROOT, env=environ or trainer_env(),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"python -m train {' '.join(args)} ran past {timeout} s:\n{output[-5000:]}")
    return subprocess.CompletedProcess(process.args, process.returncode, output, "")


def single_trial_dir(experiment_dir: Path) -> Path:
    (trial_dir,) = [path for path in experiment_dir.iterdir() if path.is_dir()]
    return trial_dir


def progress(trial_dir: Path) -> list[dict]:
    with open(trial_dir / "progress.csv", newline="") as csv_file:
        return list(csv.DictReader(csv_file))


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """BasicEnv PPO, checkpoint every iteration, keep 1 by score, stopped by --stop-timesteps."""
    storage_path = tmp_path_factory.mktemp("results")
    finished = run_train_command(
        [*TINY, "--stop-iters", "50", "--stop-timesteps", "600", "--checkpoint-frequency", "1",
         "--checkpoints-to-keep", "1", "--storage-path", str(storage_path), "--name", "basic"])
    return finished, storage_path / "basic"


@pytest.mark.train
def test_stop_timesteps_stops_and_outputs_are_written(trained_run):
    finished, experiment_dir = trained_run
    assert finished.returncode == 0, finished.stdout[-5000:]
    trial_dir = single_trial_dir(experiment_dir)
    rows = progress(trial_dir)
    assert [int(row["training_iteration"]) for row in rows] == [1, 2, 3]
    assert float(rows[-1]["num_env_steps_sampled_lifetime"]) == 600
    assert rows[-1]["done"] == "True"
    assert len((trial_dir / "result.json").read_text().splitlines()) == 3
    (events,) = trial_dir.glob("events.out.tfevents.*")
    event_bytes = events.read_bytes()
    assert b"brain.Event" in event_bytes and b"env_runners/episode_return_mean" in event_bytes


@pytest.mark.train
def test_checkpoints_are_kept_by_score(trained_run):
    finished, experiment_dir = trained_run
    trial_dir = single_trial_dir(experiment_dir)
    returns = [float(row["env_runners/episode_return_mean"]) for row in progress(trial_dir)]
    kept = sorted(trial_dir.glob("checkpoint_*"))
    # One checkpoint per iteration: checkpoint_00000N holds iteration N+1. Tune never deletes the latest.
    kept_iterations = [int(path.name.split("_")[1]) + 1 for path in kept]
    assert 1 <= len(kept) <= 2
    assert max(returns[i - 1] for i in kept_iterations) == max(returns)
    assert all(returns[i - 1] == max(returns) or i == len(returns) for i in kept_iterations)
    assert "best checkpoint (env_runners/episode_return_mean)" in finished.stdout


@pytest.mark.train
def test_evaluate_loads_the_checkpoint(trained_run):
    _, experiment_dir = trained_run
    evaluated = run_train_command(["evaluate", str(experiment_dir), "--episodes", "5", "--seed", "0"])
    assert evaluated.returncode == 0, evaluated.stdout[-5000:]
    match = re.search(r"episodes: 5  mean return: (\S+)  min: (\S+)  max: (\S+)", evaluated.stdout)
    assert match, evaluated.stdout[-3000:]
    assert all(-1.0 <= float(value) <= 1.0 for value in match.groups())


@pytest.mark.train
def test_plot_of_a_real_run(trained_run, tmp_path):
    _, experiment_dir = trained_run
    output = tmp_path / "basic.png"
    assert cli.main(["plot", str(experiment_dir), "-o", str(output)]) == 0
    assert output.read_bytes()[:8] == PNG_MAGIC


@pytest.mark.train
def test_dqn_under_the_launcher_on_two_nodes_stops_on_reward(tmp_path):
    # The real thing: mpirun -np 2 start_ray.py, a 2-node cluster of 1 CPU each, the trainer as its driver.
    # A random policy averages -0.6 on BasicEnv, so -0.95 is met after the first iteration.
    driver = [sys.executable, "-m", "train", "--run", "DQN", *TINY, "--stop-reward", "-0.95", "--stop-iters", "20",
              "--name", "dqn", "--storage-path", str(tmp_path / "results")]
    finished = launch(tmp_path, 2, ["--num-cpus", "1"], driver, timeout=TRAIN_TIMEOUT_S, tag="dqn")
    output = finished.stdout + finished.stderr + (finished.job_dir / "driver.log").read_text()
    assert finished.returncode == 0, output[-5000:]
    assert "1 env runners on a 2-node cluster" in output
    rows = progress(single_trial_dir(tmp_path / "results" / "dqn"))
    assert len(rows) == 1 and float(rows[0]["env_runners/episode_return_mean"]) >= -0.95


def read_lines_in_background(stream) -> queue.Queue:
    lines: queue.Queue = queue.Queue()

    def pump():
        for line in stream:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def wait_for_line(lines: queue.Queue, pattern: str, timeout: float, seen: list) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        seen.append(line)
        if re.search(pattern, line):
            return True
    return False


@pytest.mark.train
def test_sigterm_saves_a_checkpoint_and_resume_continues(tmp_path):
    args = [*TINY, "--stop-iters", "5", "--checkpoint-frequency", "0", "--storage-path", str(tmp_path), "--name", "sig"]
    process = subprocess.Popen(
        [sys.executable, "-m", "train", *args], cwd=REPO_ROOT, env=trainer_env(),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    seen: list[str] = []
    try:
        assert wait_for_line(read_lines_in_background(process.stdout), r"iter 1 \|", TRAIN_TIMEOUT_S, seen), "".join(seen)
        # Like start_ray.py: SIGTERM to the driver only (its local Ray must keep running meanwhile).
        process.send_signal(signal.SIGTERM)
        returncode = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    time.sleep(0.5)  # let the reader thread drain
    assert returncode == 128 + signal.SIGTERM, "".join(seen)
    trial_dir = single_trial_dir(tmp_path / "sig")
    interrupted_iterations = len(progress(trial_dir))
    assert interrupted_iterations < 5
    assert list(trial_dir.glob("checkpoint_*")), "no checkpoint written on SIGTERM"

    # The same command again (as a requeued job script would run it): --name alone continues.
    resumed = run_train_command(["--env", "BasicEnv", "--name", "sig", "--storage-path", str(tmp_path)])
    assert resumed.returncode == 0, resumed.stdout[-5000:]
    assert f"continuing {tmp_path / 'sig'} from its last checkpoint (--name sig)" in resumed.stdout
    iterations = [int(row["training_iteration"]) for row in progress(trial_dir)]
    assert iterations == [1, 2, 3, 4, 5], "resume must continue from the checkpoint, not restart"
    assert json.loads((trial_dir / "result.json").read_text().splitlines()[-1])["done"] is True
    # Once more: a finished experiment is not trained again by accident.
    again = run_train_command(["--env", "BasicEnv", "--resume", "--name", "sig", "--storage-path", str(tmp_path)])
    assert again.returncode == 0, again.stdout[-5000:]
    assert f"{tmp_path / 'sig'} has finished (--name sig): nothing to do" in again.stdout
    assert len(progress(trial_dir)) == 5


@pytest.mark.slow
@pytest.mark.train
def test_train_starts_its_own_cluster_over_mpi_ranks_with_dash_dash_mpi(tmp_path):
    # mpirun -np 2 python -m train --mpi: mpiray.init() inside the trainer, no start_ray.py.
    environ = trainer_env(PYTHONPATH=str(REPO_ROOT), MPIRAY_LOG_DIR=str(tmp_path / "logs"))
    mpirun = str(Path(sys.executable).parent / "mpirun")
    process = subprocess.run(
        [mpirun, "-np", "2", sys.executable, "-m", "train", "--mpi", *TINY, "--stop-iters", "1",
         "--storage-path", str(tmp_path / "results"), "--name", "mpi"],
        cwd=REPO_ROOT, env=environ, capture_output=True, text=True, timeout=TRAIN_TIMEOUT_S)
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    assert re.search(r"on a 2-node cluster \(2 CPUs", process.stdout + process.stderr)
    assert "[train] experiment:" in process.stdout + process.stderr
    (job_dir,) = (tmp_path / "logs").iterdir()
    assert exit_codes(job_dir, 2) == [0, 0]


# ---------------------------------------------------------------- the console


# Lines as Ray prints them on a launched PPO run (driver, and actors through the log monitor).
RAY_INTERNAL_LINES = [
    "2026-11-23 15:37:41,517\tWARNING algorithm_config.py:5160 -- You are running PPO on the new API stack! "
    "This is the new default behavior for this algorithm.",
    "(PPO pid=350) [2026-11-23 15:37:44,196 E 350 350] core_worker.cc:2465: Actor with class name: "
    "'SingleAgentEnvRunner' and ID: '13d56eacea7187fa0e32baa701000000' has constructor arguments in the object "
    "store and max_restarts > 0. If the arguments in the object store go out of scope or are lost, the actor "
    "restart will fail.",
    "(SingleAgentEnvRunner pid=398) DeprecationWarning: `RLModule(config=[RLModuleConfig object])` has been "
    "deprecated. Use `RLModule(observation_space=.., action_space=..)` instead.",
    "(PPO pid=350) Install gputil for GPU system monitoring.",
    "(PPO(env=BasicEnv; env-runners=1) pid=350) Checkpoint successfully created at: Checkpoint(filesystem=local, "
    "path=/tmp/results/x/checkpoint_000000)",
]


def test_every_internal_notice_is_named_once_and_only_those_lines_match():
    from train import console

    for line in RAY_INTERNAL_LINES:
        assert sum(re.search(pattern, line) is not None for _, pattern in console.INTERNAL_NOTICES) == 1, line
        assert console.is_internal_notice(line)
    for kept in ["[train] abc iter 3 | 1200 env steps | return 1.000 (min 1.000, max 1.000) | 4.2 s",
                 "DeprecationWarning: `my_env.step()` has been deprecated.",
                 "(PPO pid=350) WARNING env.py:1 -- my env warns", "Actor with class name: 'MyActor' and ID: 'x' "
                 "has constructor arguments in the object store and max_restarts > 0"]:
        assert not console.is_internal_notice(kept), kept


def test_quiet_filters_this_process_and_tells_ray_then_puts_everything_back(caplog):
    import logging

    from train import console

    environ = {console.SKIP_VARIABLE: "mine"}
    rllib = logging.getLogger("ray.rllib.algorithms.algorithm_config")
    with console.quiet(environ):
        assert re.search(environ[console.SKIP_VARIABLE], "mine") and re.search(
            environ[console.SKIP_VARIABLE], RAY_INTERNAL_LINES[3])
        assert environ[console.NEW_OUTPUT_VARIABLE] == "0"
        rllib.warning("You are running PPO on the new API stack! This is the new default")
        rllib.warning("a warning of its own")
    rllib.warning("You are running DQN on the new API stack! again")
    assert environ == {console.SKIP_VARIABLE: "mine"}
    assert [record.getMessage()[:20] for record in caplog.records] == ["a warning of its own", "You are running DQN "]


def test_checkpoint_summary_line():
    from train.progress import format_checkpoints

    assert format_checkpoints(5, 2) == "checkpoints: 5 saved, 2 kept"


def console_run(tmp_path, *extra):
    """A short real run that starts every actor that prints notices: 1 env runner, 2 iterations."""
    return run_train_command([*TINY, "--num-cpus", "2", "--num-env-runners", "1", "--stop-iters", "2",
                              "--checkpoint-frequency", "1", "--storage-path", str(tmp_path), "--name", "console",
                              *extra])


NOTICE_MARKERS = ["You are running PPO on the new API stack", "Install gputil", "RLModule(config=",
                  "Checkpoint successfully created at", "To visualize your results with TensorBoard"]


@pytest.mark.slow
@pytest.mark.train
def test_the_console_is_one_line_per_iteration_without_rays_internal_notices(tmp_path):
    finished = console_run(tmp_path)
    assert finished.returncode == 0, finished.stdout[-5000:]
    console = finished.stdout
    assert [m for m in NOTICE_MARKERS if m in console] == [], console[-5000:]
    assert not [line for line in console.splitlines() if re.search(r" E \d+ \d+\]|\bERROR\b", line)], console
    assert [int(n) for n in re.findall(r"^\[train\] \w+ iter (\d+) \| ", console, re.M)] == [1, 2]
    assert "[train] checkpoints: 2 saved, 2 kept" in console
    hint = re.search(r"^\[train\] TensorBoard: tensorboard --logdir (\S+)$", console, re.M)
    assert hint and Path(hint.group(1)) == tmp_path / "console", console
    assert list(Path(hint.group(1)).glob("*/events.out.tfevents.*"))  # the directory stays, with the events


@pytest.mark.slow
@pytest.mark.train
def test_verbose_keeps_everything(tmp_path):
    finished = console_run(tmp_path, "--verbose")
    assert finished.returncode == 0, finished.stdout[-5000:]
    assert [m for m in NOTICE_MARKERS if m not in finished.stdout] == [], finished.stdout[-5000:]
    assert re.search(r"^\[train\] \w+ iter 2 \| ", finished.stdout, re.M)


@pytest.mark.parametrize("text, lost", [
    ('ray::PPO.train() ... learner_group.py", line 722, in _get_results ... RuntimeError: [gloo/transport/tcp/pair.cc:553] '
     'Connection closed by peer [10.77.0.13]:64130. This is typically caused by a remote worker crashing.', True),
    ("learner_group.py ... ray.exceptions.ActorDiedError: The actor died because its node has died.", True),
    ("learner_group.py ... Gloo connectFullMesh failed ... Connection refused, remote=[127.0.0.1]", False),
    ("env_runner_group.py ... ActorDiedError: The actor died because its node has died.", False),
])
def test_a_trial_that_lost_a_learners_node_is_told_from_other_failures(text, lost):
    from train.run import lost_learner

    assert lost_learner(RuntimeError(text)) is lost


def test_the_watch_ends_a_trial_whose_learner_node_is_gone_once_and_says_why(monkeypatch, capsys):
    """A node lost without closing its connections (power, a dead host) leaves the other learners waiting in
    their all-reduce (torch's 30 min): the driver ends that trial itself once Ray sees the node gone."""
    from types import SimpleNamespace

    import ray

    from train import watch

    killed, nodes = [], [{"NodeManagerAddress": "10.0.0.1", "Alive": True}, {"NodeManagerAddress": "10.0.0.2", "Alive": True}]
    monkeypatch.setattr(ray, "nodes", lambda: nodes)
    monkeypatch.setattr(ray, "kill", killed.append)
    monkeypatch.setattr(watch, "CHECK_EVERY_S", 0.0)
    monkeypatch.setattr(watch, "LOST", {})
    monkeypatch.setattr(watch, "_PLACES", {})
    trial = SimpleNamespace(trial_id="t1", temporary_state=SimpleNamespace(ray_actor="the trial's actor"))
    callback = watch.LearnerNodeWatch()
    callback.on_trial_result(0, [trial], trial, {config.LEARNERS_KEY: "10.0.0.1,10.0.0.2"})
    callback.on_step_begin(1, [trial])
    assert killed == []  # every learner's node alive
    nodes[1]["Alive"] = False
    callback.on_step_begin(2, [trial])
    callback.on_step_begin(3, [trial])
    assert killed == ["the trial's actor"] and watch.LOST == {"t1": "10.0.0.2"}
    assert "the node of a learner (10.0.0.2) is gone" in capsys.readouterr().err
