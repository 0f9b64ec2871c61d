"""Real trainings with the RLlib trainer (python -m train), tiny budgets on BasicEnv: what a run writes,
checkpoints kept by score, evaluate and plot of that run, DQN as the driver of a 2-node job under the launcher,
SIGTERM then resume, --mpi, and a console without Ray's internal notices.

Every test runs the trainer in a subprocess (on a local Ray, as the launcher's driver, or with --mpi over mpirun)
and is marked ``train``; select them with ``pytest -m train``. The pure tests of train/ are in tests/unit/trainer/.
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

import pytest

from train import cli
from train.options import RETURN_METRIC

from helpers import exit_codes, launch
from trainer_args import PNG_MAGIC, TINY

REPO_ROOT = Path(__file__).resolve().parents[3]
TRAIN_TIMEOUT_S = 240


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
    """BasicEnv PPO, checkpoint every iteration, keep 1 by score, stopped by --stop-timesteps; tracked in MLflow
    (its file store) and W&B (offline: no API key, no network)."""
    storage_path = tmp_path_factory.mktemp("results")
    finished = run_train_command(
        [*TINY, "--stop-iters", "50", "--stop-timesteps", "600", "--checkpoint-frequency", "1",
         "--checkpoints-to-keep", "1", "--storage-path", str(storage_path), "--name", "basic",
         "--mlflow", "--wandb", "mpiray-test"],
        trainer_env(HOME=str(storage_path / "home")))  # no W&B login of this machine's user
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


WANDB_BLOCK = 32768  # a .wandb file is a LevelDB log of W&B's protobuf Records, after a 7-byte header


def wandb_history(run_file: Path) -> list[dict]:
    """The history rows (one per logged step) of an offline W&B run, read as `wandb sync` would."""
    from wandb.proto import wandb_internal_pb2

    data = run_file.read_bytes()
    assert data[:4] == b":W&B", data[:8]
    pos, pending, rows = 7, b"", []
    while pos + 7 <= len(data):
        if WANDB_BLOCK - pos % WANDB_BLOCK < 7:  # a block's tail too short for a header is padding
            pos += WANDB_BLOCK - pos % WANDB_BLOCK
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST: a record is whole
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            if record.WhichOneof("record_type") == "history":
                rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                             for item in record.history.item})
    return rows


@pytest.mark.train
def test_mlflow_and_wandb_hold_every_iteration_without_a_network(trained_run, monkeypatch):
    from mlflow.tracking import MlflowClient

    finished, experiment_dir = trained_run
    returns = [float(row[RETURN_METRIC]) for row in progress(single_trial_dir(experiment_dir))]
    storage_path = experiment_dir.parent
    assert f"MLflow: experiment basic in {(storage_path / 'mlruns').as_uri()}" in finished.stdout
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=(storage_path / "mlruns").as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("basic").experiment_id])
    assert [metric.value for metric in client.get_metric_history(run.info.run_id, RETURN_METRIC)] == returns
    assert f"W&B: project mpiray-test, offline in {storage_path / 'wandb'}" in finished.stdout
    (run_file,) = (storage_path / "wandb").glob("offline-run-*/run-*.wandb")
    assert [row[RETURN_METRIC] for row in wandb_history(run_file)] == returns


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


def console_run(tmp_path, *extra):
    """A short real run that starts every actor that prints notices: 1 env runner, 2 iterations."""
    return run_train_command([*TINY, "--num-cpus", "2", "--num-env-runners", "1", "--stop-iters", "2",
                              "--checkpoint-frequency", "1", "--storage-path", str(tmp_path), "--name", "console",
                              *extra])


NOTICE_MARKERS = ["You are running PPO on the new API stack", "Install gputil", "RLModule(config=",
                  "Checkpoint successfully created at", "To visualize your results with TensorBoard"]


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


@pytest.mark.train
def test_verbose_keeps_everything(tmp_path):
    finished = console_run(tmp_path, "--verbose")
    assert finished.returncode == 0, finished.stdout[-5000:]
    assert [m for m in NOTICE_MARKERS if m not in finished.stdout] == [], finished.stdout[-5000:]
    assert re.search(r"^\[train\] \w+ iter 2 \| ", finished.stdout, re.M)
