"""Clusters across PBS jobs, on the PBS testbed (tests/pbs/): an elastic cluster grows with qsub worker
jobs on Ray's demand and they go with it (qdel, SIGKILL), a qdel'ed worker job is replaced, a worker job
drains before its own walltime, and another job joins a cluster that `mpiray list` and `attach` reach.
Every job runs as the testbed's ordinary user, whose registry is the one of the test's submit dir."""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import time
from pathlib import Path

import pytest

from mpiray.logs.events import read_events
from mpiray.logs.report.jobdir import read_job

from helpers import JOBS, PYTHON, ROOT, driver_report, events_of, show_timings, tagged_lines, wait_for_events
from pbs import testbed

JOB_TIMEOUT_S = 300
AUTOSCALER_LOG = "autoscaler-rank-0000.jsonl"  # rank 0's autoscaler's events
DRIVER = ROOT / "tests" / "slurm" / "elastic_driver.py"
ONE_HOST = ("-l", "select=1:ncpus=2", "-l", "walltime=00:10:00", "-k", "doe")


def short(job_id: str) -> str:
    return job_id.split(".")[0]


def own(path: Path, user: str) -> Path:
    account = pwd.getpwnam(user)
    os.chown(path, account.pw_uid, account.pw_gid)
    return path


@pytest.fixture
def elastic(pbs_testbed, pbs_jobs):
    """The test's registry and worker job template, both the testbed user's."""
    registry = pbs_jobs.workdir / "registry"
    registry.mkdir(mode=0o700)
    own(registry, pbs_testbed.user)
    template = pbs_jobs.workdir / "worker.sh"
    template.write_text(f"#PBS -l walltime=00:10:00\nsource {Path(PYTHON).parent / 'activate'}\n")
    return registry, template


def elastic_variables(pbs_jobs, registry: Path, template: Path, *driver: str, **extra: str) -> dict[str, str]:
    return pbs_jobs.variables([PYTHON, str(DRIVER), *driver], **{
        "MIN_NODES": "1", "MAX_NODES": "3", "WORKER_CPUS": "1", "WORKER_TEMPLATE": str(template), "COOLDOWN": "20",
        "MPIRAY_REGISTRY": str(registry), **extra})


def worker_jobs(bed: testbed.Testbed, cluster: str) -> dict[str, str]:
    """job id -> job_state of the cluster's worker jobs that PBS has not finished."""
    result = bed.run(["qstat", "-f", "-F", "json"], timeout=60)
    jobs = json.loads(result.stdout or "{}").get("Jobs", {}) if result.returncode == 0 else {}
    return {job: record["job_state"] for job, record in jobs.items()
            if record.get("Job_Name", "").startswith(f"mpiray-{cluster}-w") and record["job_state"] != "F"}


def wait_until_no_worker_job(bed: testbed.Testbed, cluster: str, timeout: float) -> float:
    started = time.monotonic()
    while worker_jobs(bed, cluster) and time.monotonic() - started < timeout:
        time.sleep(0.5)
    assert not worker_jobs(bed, cluster), worker_jobs(bed, cluster)
    return time.monotonic() - started


def autoscaler_events(job_dir: Path) -> list[tuple[str, dict]]:
    return [(r["event"], r["fields"]) for r in events_of(job_dir / AUTOSCALER_LOG)]


def test_the_elastic_script_grows_to_three_nodes_with_worker_jobs_and_they_go_with_it(pbs_testbed, pbs_jobs, elastic,
                                                                                      capsys, request):
    registry, template = elastic
    job_id = pbs_jobs.submit(JOBS / "pbs_elastic.sh", *ONE_HOST,
                             variables=elastic_variables(pbs_jobs, registry, template, "spread", "3"))
    record = pbs_testbed.wait_for_job(job_id, JOB_TIMEOUT_S)
    ended = time.monotonic()
    output = "".join(p.read_text() for p in pbs_jobs.workdir.glob(f"*.o{short(job_id)}"))
    assert record["Exit_status"] == 0, output[-3000:]
    ready, ran = tagged_lines(output, "ELASTIC")
    assert ready["placement_group_ready"] and ready["nodes"] == 3 and ran == {"ran_on": 3}
    job_dir = pbs_jobs.workdir / "logs" / short(job_id)
    submitted = [fields["job"] for name, fields in autoscaler_events(job_dir) if name == "job_submitted"]
    assert len(submitted) == 2 and all(job.endswith(pbs_testbed.server) for job in submitted)  # qsub's ids
    gone = wait_until_no_worker_job(pbs_testbed, short(job_id), 60) + (time.monotonic() - ended)
    assert max(count for _, count in read_job(job_dir).nodes_over_time) == 3
    joined = [fields["seconds"] for name, fields in autoscaler_events(job_dir) if name == "node_joined"]
    show_timings(capsys, request, submit_to_joined_max=max(joined), head_end_to_no_worker_job=gone)
    for worker in submitted:
        pbs_jobs.ids.append(worker)
    assert gone < 60


def test_a_deleted_worker_job_is_replaced_while_the_work_goes_on(pbs_testbed, pbs_jobs, elastic):
    registry, template = elastic
    job_id = pbs_jobs.submit(JOBS / "pbs_elastic.sh", *ONE_HOST,
                             variables=elastic_variables(pbs_jobs, registry, template, "tasks"))
    job_dir = pbs_jobs.workdir / "logs" / short(job_id)
    victim = wait_for_events(job_dir / AUTOSCALER_LOG, "node_joined", 2, JOB_TIMEOUT_S)[0]["job"]
    assert pbs_testbed.run(["qdel", victim], timeout=60).returncode == 0
    record = pbs_testbed.wait_for_job(job_id, JOB_TIMEOUT_S * 2)
    output = "".join(p.read_text() for p in pbs_jobs.workdir.glob(f"*.o{short(job_id)}"))
    assert record["Exit_status"] == 0, output[-3000:]
    assert driver_report(output, "ELASTIC")["total"] == sum(i * i for i in range(8))  # every task, retried
    events = autoscaler_events(job_dir)
    assert ("worker_job_ended", victim) in [(name, fields.get("job")) for name, fields in events]
    assert sum(name == "job_submitted" for name, _ in events) >= 3  # the deleted one was replaced
    pbs_jobs.ids += [fields["job"] for name, fields in events if name == "job_submitted"]
    wait_until_no_worker_job(pbs_testbed, short(job_id), 60)


@pytest.mark.parametrize("how", ["qdel", "sigkill"])
def test_the_worker_jobs_go_within_a_minute_when_the_head_job_does(pbs_testbed, pbs_jobs, elastic, how):
    registry, template = elastic
    job_id = pbs_jobs.submit(JOBS / "pbs_elastic.sh", *ONE_HOST,
                             variables=elastic_variables(pbs_jobs, registry, template, "spread", "3", "600"))
    job_dir = pbs_jobs.workdir / "logs" / short(job_id)
    workers = [fields["job"] for fields in wait_for_events(job_dir / AUTOSCALER_LOG, "node_joined", 2, JOB_TIMEOUT_S)]
    pbs_jobs.ids += workers
    if how == "qdel":
        assert pbs_testbed.run(["qdel", job_id], timeout=60).returncode == 0
    else:  # every process of the head job at once: nobody of it cancels anything
        for pid in testbed.job_processes(pbs_testbed, job_id):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert wait_until_no_worker_job(pbs_testbed, short(job_id), 60) < 60


def test_a_worker_job_drains_before_its_walltime_and_is_replaced_while_demand_remains(pbs_testbed, pbs_jobs, elastic,
                                                                                     capsys, request):
    registry, _ = elastic
    template = pbs_jobs.workdir / "short-worker.sh"
    # 100 s: the worker job's rank 0 drains its node --stop-grace (the head job's, passed on: 8 here) + 30 s
    # before PBS would kill it.
    template.write_text(f"#PBS -l walltime=00:01:40\nsource {Path(PYTHON).parent / 'activate'}\n")
    marker = pbs_jobs.workdir / "enough"
    job_id = pbs_jobs.submit(JOBS / "pbs_elastic.sh", *ONE_HOST,
                             variables=elastic_variables(pbs_jobs, registry, template, "busy", str(marker),
                                                         COOLDOWN="120"))
    job_dir = pbs_jobs.workdir / "logs" / short(job_id)
    deadline = time.monotonic() + 100 + JOB_TIMEOUT_S
    replaced = ended = None
    while replaced is None and time.monotonic() < deadline:
        events = autoscaler_events(job_dir)
        order = [fields.get("job") for name, fields in events if name == "job_submitted"]
        ended = next((f["job"] for name, f in events if name == "worker_job_ended"), None)
        if ended:
            replaced = next((f["job"] for name, f in events if name == "node_joined" and order.index(f["job"]) >= 2),
                            None)  # a third worker job's node joined
        time.sleep(0.5)
    marker.touch()
    pbs_jobs.ids += [fields["job"] for name, fields in autoscaler_events(job_dir) if name == "job_submitted"]
    assert replaced, f"no worker job ended and was replaced: {autoscaler_events(job_dir)}"
    assert pbs_testbed.wait_for_job(job_id, JOB_TIMEOUT_S)["Exit_status"] == 0
    # The ended worker job stopped itself before PBS's walltime kill (Exit_status -29): 124, after draining.
    assert pbs_testbed.wait_for_job(ended, 60)["Exit_status"] == 124
    (join_log,) = job_dir.glob(f"join-{short(ended)}-rank-0000.jsonl")
    near = [r for r in read_events(join_log) if r["event"] == "walltime_near"]
    assert near and near[0]["fields"]["margin"] == 8 + 30
    at = {(r["event"], r["fields"].get("job")): r["time"] for r in read_events(job_dir / "autoscaler-rank-0000.jsonl")}
    show_timings(capsys, request, stopped_before_walltime=near[0]["fields"]["ends_at"] - near[0]["time"],
                 job_gone_to_replacement_joined=at["node_joined", replaced] - at["worker_job_ended", ended])
    wait_until_no_worker_job(pbs_testbed, short(job_id), 60)


def test_another_job_joins_and_a_shell_lists_and_attaches_as_the_same_user(pbs_testbed, pbs_jobs, elastic):
    registry, _ = elastic
    marker = pbs_jobs.workdir / "go"
    head = pbs_jobs.submit(JOBS / "pbs_multi_node.sh", *ONE_HOST, variables=pbs_jobs.variables(
        [PYTHON, str(DRIVER), "wait-nodes", "3", str(marker)], MPIRAY_REGISTRY=str(registry)))
    cluster = short(head)
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not (registry / f"{cluster}.json").exists() and time.monotonic() < deadline:
        time.sleep(0.3)
    joiner = pbs_jobs.submit(JOBS / "pbs_multi_node.sh", "-l", "select=2:ncpus=1", "-l", "place=scatter", "-k", "doe",
                             variables=pbs_jobs.variables(MPIRAY_REGISTRY=str(registry), MPIRAY_JOIN=cluster,
                                                          MPIRAY_DRIVER=""))  # no driver: its nodes serve
    mpiray = [str(Path(PYTHON).parent / "mpiray")]
    shell_env = {"MPIRAY_REGISTRY": str(registry), "PATH": f"{Path(PYTHON).parent}:/usr/bin:/bin"}

    def as_user(*args: str) -> subprocess.CompletedProcess:
        return pbs_testbed.run(["env", *(f"{k}={v}" for k, v in shell_env.items()), *mpiray, *args], timeout=120,
                               user=pbs_testbed.user, cwd=pbs_jobs.workdir)

    deadline = time.monotonic() + JOB_TIMEOUT_S
    while time.monotonic() < deadline:
        listed = json.loads(as_user("list", "--json").stdout or "[]")
        if listed and listed[0]["total_nodes"] == 3:
            break
        time.sleep(1)
    assert [(c["job_id"], c["total_nodes"], len(c["joins"]), c["scheduler"]) for c in listed] == [(cluster, 3, 1, "pbs")]
    assert listed[0]["ends_at"]  # its walltime, read from qstat
    attached = as_user("attach", cluster, "--", PYTHON, str(DRIVER), "count")
    assert attached.returncode == 0, attached.stderr
    assert driver_report(attached.stdout, "ELASTIC")["nodes"] == 3
    marker.touch()
    assert pbs_testbed.wait_for_job(head, JOB_TIMEOUT_S)["Exit_status"] == 0
    assert pbs_testbed.wait_for_job(joiner, 60)["Exit_status"] == 0  # it saw the cluster end, and left
