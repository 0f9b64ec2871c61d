"""What real PBS taught, tested where no PBS runs: mpiray's reading of OpenPBS 23.06.06's recorded output
(tests/support/pbs_records.py: the 3-host testbed, 2026-11-25) and its qsub/qstat/qdel back end.

Where mpiray runs PBS's commands (rank 0's qstat, the elastic provider's qsub, qstat and qdel), the tests
put executables of those names on PATH that replay the recorded output and log the argv (and stdin) they
were given: PBS does not run here, and replaying what it printed is the honest substitute. So each test
asserts what mpiray asks PBS as well as what it makes of the answer.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from mpiray.batch import environment, pbs
from mpiray.batch.jobs import GONE, PENDING, RUNNING, CommandFailed, WorkerJob
from mpiray.config import Config
from mpiray.logs.events import RankLog, read_events
from mpiray.logs.report.classify import classify
from mpiray.logs.report.jobdir import read_job
from mpiray.logs.report.parse import rank_facts
from mpiray.rank.batchjob import BatchJob, read_batch_job, walltime_stop

import pbs_records as recorded
from helpers import ROOT
from pbs import testbed
from sample_jobs import entry

# Answers what replies.json beside it says for its name and first argument ("qstat -Qf"), else for its
# name alone, and logs {argv, stdin} to calls.jsonl.
REPLAY = """#!{python}
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
name = os.path.basename(sys.argv[0])
stdin = sys.stdin.read() if "-" in sys.argv[1:] else None
with open(os.path.join(here, "calls.jsonl"), "a") as log:
    log.write(json.dumps({{"argv": [name, *sys.argv[1:]], "stdin": stdin}}) + "\\n")
with open(os.path.join(here, "replies.json")) as replies:
    known = json.load(replies)
reply = known.get(" ".join([name, *sys.argv[1:2]])) or known[name]
sys.stdout.write(reply["stdout"])
sys.stderr.write(reply["stderr"])
sys.exit(reply["code"])
"""
COMMANDS = ("qsub", "qstat", "qdel", "pbsnodes")


class ReplayedPbs:
    """PBS's commands in bin_dir, first on PATH: each prints the reply it was given and logs its call."""

    def __init__(self, bin_dir: Path):
        self.bin_dir = bin_dir
        bin_dir.mkdir(parents=True)
        self.replies: dict[str, dict] = {}
        for name in COMMANDS:
            (bin_dir / name).write_text(REPLAY.format(python=sys.executable))
            (bin_dir / name).chmod(0o755)
            self.reply(name)

    def reply(self, name: str, stdout: str = "", stderr: str = "", code: int = 0) -> None:
        """What the command name ("qstat") answers; "qstat -Qf": what it answers when -Qf comes first."""
        self.replies[name] = {"stdout": stdout, "stderr": stderr, "code": code}
        (self.bin_dir / "replies.json").write_text(json.dumps(self.replies))

    def calls(self) -> list[dict]:
        path = self.bin_dir / "calls.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def argvs(self) -> list[list[str]]:
        return [call["argv"] for call in self.calls()]


@pytest.fixture
def replayed(tmp_path, monkeypatch) -> ReplayedPbs:
    commands = ReplayedPbs(tmp_path / "pbs" / "bin")
    commands.reply("qstat -Qf", recorded.QUEUE_WORKQ)  # every recorded job ran in workq
    monkeypatch.setenv("PATH", f"{commands.bin_dir}{os.pathsep}{os.environ['PATH']}")
    return commands


# ---- a job's facts, as PBS showed them --------------------------------------------------------------

MOM_CPUS = {cpus: dict.fromkeys(recorded.MOMS, cpus) for cpus in (1, 2)}


@pytest.mark.parametrize("record, state, exit_status, run_count, cpus, walltime", [
    pytest.param(recorded.RUNNING, "R", None, 1, MOM_CPUS[2], 300.0, id="running"),
    pytest.param(recorded.DRIVER_EXIT_3, "F", 3, 1, MOM_CPUS[2], 300.0, id="the-drivers-code"),
    *[pytest.param(job, "F", 0, 1, MOM_CPUS[2], 300.0, id=f"two-at-once-{job_id}")
      for job_id, job in recorded.TWO_AT_ONCE.items()],
    pytest.param(recorded.POLARIS, "F", 0, 1, MOM_CPUS[2], 3600.0, id="polaris-select"),
    pytest.param(recorded.SELECT_WITHOUT_NCPUS, "R", None, 1, MOM_CPUS[1], None, id="select-without-ncpus"),
    pytest.param(recorded.QDELETED, "F", 256 + signal.SIGTERM, 1, MOM_CPUS[1], None, id="qdel"),
    pytest.param(recorded.RERUN, "F", 0, 2, MOM_CPUS[2], 300.0, id="qrerun"),
    pytest.param(recorded.WALLTIME_KILLED, "F", -29, 1, {}, 15.0, id="walltime-killed"),
    pytest.param(recorded.WORKER_DRAINED, "F", 124, 1, {}, 100.0, id="worker-drained"),
])
def test_each_recorded_job_reads_as_pbs_showed_it(record, state, exit_status, run_count, cpus, walltime):
    facts = pbs.job_facts(record, "1.mpiray-pbs-server")
    assert (facts.state, facts.exit_status, facts.run_count, facts.cpus, facts.walltime) == \
        (state, exit_status, run_count, cpus, walltime)
    assert facts.hosts == tuple(cpus) and pbs.STATES.get(state, GONE) == (RUNNING if state == "R" else GONE)


def test_two_jobs_at_once_read_as_the_same_three_hosts_in_exec_hosts_order():
    """mpiray's reading of exec_host (chunks "host/index*ncpus" joined by "+"), against the hosts written out."""
    hosts = ("mpiray-pbs1", "mpiray-pbs2", "mpiray-pbs3")
    assert [pbs.job_facts(job, job_id).hosts for job_id, job in recorded.TWO_AT_ONCE.items()] == [hosts] * 2


# ---- rank 0 asks qstat for its job ------------------------------------------------------------------


class ZeroInput(NamedTuple):
    """What read_batch_job is given on rank 0: its environment (a PBS job's), its log (open in a job dir), the
    driver's --stop-grace."""

    env: environment.Environment
    log: RankLog
    grace: float


def rank_zero(tmp_path: Path, job_id: str, grace: float = 20) -> ZeroInput:
    log = RankLog(0, recorded.MOMS[0])
    log.open(tmp_path / "logs" / job_id.split(".")[0])
    return ZeroInput(environment.detect({"PBS_JOBID": job_id, "NCPUS": "2"}), log, grace)


def read(me: ZeroInput, rank_hosts: dict[int, str] | None = None) -> BatchJob:
    return read_batch_job(me.env, me.log, me.grace, rank_hosts)


def events(me: ZeroInput) -> list[dict]:
    me.log.close()
    return read_events(me.log.events_path)


def test_rank_0_reads_its_jobs_hosts_cpus_and_walltime_from_one_qstat(tmp_path, replayed):
    replayed.reply("qstat", recorded.qstat_json({recorded.RUNNING_ID: recorded.RUNNING}, server="pbs-server"))
    me = rank_zero(tmp_path, recorded.RUNNING_ID)
    job = read(me, dict(enumerate(recorded.MOMS)))
    assert replayed.argvs() == [["qstat", "-f", "-F", "json", "-x", recorded.RUNNING_ID], ["qstat", "-Qf", "workq"]]
    started = pbs.stamp(recorded.RUNNING["stime"])
    assert job == BatchJob(ends_at=started + 300, restart=None)
    (batch_job,) = [r["fields"] for r in events(me) if r["event"] == "batch_job"]
    assert batch_job == {"scheduler": "pbs", "job_id": recorded.RUNNING_ID, "select": "3:ncpus=2",
                         "cpus": MOM_CPUS[2], "hosts": list(recorded.MOMS), "walltime": 300.0, "started": started,
                         "ends_at": started + 300, "run_count": 1}
    assert not [r for r in events(me) if r["level"] != "info"]  # no cause: ncpus asked for, ranks on the job's hosts


def test_a_rerun_job_tells_the_driver_its_run_count(tmp_path, replayed):
    # The qrerun'd job as rank 0 of its second run reads it: running, run_count 2.
    second_run = {**{k: v for k, v in recorded.RERUN.items() if k != "Exit_status"}, "job_state": "R", "substate": 42}
    replayed.reply("qstat", recorded.qstat_json({recorded.RERUN_ID: second_run}))
    me = rank_zero(tmp_path, recorded.RERUN_ID)
    assert read(me).restart == "run 2 (PBS run_count)"


def test_a_qstat_that_knows_no_such_job_leaves_the_job_without_facts(tmp_path, replayed):
    replayed.reply("qstat", stderr=recorded.QSTAT_UNKNOWN_STDERR, code=recorded.QSTAT_UNKNOWN_CODE)
    me = rank_zero(tmp_path, recorded.UNKNOWN_JOB)
    assert read(me).ends_at is None
    (unknown,) = [r["fields"] for r in events(me) if r["event"] == "batch_job_unknown"]
    assert unknown["job_id"] == recorded.UNKNOWN_JOB and "Unknown Job Id" in unknown["problem"]


def test_a_select_without_ncpus_and_ranks_outside_the_job_are_the_causes_of_its_failure(tmp_path, replayed):
    replayed.reply("qstat", recorded.qstat_json({recorded.SELECT_WITHOUT_NCPUS_ID: recorded.SELECT_WITHOUT_NCPUS}))
    me = rank_zero(tmp_path, recorded.SELECT_WITHOUT_NCPUS_ID)
    # rank 2 on a host that is not the job's: an mpiexec that reached it by ssh (the testbed cannot start one)
    read(me, {0: "mpiray-pbs1", 1: "mpiray-pbs2", 2: "login1.example.org"})
    records = events(me)
    warned = {r["event"]: r["fields"] for r in records if r["level"] == "warning"}
    assert warned["select_without_ncpus"]["select"] == "3"
    assert (warned["ranks_outside_job"]["ranks"], warned["ranks_outside_job"]["job_hosts"]) == ([2], list(recorded.MOMS))
    causes = classify([entry(0)], {0: rank_facts(0, records)}, {}, exit_code=1, driver_code=1)
    assert [cause.cause for cause in causes] == ["select_without_ncpus", "ranks_outside_job"]


def test_the_walltime_read_from_qstat_is_where_rank_0_stops_the_driver_and_mpiray_logs_says_why(tmp_path, replayed):
    # As on the testbed (311cc4f): MPIRAY_STOP_GRACE=20, so the driver's SIGTERM came 20 + 30 s before the end.
    replayed.reply("qstat", recorded.qstat_json({recorded.RUNNING_ID: recorded.RUNNING}, server="pbs-server"))
    me = rank_zero(tmp_path, recorded.RUNNING_ID)
    job = read(me)
    at, margin = walltime_stop(Config(stop_grace=20), me.env.scheduler, job.ends_at)
    assert (job.ends_at - at, margin) == (50.0, 50.0)
    # What rank 0 then logs (rank.life.watch), and the exit code every rank gives: mpiray logs names the cause.
    me.log.event("walltime_near", ends_at=job.ends_at, margin=margin, cause="walltime", grace=20)
    me.log.event("exit", code=124)
    me.log.close()
    report = read_job(me.log.events_path.parent)
    assert report.batch_job is not None and report.batch_job["select"] == "3:ncpus=2"
    assert [cause.cause for cause in report.causes] == ["walltime"]


# ---- worker jobs: qsub, qstat, qdel -----------------------------------------------------------------


def test_worker_jobs_are_submitted_watched_and_deleted_with_the_recorded_commands(worker_job, replayed):
    back_end = pbs.Pbs()
    replayed.reply("qsub", recorded.QSUB_WORKER)
    script = back_end.script(worker_job, 2)
    assert back_end.submit(script) == "3.mpiray-pbs-server"
    # Job 2 finished (F: kept as history), job 3 running, and one the server does not know.
    replayed.reply("qstat", recorded.DSV_TWO_JOBS, recorded.QSTAT_UNKNOWN_STDERR, recorded.QSTAT_UNKNOWN_CODE)
    jobs = ["2.mpiray-pbs-server", "3.mpiray-pbs-server", recorded.UNKNOWN_JOB]
    assert back_end.states(jobs) == {"2.mpiray-pbs-server": GONE, "3.mpiray-pbs-server": RUNNING,
                                     recorded.UNKNOWN_JOB: GONE}
    back_end.cancel(["3.mpiray-pbs-server"])
    assert replayed.argvs() == [["qsub", "-"], ["qstat", "-x", "-f", "-F", "dsv", *jobs],
                                ["qdel", "3.mpiray-pbs-server"]]
    assert replayed.calls()[0]["stdin"] == script  # the script on qsub's stdin, its #PBS lines first
    # Every job unknown: gone, not a failure to answer; no answer at all: a failure, which says nothing of the jobs.
    replayed.reply("qstat", stderr=recorded.QSTAT_UNKNOWN_STDERR, code=recorded.QSTAT_UNKNOWN_CODE)
    assert back_end.states([recorded.UNKNOWN_JOB]) == {recorded.UNKNOWN_JOB: GONE}
    replayed.reply("qstat", code=1)
    with pytest.raises(CommandFailed, match="qstat exited 1"):
        back_end.states(["3.mpiray-pbs-server"])


@pytest.fixture
def provider_module(monkeypatch):
    """mpiray.elastic.provider (it imports Ray's autoscaler), asking the scheduler whenever Ray asks it."""
    from mpiray.elastic import provider

    monkeypatch.setattr(provider, "REFRESH_S", 0.0)
    monkeypatch.setattr(provider, "SCHEDULER_POLL_S", 0.0)
    return provider


def test_the_node_provider_grows_a_node_with_qsub_and_sees_its_job_run_and_end(tmp_path, replayed, provider_module):
    from ray.autoscaler.tags import STATUS_SETTING_UP, STATUS_UP_TO_DATE, TAG_RAY_NODE_STATUS

    job_dir, joins = tmp_path / "logs" / "7", tmp_path / "registry" / "7.joins"
    job_dir.mkdir(parents=True)
    joins.mkdir(parents=True)
    job = WorkerJob(cluster="7", python=sys.executable, log_dir=str(job_dir), cpus=1)
    state = tmp_path / "registry" / "state.json"
    # The cluster's first worker job was w1: this one is the recorded mpiray-7-w2.
    state.write_text(json.dumps({"next_id": 2, "jobs": {}, "failures": 0, "backoff_until": 0.0, "stopped": "",
                                 "submits": []}))
    provider = provider_module.BatchNodeProvider({"state": str(state), "static": str(tmp_path / "registry" / "static.json"),
                                  "joins": str(joins), "max_workers": 2, "scheduler": "pbs",
                                  "worker_job": vars(job), "log_dir": str(job_dir)}, "mpiray-7")
    replayed.reply("qsub", recorded.QSUB_WORKER)
    provider.create_node({}, {}, 1)
    assert provider.node_tags("2")[TAG_RAY_NODE_STATUS] == STATUS_SETTING_UP
    assert "#PBS -N mpiray-7-w2" in replayed.calls()[0]["stdin"].splitlines()
    assert provider.state["jobs"]["2"]["state"] == PENDING

    replayed.reply("qstat", recorded.DSV_TWO_JOBS)  # job 3 running
    (joins / "node-2.json").write_text(json.dumps({"provider_node": "2"}))  # what its Joiner writes
    assert "2" in provider.non_terminated_nodes({})
    assert provider.node_tags("2")[TAG_RAY_NODE_STATUS] == STATUS_UP_TO_DATE

    replayed.reply("qstat", stderr=recorded.QSTAT_UNKNOWN_STDERR.replace(recorded.UNKNOWN_JOB, "3.mpiray-pbs-server"),
                   code=recorded.QSTAT_UNKNOWN_CODE)  # ended, and the server keeps no history of it
    assert "2" not in provider.non_terminated_nodes({})
    provider.log.close()
    seen = [(r["event"], r["fields"].get("job")) for r in read_events(job_dir / "autoscaler-rank-0000.jsonl")]
    assert seen == [("job_submitted", "3.mpiray-pbs-server"), ("job_started", "3.mpiray-pbs-server"),
                    ("node_joined", "3.mpiray-pbs-server"), ("worker_job_ended", "3.mpiray-pbs-server")]
    assert {tuple(argv[:5]) for argv in replayed.argvs()[1:]} == {("qstat", "-x", "-f", "-F", "dsv")}


def test_the_provider_qdels_a_worker_job_ray_ends(tmp_path, replayed, provider_module):
    job_dir = tmp_path / "logs" / "7"
    job_dir.mkdir(parents=True)
    job = WorkerJob(cluster="7", python=sys.executable, log_dir=str(job_dir), cpus=1)
    provider = provider_module.BatchNodeProvider({"state": str(tmp_path / "state.json"), "static": str(tmp_path / "static.json"),
                                  "joins": str(tmp_path / "joins"), "max_workers": 2, "scheduler": "pbs",
                                  "worker_job": vars(job), "log_dir": str(job_dir)}, "mpiray-7")
    replayed.reply("qsub", recorded.QSUB_WORKER)
    provider.create_node({}, {}, 1)
    provider.terminate_node("1")
    provider.log.close()
    assert replayed.argvs()[-1] == ["qdel", "3.mpiray-pbs-server"]
    assert provider.state["jobs"]["1"]["state"] == GONE


@pytest.mark.parametrize("limit", [None, 600.0])
def test_a_worker_job_queued_for_hours_stays_queued_unless_a_pending_limit_was_given(tmp_path, replayed,
                                                                                      provider_module, limit):
    """A production queue can take hours: cancelled and resubmitted, the job would start at the back each time."""
    job_dir = tmp_path / "logs" / "7"
    job_dir.mkdir(parents=True)
    job = WorkerJob(cluster="7", python=sys.executable, log_dir=str(job_dir), cpus=1)
    provider = provider_module.BatchNodeProvider({"state": str(tmp_path / "state.json"), "static": str(tmp_path / "static.json"),
                                  "joins": str(tmp_path / "joins"), "max_workers": 2, "scheduler": "pbs",
                                  "worker_job": vars(job), "log_dir": str(job_dir), "pending_limit": limit}, "mpiray-7")
    replayed.reply("qsub", recorded.QSUB_WORKER)
    provider.create_node({}, {}, 1)
    provider.state["jobs"]["1"]["submitted"] -= 3 * 3600  # queued for three hours
    replayed.reply("qstat", recorded.DSV_TWO_JOBS.replace("job_state=R", "job_state=Q"))
    provider.non_terminated_nodes({})
    provider.log.close()
    if limit is None:
        assert provider.state["jobs"]["1"]["state"] == PENDING and "qdel" not in [a[0] for a in replayed.argvs()]
    else:  # cancelled, and counted as failed: the next submit waits
        assert replayed.argvs()[-1] == ["qdel", "3.mpiray-pbs-server"]
        assert provider.state["jobs"]["1"]["state"] == GONE and provider.state["failures"] == 1
        assert provider._cannot_submit().startswith("backing off")


# ---- the queue, the nodes, and the testbed's own reading --------------------------------------------


def test_the_queues_kill_delay_is_read_as_qstat_printed_it(replayed):
    assert pbs.queue_fields(recorded.QUEUE_WORKQ)["kill_delay"] == "30"
    assert pbs.kill_delay("workq") == testbed.KILL_DELAY_S == 30  # the testbed's queue is what was recorded
    replayed.reply("qstat -Qf", "Queue: workq\n    queue_type = Execution\n")  # a queue that sets none
    assert pbs.kill_delay("workq") == pbs.DEFAULT_KILL_DELAY_S == recorded.PBS_DEFAULT_KILL_DELAY_S


@pytest.mark.parametrize("grace, warned", [(20, False), (60, True)])
def test_a_grace_that_a_qdel_would_cut_short_is_said_at_the_start(tmp_path, replayed, grace, warned):
    """One rule: the walltime stop gives the driver all of --stop-grace; a qdel gives it the queue's kill_delay."""
    replayed.reply("qstat", recorded.qstat_json({recorded.RUNNING_ID: recorded.RUNNING}, server="pbs-server"))
    me = rank_zero(tmp_path, recorded.RUNNING_ID, grace=grace)
    job = read(me)
    cut = [r["fields"] for r in events(me) if r["event"] == "qdel_cuts_grace"]
    assert cut == ([{"queue": "workq", "kill_delay": 30.0, "grace": grace}] if warned else [])
    at, margin = walltime_stop(Config(stop_grace=grace), "pbs", job.ends_at)
    assert margin == grace + 30  # the walltime stop: the whole grace, then Ray's stop and the logs


@pytest.mark.parametrize("script", ["pbs_multi_node.sh", "pbs_elastic.sh", "pbs_polaris.sh"])
def test_the_pbs_scripts_give_the_trainer_time_to_checkpoint_at_the_walltime(script):
    """The trainer saves at the end of its current iteration, within MPIRAY_STOP_GRACE - 2 s (train/README)."""
    text = (ROOT / "jobs" / script).read_text()
    grace = int(re.search(r"MPIRAY_STOP_GRACE=\$\{MPIRAY_STOP_GRACE:-(\d+)\}", text).group(1))
    assert grace >= 60


def test_the_testbed_reads_pbsnodes_and_qstat_as_pbs_printed_them(tmp_path, replayed, monkeypatch):
    monkeypatch.setattr(testbed, "PBS_EXEC", replayed.bin_dir.parent)  # its env() puts PBS_EXEC/bin first
    bed = testbed.describe(tmp_path / "state")
    replayed.reply("pbsnodes", recorded.PBSNODES)
    assert bed.node_states() == dict.fromkeys(bed.node_names, "free") and tuple(bed.node_names) == recorded.MOMS
    replayed.reply("qstat", recorded.qstat_json({recorded.QDELETED_ID: recorded.QDELETED}))
    assert bed.wait_for_job(recorded.QDELETED_ID, timeout=10)["Exit_status"] == 271
    assert replayed.argvs() == [["pbsnodes", "-a", "-F", "json"],
                                ["qstat", "-f", "-F", "json", "-x", recorded.QDELETED_ID]]
    assert json.loads(recorded.PBSNODES)["pbs_version"] == recorded.PBS_VERSION == "23.06.06"


def test_the_provider_asks_the_scheduler_once_per_poll_period_and_sees_a_join_at_once(tmp_path, replayed,
                                                                                     provider_module):
    """Ray asks the provider many times a second; qstat runs at most once per --scheduler-poll (10 s by default),
    and the worker's node is up as soon as its job says it joined, not at the next qstat."""
    from ray.autoscaler.tags import STATUS_UP_TO_DATE, TAG_RAY_NODE_STATUS

    job_dir, joins = tmp_path / "logs" / "7", tmp_path / "joins"
    job_dir.mkdir(parents=True)
    joins.mkdir()
    job = WorkerJob(cluster="7", python=sys.executable, log_dir=str(job_dir), cpus=1)
    provider = provider_module.BatchNodeProvider({"state": str(tmp_path / "state.json"), "static": str(tmp_path / "static.json"),
                                  "joins": str(joins), "max_workers": 2, "scheduler": "pbs", "scheduler_poll": 10.0,
                                  "worker_job": vars(job), "log_dir": str(job_dir)}, "mpiray-7")
    replayed.reply("qsub", recorded.QSUB_WORKER)
    replayed.reply("qstat", recorded.DSV_TWO_JOBS)
    provider.create_node({}, {}, 1)
    (joins / "node-1.json").write_text(json.dumps({"provider_node": "1"}))
    for _ in range(50):
        assert "1" in provider.non_terminated_nodes({})
    provider.log.close()
    assert provider.node_tags("1")[TAG_RAY_NODE_STATUS] == STATUS_UP_TO_DATE
    assert provider.state["jobs"]["1"]["state"] == RUNNING
    assert sum(argv[0] == "qstat" and "-x" in argv for argv in replayed.argvs()) == 1
