"""Spare hosts on the 3-host Slurm testbed (--spares 1): the cluster starts on two hosts and the third waits. A
fixed-size Ray Train job (a worker per node, FailureConfig(max_failures=1)) steps on through the head's GCS
SIGKILLed and started again; when a worker's raylet is then SIGKILLed the spare starts its node and joins, and the
job resumes from its checkpoint at full size and ends with exit 0."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import pytest

from helpers import JOB_TIMEOUT_S, PYTHON, ROOT, START_RAY, field, rank_logs, show_timings, wait_for, wait_for_text
from slurm.fixture import raylet_of

TRAINER = ROOT / "tests" / "drivers" / "train_with_spare.py"
STEPS = 40  # room after STEP 5 for the GCS's restart and two steps before the raylet's kill


@pytest.mark.train
def test_a_spare_takes_a_lost_nodes_place_and_ray_train_resumes_at_full_size(slurm_testbed, jobs, tmp_path, capsys,
                                                                              request):
    bed = slurm_testbed
    log_dir, record = tmp_path / "logs", tmp_path / "record"
    record.mkdir()
    command = ["srun", f"--job-name={jobs.name}", "-N3", "--ntasks-per-node=1", "--cpus-per-task=2", "--mpi=pmi2",
               f"--chdir={tmp_path}", PYTHON, str(START_RAY), "--log-dir", str(log_dir), "--spares", "1",
               "--dashboard", "--no-metrics", "--", PYTHON, str(TRAINER), "--workers", "2", "--steps", str(STEPS),
               "--pause", "0.2", "--record", str(record), "--storage", str(tmp_path / "results")]
    with open(tmp_path / "srun.out", "w") as out:
        srun = subprocess.Popen(command, env=bed.env(dict(os.environ)), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        wait_for_text(log_dir, "*/driver.log", re.compile(r"^.*STEP 5$", re.M))
        (job_dir,) = log_dir.iterdir()
        # First the head's GCS: it comes back (--gcs-restarts), and Ray Train's workers step on through it.
        raylet_of(bed, job_dir, rank=0, name="gcs_server").send_signal(signal.SIGKILL)
        wait_for_text(job_dir, "rank-0000.jsonl", '"gcs_back"')
        # Steps go on, but their prints no longer reach driver.log: Ray's log stream to the driver does not
        # survive a GCS that is back within a second (they stay in the workers' logs). So by their checkpoints.
        checkpoints = len(list((tmp_path / "results" / "spare").glob("checkpoint_*")))
        assert wait_for(lambda: len(list((tmp_path / "results" / "spare").glob("checkpoint_*"))) >= checkpoints + 2,
                        JOB_TIMEOUT_S), "no step after the GCS came back"
        raylet_of(bed, job_dir, rank=1).send_signal(signal.SIGKILL)
        killed = time.time()
        code = srun.wait(timeout=JOB_TIMEOUT_S)
    finally:
        if srun.poll() is None:
            os.killpg(srun.pid, signal.SIGKILL)
            srun.wait(timeout=30)
    jobs.ids.append(job_dir.name)
    output = (tmp_path / "srun.out").read_text()
    assert code == 0, output[-4000:]
    assert json.loads(output.split("SPARE ", 1)[1].splitlines()[0]) == {"step": STEPS - 1, "error": None}
    ranks = rank_logs(job_dir, 3)
    assert field(ranks[0], "spares_chosen", "hosts") == bed.node_names[2]
    assert [r["event"] for r in ranks[2] if r["event"].startswith("spare_")] == ["spare_waiting", "spare_started"]
    gcs = [(r["event"], r["fields"]) for r in ranks[0] if r["event"] in ("gcs_lost", "gcs_back")]
    assert [event for event, _ in gcs] == ["gcs_lost", "gcs_back"] and gcs[1][1]["seconds"] < 30, gcs
    assert field(ranks[0], "node_lost", "peer") == 1
    assert field(ranks[0], "spare_activated", "ranks") == [2]
    joined = next(r for r in ranks[0] if r["event"] == "spare_joined")
    assert joined["fields"]["peer"] == 2 and joined["fields"]["ip"] == bed.node_ips[2]
    attempts = [{**json.loads(path.read_text()), "at": path.stat().st_mtime} for path in sorted(record.iterdir())]
    first = sorted(a["node"] for a in attempts if a["resumed_from"] == 0)
    resumed = [a for a in attempts if a["resumed_from"] > 0]
    assert first == bed.node_ips[:2]  # the spare's host ran nothing at first
    assert sorted(a["node"] for a in resumed) == [bed.node_ips[0], bed.node_ips[2]], attempts  # full size again
    assert {(a["world"], a["resumed_from"]) for a in resumed} == {(2, resumed[0]["resumed_from"])}  # one checkpoint
    # Ray Train restarts its workers once it has shut the failed group down: it may wait up to 30 s for the lost
    # worker's process group (TORCH_PROCESS_GROUP_SHUTDOWN_TIMEOUT_S), so lost_to_resumed varies (12-60 s seen).
    show_timings(capsys, request, lost_to_spare_joined=joined["time"] - killed, spare_start=joined["fields"]["seconds"],
                 lost_to_resumed=min(a["at"] for a in resumed) - killed)
    jobs.wait_until_gone(job_dir.name)
