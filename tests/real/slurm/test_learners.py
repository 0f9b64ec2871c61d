"""Learning on every node of the job, on the 3-host Slurm testbed: RLlib's remote learners spread over the
hosts (one per learner slot), torch's gloo over the network each node advertises (GLOO_SOCKET_IFNAME, set
by mpiray per node), what cannot be placed refused at once, and a lost learner node: the training continuing
from its checkpoint in the job on a spare's node, or, with none, named as the cause and continued by a rerun
(a user's own RLlib script with learners on several hosts and nothing set: tests/real/slurm/test_elastic.py).
Other Ray workloads as drivers: the Ray Train (torch DDP) and Ray Tune recipes of jobs/recipes/, by the sbatch
lines they print.

Each runs real RLlib training over real srun; together they take a few minutes on 2 cores.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import psutil
import pytest

from mpiray.logs.events import read_events
from mpiray.logs.report.jobdir import read_job
from train.run import LOST_NODE_SIGNS

import netns
from helpers import JOB_TIMEOUT_S, PYTHON, ROOT, driver_report, exit_codes, rank_events, show_timings
from slurm import testbed
from slurm.fixture import raylet_of
from slurm.recipes import recipe_line, submit_as_printed

pytestmark = pytest.mark.train
RECIPES = ROOT / "jobs" / "recipes"
LEARNERS_LINE = re.compile(r"^\[train\] learners: (\d+) on (\d+) nodes: (.*)$", re.M)
ENV_RUNNERS_LINE = re.compile(r"^\[train\] env runners: (\d+) on (\d+) nodes: (.*)$", re.M)
PROGRESS = re.compile(r"^\[train\] \S+ iter (\d+) \| \d+ env steps \| return ([\d.]+)", re.M)


def trainer(tmp_path: Path, *flags: str) -> list[str]:
    return [PYTHON, "-m", "train", "--storage-path", str(tmp_path / "results"), *flags]


def job_dir_of(tmp_path: Path, jobs) -> Path:
    (job_dir,) = [d for d in (tmp_path / "logs").iterdir() if (d / "rank-0000.jsonl").exists()]
    jobs.ids.append(job_dir.name)
    return job_dir


@pytest.mark.timeout(JOB_TIMEOUT_S * 2)
def test_dqn_with_two_learners_on_the_trainer_ranks_hosts_and_env_runners_on_the_rollout_ranks(slurm_testbed, jobs,
                                                                                                tmp_path):
    """Pools by rank range (--role trainer=0-1,rollout=2): the learners on the trainer nodes (--learners-on), the env
    runners, as many as the rollout node's CPUs, on the rollout node (--env-runners-on), as they themselves said."""
    bed = slurm_testbed
    result = bed.run(jobs.srun(tmp_path, 3, "--role", "trainer=0-1,rollout=2", "--", *trainer(
        tmp_path, "--run", "DQN", "--num-learners", "2", "--learners-on", "trainer", "--env-runners-on", "rollout",
        "--stop-iters", "1")), timeout=JOB_TIMEOUT_S * 2)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    report = read_job(job_dir_of(tmp_path, jobs))
    ip = {int(rank): manifest["ip"] for rank, manifest in report.manifests.items()}
    (learners,) = LEARNERS_LINE.findall(output)
    assert learners[:2] == ("2", "2") and sorted(learners[2].split(", ")) == sorted([ip[0], ip[1]])
    (runners,) = ENV_RUNNERS_LINE.findall(output)
    assert runners[:2] == ("2", "1") and runners[2].split(", ") == [ip[2], ip[2]]
    jobs.wait_until_gone(report.job_id)


def test_more_learners_than_the_nodes_hold_is_refused_in_seconds_with_what_fits(slurm_testbed, jobs, tmp_path):
    bed = slurm_testbed
    started = time.monotonic()
    result = bed.run(jobs.srun(tmp_path, 3, "--", *trainer(tmp_path, "--num-learners", "4")), timeout=JOB_TIMEOUT_S)
    took = time.monotonic() - started
    assert result.returncode == 2, (result.stdout + result.stderr)[-3000:]
    assert "4 learners, but the cluster's nodes can hold 3" in result.stderr and "--num-learners 3 or fewer" in \
        result.stderr
    assert took < 60, f"it took {took:.0f} s to say so"  # the cluster's start and the trainer's imports, no waiting
    jobs.wait_until_gone(job_dir_of(tmp_path, jobs).name)


@pytest.mark.timeout(JOB_TIMEOUT_S * 4)
def test_a_lost_learner_node_with_no_node_in_its_place_ends_the_trainer_with_1_after_the_wait(slurm_testbed, jobs,
                                                                                              tmp_path):
    """RLlib does not restart learners: SIGKILL of the raylet of a node that holds one ends the trial. With no node
    to take its place, the trial waits --restore-wait for one, then the trainer exits 1 after its last checkpoint,
    saying what the cluster lacks, and `mpiray logs` names learner_node_lost. (A rerun continues from the
    checkpoint by the same Tuner.restore as the restore in the job: the spare test below; --resume's choice of
    experiment: tests/unit/test_requeue.py.)"""
    bed = slurm_testbed
    flags = ["--num-learners", "3", "--stop-iters", "6", "--stop-reward", "none", "--train-batch-size", "1000",
             "--restore-wait", "3"]
    argv = jobs.srun(tmp_path, 3, "--", *trainer(tmp_path, *flags))
    out = tmp_path / "first.out"
    with open(out, "w") as sink:
        first = psutil.Popen(argv, env=bed.env(), stdout=sink, stderr=sink)
    try:
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while not list((tmp_path / "results").glob("*/*/checkpoint_000001")):  # the second checkpoint
            assert first.poll() is None and time.monotonic() < deadline, out.read_text()[-3000:]
            time.sleep(0.5)
        job_dir = job_dir_of(tmp_path, jobs)
        raylet = raylet_of(bed, job_dir, rank=2)  # a learner is on every host: the third host's holds one
        raylet.kill()
        assert first.wait(JOB_TIMEOUT_S) == 1, out.read_text()[-3000:]
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(30)
    output = out.read_text()
    assert "(restore 1 of --max-failures 3) once the cluster holds it" in output, output[-3000:]
    assert "not continued in this job: not placed within --restore-wait 3 s" in output, output[-3000:]
    assert "3 learner slots (one node each); the cluster's nodes hold 2" in output  # not the CPUs alone
    assert "give it a spare host (mpiray --spares 1) to continue in the job next time" in output, output[-3000:]
    assert exit_codes(job_dir, 3)[0] == 1
    report = read_job(job_dir)
    assert [cause.cause for cause in report.causes][:1] == ["learner_node_lost"], report.causes
    lost = [r["fields"] for r in read_events(job_dir / "trainer-rank-0000.jsonl") if r["event"] == "learner_node_lost"]
    # Said by the driver's watch (the lost node's address, train/watch.py) or, when an error reached Tune first,
    # by Ray or gloo (the dead actor; a read from the lost node's address that failed): the cause has its evidence.
    error = lost[0]["error"] if lost else ""
    (lost_ip,) = [r["fields"]["ip"] for r in rank_events(job_dir, 2) if r["event"] == "worker_will_connect"]
    assert lost_ip in error or any(sign in error for sign in LOST_NODE_SIGNS), lost
    jobs.wait_until_gone(job_dir.name)


HOST_BACK_WITHIN_S = 60  # from the power loss to the spare's node in the cluster (#61: "back at full size within 60 s")


@pytest.mark.timeout(JOB_TIMEOUT_S * 3)
def test_ppo_learners_over_the_hosts_network_lose_a_host_and_continue_on_the_spare_to_learn_and_exit_0(
        slurm_testbed, jobs, tmp_path, capsys, request):
    """--spares 1 under `srun --no-kill`: PPO's two CPU learners on the head's and the worker's host, in step over the
    hosts' network (gloo on each node's advertised interface), the third host waiting. The worker's host loses power
    after the second checkpoint (every process of it at once: its rank says nothing): rank 0 finds its raylet
    silent, leaves the host out (host_lost) and starts the spare, whose node joins within HOST_BACK_WITHIN_S; the
    trial continues from its checkpoint in the same job, with a learner on the spare's host, until it has learned
    (the stop reward, from below it): the step ends 0, past the host's loss, and nothing of the job is left."""
    bed = slurm_testbed
    lost = bed.nodes[1]
    # No env runner on the lost node: RLlib would run iterations without samples (and so without a call to the
    # lost learner) until the GCS declares the node dead.
    flags = ["--num-learners", "2", "--num-env-runners", "0", "--stop-reward", "60", "--stop-iters", "40",
             "--train-batch-size", "1000"]
    out = tmp_path / "srun.out"
    argv = jobs.srun(tmp_path, 3, "--spares", "1", "--", *trainer(tmp_path, *flags), no_kill=True)
    with open(out, "w") as sink:
        srun = psutil.Popen(argv, env=bed.env(), stdout=sink, stderr=sink)
    try:
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while not list((tmp_path / "results").glob("*/*/checkpoint_000001")):
            assert srun.poll() is None and time.monotonic() < deadline, out.read_text()[-3000:]
            time.sleep(0.5)
        job_dir = job_dir_of(tmp_path, jobs)
        assert [r["host"] for r in rank_events(job_dir, 1)][:1] == [lost.name]
        powered_off = time.time()
        netns.power_off(lost)
        code = srun.wait(JOB_TIMEOUT_S * 2)
    finally:
        if srun.poll() is None:
            srun.kill()
            srun.wait(30)
        testbed.start_slurmd(bed, lost, detach=True)
    output = out.read_text()
    assert code == 0, output[-4000:]
    assert "(restore 1 of --max-failures 3) once the cluster holds it" in output, output[-3000:]
    # Ray's output may go on on the same line: one stream with the trainer's.
    assert re.search(r"^\[train\] trial \S+: continues from checkpoint_\d+ \(iteration [2-9]\)", output, re.M), output
    progress = PROGRESS.findall(output)
    iterations, returns = [int(number) for number, _ in progress], [float(value) for _, value in progress]
    assert iterations.count(1) == 1 and iterations.count(2) == 1, iterations  # on from the checkpoint, not from 1
    assert returns[-1] >= 60 > returns[0], returns  # it learned: the stop reward, from below it
    trainer_log = read_events(job_dir / "trainer-rank-0000.jsonl")
    placed = [r for r in trainer_log if r["event"] == "learners_placed"]  # as the learners themselves said
    assert {(r["fields"]["count"], r["fields"]["nodes"]) for r in placed} == {(2, 2)} and len(placed) >= 2
    assert sorted(placed[0]["fields"]["addresses"].split(", ")) == bed.node_ips[:2]
    assert sorted(placed[-1]["fields"]["addresses"].split(", ")) == [bed.node_ips[0], bed.node_ips[2]]
    report = read_job(job_dir)
    assert {m["collectives"]["GLOO_SOCKET_IFNAME"] for m in report.manifests.values()} == {"eth0"}
    assert exit_codes(job_dir, 3) == [0, None, 0]  # the lost host's rank wrote nothing after its power loss
    zero = rank_events(job_dir, 0)
    (host_lost,) = [r["fields"] for r in zero if r["event"] == "host_lost"]
    assert host_lost["peer_host"] == lost.name and host_lost["ranks"] == [1] and host_lost["silent"] >= 10, host_lost
    assert [r["fields"]["peer_host"] for r in rank_events(job_dir, 2) if r["event"] == "host_lost"] == [lost.name]
    joined = next(r for r in zero if r["event"] == "spare_joined")
    assert joined["time"] - powered_off < HOST_BACK_WITHIN_S, joined["time"] - powered_off
    restore = next(r for r in trainer_log if r["event"] == "trial_restore")
    assert "learner_node_lost" not in [r["event"] for r in trainer_log]  # a loss the restore got over is no cause
    show_timings(capsys, request, lost_to_host_lost=next(r["time"] for r in zero if r["event"] == "host_lost") - powered_off,
                 lost_to_spare_joined=joined["time"] - powered_off, lost_to_restore=restore["time"] - powered_off,
                 lost_to_learners_placed=placed[-1]["time"] - powered_off)
    jobs.wait_until_gone(job_dir.name)
    deadline = time.monotonic() + 120  # the lost host back for the next test: Slurm marked it down meanwhile
    while bed.node_states().get(lost.name) != "idle":
        assert time.monotonic() < deadline, bed.node_states()
        time.sleep(0.5)


@pytest.mark.timeout(JOB_TIMEOUT_S * 3)
def test_the_ray_train_recipe_runs_ddp_with_a_worker_on_each_host_in_step(slurm_testbed, jobs, tmp_path):
    """jobs/recipes/ray_train_ddp.py by its sbatch line: TorchTrainer with 3 workers, one learner slot each, so one
    per host; DDP's gloo on the interface of each node's address; the same weights on every worker after training;
    the checkpoint on the shared storage path. With the dashboard, as the line says: Ray Train 2.60 polls Ray's
    State API, which the dashboard serves, and warns every few seconds where it cannot."""
    bed = slurm_testbed
    line = recipe_line(RECIPES / "ray_train_ddp.py")
    assert line == "MPIRAY_DASHBOARD=1 sbatch -N 3 jobs/slurm_multi_node.sh python jobs/recipes/ray_train_ddp.py " \
        "--workers 3"
    job_id, output = submit_as_printed(bed, jobs, tmp_path, line)
    report = driver_report(output, "RECIPE")
    workers = report["workers"]
    assert sorted(worker["node"] for worker in workers) == bed.node_ips
    assert {worker["gloo"] for worker in workers} == {"eth0"}
    assert len({(worker["weight"], worker["bias"]) for worker in workers}) == 1  # DDP kept them in step
    assert abs(workers[0]["weight"] - 3) < 0.05 and abs(workers[0]["bias"] - 1) < 0.05
    assert (Path(report["checkpoint"]) / "model.pt").is_file()
    assert Path(report["checkpoint"]).is_relative_to(tmp_path / "results")  # the recipe's default, in the submit dir
    assert "Failed to query Ray Train Controller" not in output
    jobs.wait_until_gone(job_id)


@pytest.mark.timeout(JOB_TIMEOUT_S * 3)
def test_the_ray_tune_recipe_runs_its_trials_on_every_host(slurm_testbed, jobs, tmp_path):
    """jobs/recipes/ray_tune_search.py by its sbatch line: 6 one-CPU trials on 3 hosts of 2 CPUs, all at once, so
    on every host; the best of the grid found; no trial failed."""
    bed = slurm_testbed
    line = recipe_line(RECIPES / "ray_tune_search.py")
    assert line == "sbatch -N 3 jobs/slurm_multi_node.sh python jobs/recipes/ray_tune_search.py"
    job_id, output = submit_as_printed(bed, jobs, tmp_path, line)
    report = driver_report(output, "RECIPE")
    assert (report["best_x"], report["trials"], report["errors"]) == (2, 6, 0)
    assert report["nodes"] == bed.node_ips
    jobs.wait_until_gone(job_id)
