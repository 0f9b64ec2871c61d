"""Training that survives the batch system, on the 3-host Slurm testbed: a requeued job continues
its experiment by itself, and losing worker nodes costs env runners only.

Both run the real trainer (PPO on CartPole) over real srun; each takes 1-3 minutes.
"""

from __future__ import annotations

import csv
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from train.run import EXPERIMENT_STATE_PERIOD_S

from helpers import JOB_TIMEOUT_S, JOBS, PYTHON, START_RAY, rank_logs, show_timings, wait_for_text
from slurm.fixture import raylet_of

TRAIN = [PYTHON, "-m", "train", "--train-batch-size", "400", "--fcnet-hiddens", "32"]
REQUEUE_BATCH = 2000  # env steps per iteration in the requeue test (the last --train-batch-size wins)


def progress_rows(experiment_dir: Path) -> list[dict]:
    (progress,) = experiment_dir.glob("*/progress.csv")
    with open(progress, newline="") as csv_file:
        return list(csv.DictReader(csv_file))


@pytest.mark.train
def test_a_requeued_training_job_continues_from_its_last_checkpoint(slurm_testbed, jobs, tmp_path, capsys, request):
    """scontrol requeue after the second checkpoint (one every 2 iterations): the job starts again with
    the same script and flags, continues the same experiment from its last checkpoint (iterations and
    env steps go on) and ends COMPLETED.

    Slurm SIGTERMs every process of the step, Ray's too, so the trainer's checkpoint on SIGTERM may
    not get written; the periodic checkpoints, as far as Tune's experiment state names them (written every
    EXPERIMENT_STATE_PERIOD_S), are what counts: the requeue comes once that state has had time to name
    the second one. Iterations of 2,000 env steps: at 400, 4 iterations took 1.4 s, all before Tune's
    state named any checkpoint, and the requeued run started over (1 run in 3).
    """
    bed = slurm_testbed
    env = jobs.env(tmp_path, [*TRAIN, "--stop-iters", "12", "--checkpoint-frequency", "2", "--train-batch-size",
                              str(REQUEUE_BATCH)])
    # Requeue and an output file that keeps the first run's lines: what jobs/slurm_multi_node.sh asks for.
    job_id = jobs.submit(JOBS / "slurm_multi_node.sh", tmp_path, env, "--cpus-per-task=2")
    results = tmp_path / "results"
    wait_for_text(results, "*/*/checkpoint_000001")  # the second checkpoint
    (experiment,) = results.iterdir()
    time.sleep(2 * EXPERIMENT_STATE_PERIOD_S + 1)  # Tune's saved state names it (or a newer one)
    requeued = time.time()
    assert bed.run(["scontrol", "requeue", job_id], timeout=60).returncode == 0
    # Slurm makes a requeued job eligible 2 minutes later; the test does not wait for that.
    deadline = time.monotonic() + 60
    while "PENDING" not in (state := bed.run(["squeue", "-h", "-j", job_id, "-o", "%T"], timeout=60).stdout):
        assert time.monotonic() < deadline, f"the requeued job never became PENDING (it is {state.strip()!r})"
        time.sleep(0.5)
    assert bed.run(["scontrol", "update", f"jobid={job_id}", "StartTime=now"], timeout=60).returncode == 0

    result = bed.wait_for_job(job_id, timeout=JOB_TIMEOUT_S)
    output = (tmp_path / f"{jobs.name}-{job_id}.out").read_text()  # --output=%x-%j.out
    assert (result.state, result.exit_code) == ("COMPLETED", 0), output[-3000:]
    assert output.count(f"job {job_id}: Ray on 3 nodes") == 2, output[-3000:]  # two runs, one output file
    first_run, second_run = output.split(f"job {job_id}: Ray on 3 nodes")[1:]
    assert (f"[train] continuing {experiment} from its last checkpoint (job {job_id} started it; "
            "this is its restart 1 (SLURM_RESTART_COUNT))") in second_run, second_run[-3000:]
    done_before = max(int(n) for n in re.findall(r" iter (\d+) \|", first_run))
    first_iteration, first_steps = map(int, re.search(r" iter (\d+) \| (\d+) env steps", second_run).groups())
    # The trainer says which checkpoint the trial continues from, and the second run starts right after it:
    # the iteration count and the env-step counter go on (a fresh start would say iter 1).
    restored = re.search(r"continues from checkpoint_\d+ \(iteration (\d+)\)", second_run)
    assert restored, second_run[-3000:]
    assert 4 <= int(restored[1]) <= done_before and first_iteration == int(restored[1]) + 1, \
        f"first run to iteration {done_before}; then {second_run[-3000:]}"
    assert first_steps >= REQUEUE_BATCH * first_iteration, second_run[-3000:]
    rows = progress_rows(experiment)
    iterations = [int(row["training_iteration"]) for row in rows]
    assert iterations[-1] == 12 and set(iterations) == set(range(1, 13)), iterations
    # Timings: the work lost, and how long the second run took from its start to its first iteration.
    restarted = rank_logs(tmp_path / "logs" / job_id, 1)[0][0]["time"]  # the second run's first event
    first_new = next(row for row in rows[::-1] if int(row["training_iteration"]) == first_iteration)
    show_timings(capsys, request, iterations_lost=float(done_before - (first_iteration - 1)),
           restart_to_first_new_iteration=float(first_new["timestamp"]) - restarted,
           requeue_to_completed=time.time() - requeued)
    jobs.wait_until_gone(job_id)


@pytest.mark.train
def test_training_survives_its_heads_gcs_and_each_worker_node_lost_in_turn(slurm_testbed, jobs, tmp_path, capsys, request):
    """The head's gcs_server is SIGKILLed after iteration 2 (started again: --gcs-restarts' default), the raylet of
    node 2 after iteration 3, then node 3's: the algorithm runs on the head, so only env runners are lost, and the
    run reaches its 9 iterations with exit 0.

    --no-metrics: with Ray's metrics on, the head's metrics agent and GCS take both of this
    machine's cores once nodes are lost, and iterations slow from ~6 s to 40-60 s (measured).
    """
    bed = slurm_testbed
    log_dir = tmp_path / "logs"
    command = ["srun", f"--job-name={jobs.name}", "-N3", "--ntasks-per-node=1", "--cpus-per-task=2", "--mpi=pmi2",
               f"--chdir={tmp_path}", PYTHON, str(START_RAY), "--log-dir", str(log_dir), "--no-metrics", "--",
               *TRAIN, "--stop-iters", "9", "--stop-reward", "none", "--checkpoint-frequency", "0",
               "--storage-path", str(tmp_path / "results")]
    with open(tmp_path / "srun.out", "w") as out:
        srun = subprocess.Popen(command, env=bed.env(dict(os.environ)), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        killed = {}
        wait_for_text(log_dir, "*/driver.log", re.compile(r" iter 2 \|"))
        (job_dir,) = log_dir.iterdir()
        raylet_of(bed, job_dir, 0, name="gcs_server").send_signal(signal.SIGKILL)
        for rank, after in ((1, 3), (2, 6)):
            wait_for_text(log_dir, "*/driver.log", re.compile(rf" iter {after} \|"))
            (job_dir,) = log_dir.iterdir()
            raylet_of(bed, job_dir, rank).send_signal(signal.SIGKILL)
            killed[rank] = time.time()
        code = srun.wait(timeout=JOB_TIMEOUT_S)
    finally:
        if srun.poll() is None:
            os.killpg(srun.pid, signal.SIGKILL)
            srun.wait(timeout=30)
    ended = time.time()
    jobs.ids.append(job_dir.name)
    driver = (job_dir / "driver.log").read_text()
    assert code == 0, (tmp_path / "srun.out").read_text()[-4000:]
    assert re.search(r"trial \S+: 9 iterations", driver), driver[-3000:]
    assert "note: the head node" not in driver  # the algorithm was placed on the head
    lost = [record["fields"]["peer"] for record in rank_logs(job_dir, 3)[0] if record["event"] == "node_lost"]
    assert lost == [1, 2]
    gcs = [(record["event"], record["fields"]) for record in rank_logs(job_dir, 3)[0] if record["event"].startswith("gcs_")]
    assert [event for event, _ in gcs] == ["gcs_lost", "gcs_back"] and gcs[1][1]["seconds"] < 30, gcs
    iteration_times = [float(t) for t in re.findall(r" iter \d+ \|.*\| (\d+\.\d) s$", driver, re.M)]
    show_timings(capsys, request, node2_lost_to_end=ended - killed[1], node3_lost_to_end=ended - killed[2],
           training_s=iteration_times[-1])
    jobs.wait_until_gone(job_dir.name)
