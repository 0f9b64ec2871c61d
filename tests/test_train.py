"""Tests of the RLlib trainer (train/).

Unmarked tests are pure (no Ray). Tests marked ``train`` run the trainer in a
subprocess on a local Ray (or a small fake multi-node cluster) with tiny
budgets; select them with ``pytest -m train``.
"""

from __future__ import annotations

import csv
import json
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

from train import cli, config, storage
from train.envs import BasicEnv, CorridorEnv, EnvConfigError, EnvFactory, EnvNotFoundError, inspect_env
from train.evaluate import find_checkpoint, format_returns
from train.options import UsageError
from train.plot import find_progress_files, plot_runs, read_curve
from train.progress import format_progress

from helpers import exit_codes, launch
from trainer.test_config import TINY

REPO_ROOT = Path(__file__).resolve().parents[1]
TRAIN_TIMEOUT_S = 240
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


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
