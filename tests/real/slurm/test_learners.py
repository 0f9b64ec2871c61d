"""Learning on every node of the job, on the 3-host Slurm testbed: RLlib's remote learners spread over the
hosts (one per learner slot), torch's gloo over the network each node advertises (GLOO_SOCKET_IFNAME, set
by mpiray per node), what cannot be placed refused at once, and a lost learner node named as the cause, the
training continuing from its checkpoint (a user's own RLlib script with learners on several hosts and nothing
set: tests/real/slurm/test_elastic.py). Other Ray workloads as drivers: the Ray Train (torch DDP) and Ray Tune
recipes of jobs/recipes/, by the sbatch lines they print.

Each runs real RLlib training over real srun; together they take a few minutes on 2 cores.
"""

from __future__ import annotations

import re
import shlex
import time
from pathlib import Path

import psutil
import pytest

from mpiray.logs.events import read_events
from mpiray.logs.report.jobdir import read_job
from train.run import LOST_NODE_SIGNS

from helpers import JOB_TIMEOUT_S, PYTHON, ROOT, driver_report, exit_codes, rank_events

pytestmark = pytest.mark.train
RECIPES = ROOT / "jobs" / "recipes"
LEARNERS_LINE = re.compile(r"^\[train\] learners: (\d+) on (\d+) nodes: (.*)$", re.M)
PROGRESS = re.compile(r"^\[train\] \S+ iter (\d+) \| \d+ env steps \| return ([\d.]+)", re.M)


def trainer(tmp_path: Path, *flags: str) -> list[str]:
    return [PYTHON, "-m", "train", "--storage-path", str(tmp_path / "results"), *flags]


def job_dir_of(tmp_path: Path, jobs) -> Path:
    (job_dir,) = [d for d in (tmp_path / "logs").iterdir() if (d / "rank-0000.jsonl").exists()]
    jobs.ids.append(job_dir.name)
    return job_dir


@pytest.mark.timeout(JOB_TIMEOUT_S * 2)
def test_ppo_with_a_cpu_learner_on_each_host_trains_over_the_hosts_network(slurm_testbed, jobs, tmp_path):
    bed = slurm_testbed
    result = bed.run(jobs.srun(tmp_path, 3, "--", *trainer(tmp_path, "--num-learners", "3", "--stop-reward", "60",
                                                                "--stop-iters", "25")), timeout=JOB_TIMEOUT_S * 2)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    (placed,) = LEARNERS_LINE.findall(output)  # as the learners themselves said
    assert placed[:2] == ("3", "3") and sorted(placed[2].split(", ")) == bed.node_ips
    returns = [float(value) for _, value in PROGRESS.findall(output)]
    assert returns[-1] >= 60 > returns[0], returns  # it learned: the stop reward, from below it
    job_dir = job_dir_of(tmp_path, jobs)
    report = read_job(job_dir)
    assert [(e["fields"]["count"], e["fields"]["nodes"]) for e in report.driver_events
            if e["event"] == "learners_placed"] == [(3, 3)]
    assert {m["collectives"]["GLOO_SOCKET_IFNAME"] for m in report.manifests.values()} == {"eth0"}
    jobs.wait_until_gone(job_dir.name)


@pytest.mark.timeout(JOB_TIMEOUT_S * 2)
def test_dqn_with_two_learners_on_two_hosts(slurm_testbed, jobs, tmp_path):
    bed = slurm_testbed
    result = bed.run(jobs.srun(tmp_path, 2, "--", *trainer(tmp_path, "--run", "DQN", "--num-learners", "2",
                                                                "--stop-iters", "1")), timeout=JOB_TIMEOUT_S * 2)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    (placed,) = LEARNERS_LINE.findall(output)
    assert placed[:2] == ("2", "2") and set(placed[2].split(", ")) <= set(bed.node_ips)
    jobs.wait_until_gone(job_dir_of(tmp_path, jobs).name)


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
def test_a_lost_learner_node_fails_the_training_with_its_cause_and_a_rerun_continues(slurm_testbed, jobs, tmp_path):
    """RLlib does not restart learners: SIGKILL of the raylet of a node that holds one fails the trial. The
    trainer exits 1 after its last checkpoint, `mpiray logs` names learner_node_lost, and the same command
    with --resume continues from that checkpoint."""
    bed = slurm_testbed
    flags = ["--num-learners", "3", "--stop-iters", "6", "--stop-reward", "none", "--train-batch-size", "1000"]
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
        raylet = _raylet_of(job_dir, rank=2)  # a learner is on every host: the third host's holds one
        raylet.kill()
        assert first.wait(JOB_TIMEOUT_S) == 1, out.read_text()[-3000:]
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(30)
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

    again = bed.run(jobs.srun(tmp_path, 3, "--", *trainer(tmp_path, *flags, "--resume")), timeout=JOB_TIMEOUT_S * 2)
    output = again.stdout + again.stderr
    assert again.returncode == 0, output[-3000:]
    assert "continuing" in output and "from its last checkpoint" in output
    iterations = [int(number) for number, _ in PROGRESS.findall(output)]
    assert iterations[0] >= 3 and iterations[-1] == 6  # on from the checkpoint of iteration 2, not from 1
    jobs.wait_until_gone(job_dir_of_newest(tmp_path, jobs).name)


def _raylet_of(job_dir: Path, rank: int) -> psutil.Process:
    pids = [pid for record in read_events(job_dir / f"rank-{rank:04d}.jsonl") if record["event"] == "node_pids"
            for pid in record["fields"]["pids"]]
    for pid in pids:
        try:
            process = psutil.Process(pid)
            if process.name() == "raylet":
                return process
        except psutil.Error:
            continue
    pytest.fail(f"no raylet among rank {rank}'s node's processes {pids}")


def job_dir_of_newest(tmp_path: Path, jobs) -> Path:
    job_dir = max((d for d in (tmp_path / "logs").iterdir() if (d / "rank-0000.jsonl").exists()),
                  key=lambda d: d.stat().st_mtime)
    jobs.ids.append(job_dir.name)
    return job_dir


def recipe_line(recipe: Path) -> str:
    """The sbatch line a recipe's docstring prints."""
    (line,) = [line.strip() for line in recipe.read_text().splitlines() if "sbatch " in line]
    return line


SITE_LINES = {  # what slurm_multi_node.sh marks as the site's own, as this testbed has it
    "#SBATCH --partition=standard": "#SBATCH --partition={partition}",
    "#SBATCH --cpus-per-task=36": "#SBATCH --cpus-per-task=2",
}


def submit_as_printed(bed, jobs, tmp_path: Path, line: str) -> tuple[str, str]:
    """line (`[VAR=value ...] sbatch ... jobs/SCRIPT [args]`), run as printed from a submit dir whose jobs/ is this
    checkout's, with the script's site lines (its partition, a node's CPUs: Slurm 22.05 reads no variable for
    --cpus-per-task) filled in as this testbed has them. Returns (the job id, its output)."""
    jobs_dir = tmp_path / "jobs"
    jobs_dir.mkdir()
    for path in (ROOT / "jobs").iterdir():
        (jobs_dir / path.name).symlink_to(path)
    script = jobs_dir / "slurm_multi_node.sh"
    text = script.read_text()
    for printed, here in SITE_LINES.items():
        assert printed in text, f"jobs/slurm_multi_node.sh no longer has {printed!r}"
        text = text.replace(printed, here.format(partition=bed.partition))
    script.unlink()
    script.write_text(text)
    words = shlex.split(line)
    settings = dict(word.split("=", 1) for word in words[:words.index("sbatch")])
    env = jobs.env(tmp_path, [], **settings)
    del env["MPIRAY_DRIVER"]  # the driver is the line's
    submitted = bed.login(words[words.index("sbatch"):], env=env, cwd=tmp_path, timeout=60)
    assert submitted.returncode == 0, submitted.stderr
    job_id = re.fullmatch(r"Submitted batch job (\d+)\n", submitted.stdout)[1]
    jobs.ids.append(job_id)
    result = bed.wait_for_job(job_id, timeout=JOB_TIMEOUT_S)
    output = (tmp_path / f"ray-multi-node-{job_id}.out").read_text()
    assert (result.state, result.exit_code) == ("COMPLETED", 0), output[-3000:]
    return job_id, output


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
