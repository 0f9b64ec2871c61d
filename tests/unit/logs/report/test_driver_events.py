"""`mpiray logs` reads a driver's own event log (mpiray.driver.job_log) by the kinds the log declares: the trainer's
is read like any driver's, and mpiray's code names none of its events."""

from __future__ import annotations

from pathlib import Path

from mpiray import driver
from mpiray.logs.report.jobdir import read_job
from mpiray.logs.report.render import format_report

from sample_jobs import OK_RANK0, OK_RANK1, rank0, write_job

ROOT = Path(__file__).resolve().parents[4]


def failed_job(root: Path) -> Path:
    """Two ranks whose driver exited 1."""
    rank_0 = [rank0("20.800", "driver_exited", code=1) if r["event"] == "driver_exited" else
              rank0("21.826", "exit", code=1) if r["event"] == "exit" else r for r in OK_RANK0]
    rank_1 = [{**r, "fields": {"code": 1}} if r["event"] in ("job_ended", "exit") else r for r in OK_RANK1]
    return write_job(root, "j", rank_0, rank_1)


def open_log(job_dir: Path, prefix: str, kinds) -> driver.JobLog:
    log = driver.job_log(prefix, kinds, {"MPIRAY_LOG_DIR": str(job_dir.parent), "MPIRAY_JOB_ID": job_dir.name})
    assert log is not None
    return log


def test_a_failed_driver_that_logged_a_kind_it_declares_a_cause_of_failed_of_that(tmp_path):
    from train import events  # the trainer's own kinds, as it writes them

    job_dir = failed_job(tmp_path)
    log = open_log(job_dir, events.PREFIX, events.KINDS)
    log.event("learners_placed", trial="t0", count=3, nodes=3, addresses="a, b, c")
    log.event("learner_node_lost", trial="t0", error="ActorDiedError: the node died")
    log.close()
    report = read_job(job_dir)
    assert [c.cause for c in report.causes] == ["learner_node_lost"]  # not driver_failed: that is what failed
    assert report.causes[0].title.startswith("a node that held an RLlib learner was lost")
    assert report.causes[0].evidence == ["trainer: trial t0: a learner's node was lost; RLlib does not restart "
                                         "learners, so the trial ended at its last checkpoint: ActorDiedError: "
                                         "the node died"]
    assert [e.event for e in report.driver_events] == ["learners_placed"]
    assert "trainer: trial t0: learners: 3 on 3 nodes: a, b, c" in format_report(report)


def test_any_driver_may_declare_its_own_cause(tmp_path):
    job_dir = failed_job(tmp_path)
    kinds = driver.event_kinds(
        shard_missing=(driver.ERROR, "shard {shard} is missing", ("a data shard was missing", "stage the data first")),
        epoch=(driver.INFO, "epoch {n} done"))
    log = open_log(job_dir, "loader-", kinds)
    log.event("epoch", n=1)
    log.event("shard_missing", shard=7)
    log.close()
    report = read_job(job_dir)
    assert [(c.cause, c.fix, c.evidence) for c in report.causes] == [
        ("shard_missing", "stage the data first", ["loader: shard 7 is missing"])]
    assert [e.text for e in report.driver_events] == ["epoch 1 done"]


def test_a_driver_log_of_a_job_that_succeeded_names_no_cause(tmp_path):
    job_dir = write_job(tmp_path, "j", OK_RANK0, OK_RANK1)
    kinds = driver.event_kinds(oops=(driver.ERROR, "oops", ("it went wrong", "do better")))
    log = open_log(job_dir, "mine-", kinds)
    log.event("oops")
    log.close()
    assert read_job(job_dir).causes == []


def test_mpirays_code_names_no_event_of_the_trainer():
    from train import events

    named = [(path.relative_to(ROOT), kind) for path in (ROOT / "mpiray").rglob("*.py") for kind in events.KINDS
             if kind in path.read_text()]
    assert named == []
