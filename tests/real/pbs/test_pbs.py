"""The launcher and the job scripts in jobs/ under real PBS (OpenPBS, the testbed of tests/pbs/): qsub as an
ordinary user, ranks started through PBS's TM interface on three hosts, qdel, qrerun, the walltime.

Every test's jobs are deleted at its end, and each test checks by PID that no process of its jobs is left
on any host. Timings are printed (pytest -s).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from mpiray.logs.report.jobdir import read_job

from helpers import JOBS, PYTHON, ROOT, driver_report, field, rank_logs, show_timings, wait_for_text

JOB_TIMEOUT_S = 300
PROBE = ROOT / "tests" / "drivers" / "probe.py"
CHECKPOINT = ROOT / "tests" / "slurm" / "checkpoint_driver.py"
# -k doe: the job's output is written where it goes as the job runs (PBS copies it there at the end otherwise).
THREE_HOSTS = ("-l", "select=3:ncpus=2", "-l", "place=scatter", "-l", "walltime=00:05:00", "-k", "doe")
HYDRA = 'mpiexec -launcher rsh -launcher-exec "$MPIRAY_DIR/jobs/pbs_tmrsh.sh" -f "$PBS_NODEFILE" -n $nodes -ppn 1'
# Open MPI's, as jobs/pbs_multi_node.sh says to set it (the environment of `bash tests/envs.sh pbs-openmpi`).
OPEN_MPI = ('mpirun --mca plm_rsh_agent "$MPIRAY_DIR/jobs/pbs_tmrsh.sh" --hostfile "$PBS_NODEFILE" -np $nodes '
            '--map-by ppr:1:node')
OPEN_MPI_HERE = (Path(PYTHON).parent / "ompi_info").exists()


def short(job_id: str) -> str:
    return job_id.split(".")[0]  # "12.mpiray-pbs-server" -> "12": the job's log dir


def job_output(workdir: Path, job_id: str) -> str:
    return "".join(path.read_text(errors="replace") for path in workdir.glob(f"*.o{short(job_id)}"))


def test_a_three_host_job_is_one_ray_node_per_host_and_ends_with_the_drivers_code(pbs_testbed, pbs_jobs, capsys,
                                                                                   request):
    driver = [PYTHON, str(PROBE), "--exit", "3"]
    submitted = time.monotonic()
    launcher = {"MPIEXEC": OPEN_MPI} if OPEN_MPI_HERE else {}  # else the script's own: MPICH's hydra
    job_id = pbs_jobs.submit(JOBS / "pbs_multi_node.sh", *THREE_HOSTS, variables=pbs_jobs.variables(driver, **launcher))
    record = pbs_testbed.wait_for_job(job_id, JOB_TIMEOUT_S)
    show_timings(capsys, request, qsub_to_finished=time.monotonic() - submitted)
    output = job_output(pbs_jobs.workdir, job_id)
    assert record["Exit_status"] == 3, output[-3000:]
    probe = driver_report(output, "PROBE")
    assert probe["nodes"] == 3 and sorted(probe["ips"]) == pbs_testbed.node_ips
    job_dir = pbs_jobs.workdir / "logs" / short(job_id)
    logs = rank_logs(job_dir, 3)
    assert [records[0]["host"] for records in logs] == pbs_testbed.node_names  # one rank per host, in order
    assert field(logs[0], "rank_started", "scheduler") == "pbs" and field(logs[0], "rank_started", "job_id") == short(job_id)
    assert field(logs[0], "rank_started", "launcher") == ("openmpi" if OPEN_MPI_HERE else "hydra")
    assert [field(records, "resources_given", "cpus") for records in logs] == [2, 2, 2]  # select's ncpus
    # What PBS itself says of the job, read by rank 0 (qstat): its chunks, their CPUs, its walltime.
    facts = [r["fields"] for r in logs[0] if r["event"] == "batch_job"][0]
    assert (facts["job_id"], facts["select"], facts["walltime"]) == (job_id, "3:ncpus=2", 300.0)
    assert facts["cpus"] == dict.fromkeys(pbs_testbed.node_names, 2) and facts["run_count"] == 1
    report = read_job(job_dir)
    assert report.exit_code == 3 and [row.host for row in report.cluster] == pbs_testbed.node_names
    assert report.batch_job is not None and report.batch_job["select"] == "3:ncpus=2"
    assert report.causes[0].cause == "driver_failed"


def test_the_polaris_script_runs_where_only_its_pals_launcher_is_replaced(pbs_testbed, pbs_jobs):
    # As submitted to Polaris but for its queue and size (this testbed has 3 hosts, and a workq), and the
    # launcher line the script names as PALS's.
    variables = pbs_jobs.variables([PYTHON, str(PROBE)], MPIEXEC=HYDRA, GPUS_PER_NODE="0", MPIRAY_INTERFACE="eth0")
    job_id = pbs_jobs.submit(JOBS / "pbs_polaris.sh", "-q", "workq", "-l", "select=3:system=polaris:ncpus=2",
                             variables=variables)
    record = pbs_testbed.wait_for_job(job_id, JOB_TIMEOUT_S)
    output = job_output(pbs_jobs.workdir, job_id)
    assert record["Exit_status"] == 0, output[-3000:]
    assert driver_report(output, "PROBE")["nodes"] == 3
    manifests = [field(records, "node_manifest", "interface") for records in rank_logs(
        pbs_jobs.workdir / "logs" / short(job_id), 3)]
    assert manifests == ["eth0"] * 3  # --interface from MPIRAY_INTERFACE, as hsn0 on Polaris


def test_qdel_gives_the_driver_its_grace_within_kill_delay_and_leaves_nothing(pbs_testbed, pbs_jobs, capsys, request):
    marker = pbs_jobs.workdir / "checkpoint.json"
    driver = [PYTHON, str(CHECKPOINT), str(marker), "--save-seconds", "3"]
    job_id = pbs_jobs.submit(JOBS / "pbs_multi_node.sh", *THREE_HOSTS,
                             variables=pbs_jobs.variables(driver, MPIRAY_STOP_GRACE="15"))
    wait_for_text(pbs_jobs.workdir, f"*.o{short(job_id)}", "READY 3 nodes", JOB_TIMEOUT_S)
    deleted = time.time()
    assert pbs_testbed.run(["qdel", job_id], timeout=30).returncode == 0
    record = pbs_testbed.wait_for_job(job_id, JOB_TIMEOUT_S)
    finished = time.time()
    pbs_jobs.wait_until_gone(job_id)
    saved = json.loads(marker.read_text())  # the driver saved its checkpoint before PBS's SIGKILL
    show_timings(capsys, request, qdel_to_driver_sigterm=saved["sigterm"] - deleted,
                 qdel_to_finished=finished - deleted, qdel_to_no_process=time.time() - deleted)
    assert saved["saved"] - deleted < 15 < 30  # within --stop-grace, itself below the queue's kill_delay
    assert record["Exit_status"] in (143, 256 + 15)  # the ranks' 128+SIGTERM, or PBS's own for a signalled script


def test_two_jobs_of_one_user_share_the_hosts_at_once(pbs_testbed, pbs_jobs):
    # Each job's driver waits until the other's cluster is up too: both ran on the same hosts at once.
    driver = pbs_jobs.workdir / "wait_for_both.py"
    driver.write_text(
        "import pathlib, sys, time, ray\n"
        "ray.init()\n"
        "here = pathlib.Path(sys.argv[0]).parent\n"
        "(here / ('up-' + sys.argv[1])).touch()\n"
        "deadline = time.time() + 120\n"
        "while len(list(here.glob('up-*'))) < 2 and time.time() < deadline:\n"
        "    time.sleep(0.2)\n"
        "print('NODES', len(ray.nodes()), 'BOTH', len(list(here.glob('up-*'))))\n")
    ids = [pbs_jobs.submit(JOBS / "pbs_multi_node.sh", *THREE_HOSTS,
                           variables=pbs_jobs.variables([PYTHON, str(driver), str(n)])) for n in (1, 2)]
    for job_id in ids:
        record = pbs_testbed.wait_for_job(job_id, JOB_TIMEOUT_S)
        assert record["Exit_status"] == 0, job_output(pbs_jobs.workdir, job_id)[-3000:]
        assert "NODES 3 BOTH 2" in job_output(pbs_jobs.workdir, job_id)
    hosts = [{chunk.split("/")[0] for chunk in pbs_testbed.job(job_id)["exec_host"].split("+")} for job_id in ids]
    assert hosts[0] == hosts[1] == set(pbs_testbed.node_names)  # "mpiray-pbs1/0*2+...", "mpiray-pbs1/1*2+..."


def test_a_select_without_ncpus_is_named_as_the_cause(pbs_testbed, pbs_jobs):
    # The trainer asks for more CPUs than PBS gave: one per chunk, its default when select names no ncpus.
    driver = [PYTHON, "-m", "train", "--num-env-runners", "4", "--stop-iters", "1"]
    job_id = pbs_jobs.submit(JOBS / "pbs_multi_node.sh", "-l", "select=3", "-l", "place=scatter",
                             variables=pbs_jobs.variables(driver))
    record = pbs_testbed.wait_for_job(job_id, JOB_TIMEOUT_S)
    assert record["Exit_status"] not in (0, None)
    report = read_job(pbs_jobs.workdir / "logs" / short(job_id))
    assert "select_without_ncpus" in [cause.cause for cause in report.causes]
    text = subprocess.run([str(Path(PYTHON).parent / "mpiray"), "logs", str(pbs_jobs.workdir / "logs" / short(job_id))],
                          capture_output=True, text=True, timeout=60).stdout
    # The cause in words and its fix, as `mpiray logs` tells the user.
    assert "PBS's select named no ncpus" in text and "#PBS -l select=N:ncpus=C" in text, text



TRAIN = [PYTHON, "-m", "train", "--train-batch-size", "400", "--fcnet-hiddens", "32"]


@pytest.mark.train
def test_a_short_walltime_ends_the_training_with_a_checkpoint_before_pbs_kills_the_job(pbs_testbed, pbs_jobs,
                                                                                        capsys, request):
    # No --time-limit: mpiray reads the walltime from qstat and stops the driver --stop-grace + 30 s before it.
    driver = [*TRAIN, "--stop-iters", "1000", "--stop-reward", "none", "--checkpoint-frequency", "0"]
    job_id = pbs_jobs.submit(JOBS / "pbs_multi_node.sh", "-l", "select=3:ncpus=2", "-l", "place=scatter",
                             "-l", "walltime=00:01:40", "-k", "doe",
                             variables=pbs_jobs.variables(driver, MPIRAY_STOP_GRACE="20"))
    record = pbs_testbed.wait_for_job(job_id, JOB_TIMEOUT_S)
    output = job_output(pbs_jobs.workdir, job_id)
    assert record["Exit_status"] == 124, output[-3000:]  # the walltime's (-29) would be PBS's own kill
    logs = rank_logs(pbs_jobs.workdir / "logs" / short(job_id), 3)
    near = [r for r in logs[0] if r["event"] == "walltime_near"][0]
    assert near["fields"]["margin"] == 20 + 30 and near["time"] < near["fields"]["ends_at"] - 45
    checkpoints = list((pbs_jobs.workdir / "results").glob("*/*/checkpoint_*"))
    assert checkpoints, output[-3000:]  # written on SIGTERM: --checkpoint-frequency 0 writes no other
    show_timings(capsys, request, stopped_before_walltime=near["fields"]["ends_at"] - near["time"],
                 job_s=logs[0][-1]["time"] - logs[0][0]["time"])


@pytest.mark.train
def test_qrerun_continues_the_training_from_its_last_checkpoint(pbs_testbed, pbs_jobs, capsys, request):
    driver = [*TRAIN, "--stop-iters", "6", "--stop-reward", "none", "--checkpoint-frequency", "2"]
    job_id = pbs_jobs.submit(JOBS / "pbs_multi_node.sh", *THREE_HOSTS, variables=pbs_jobs.variables(driver))
    results = pbs_jobs.workdir / "results"
    # The first checkpoint (iteration 2): four iterations left, so the first run cannot finish before the qrerun.
    wait_for_text(results, "*/*/checkpoint_000000")
    (experiment,) = results.iterdir()
    rerun = time.time()
    assert pbs_testbed.run(["qrerun", job_id], timeout=120).returncode == 0  # blocks until requeued
    record = pbs_testbed.wait_for_job(job_id, JOB_TIMEOUT_S)
    output = job_output(pbs_jobs.workdir, job_id)
    assert (record["Exit_status"], record["run_count"]) == (0, 2), output[-3000:]
    driver_log = (pbs_jobs.workdir / "logs" / short(job_id) / "driver.log").read_text()
    assert f"continuing {experiment} from its last checkpoint" in driver_log, driver_log[-3000:]
    second_run = driver_log.split(f"continuing {experiment} from its last checkpoint")[1]
    first_iteration = int(re.search(r" iter (\d+) \|", second_run).group(1))
    assert first_iteration >= 3  # restored: a fresh start would be iteration 1
    show_timings(capsys, request, qrerun_to_finished=time.time() - rerun, first_iteration_after_rerun=first_iteration)
