"""The trainer's own events, where `mpiray logs` reads them: LOG_DIR/JOB/trainer-rank-0000.jsonl beside the
ranks' logs, when it runs as the launcher's driver (MPIRAY_LOG_DIR and MPIRAY_JOB_ID name the job's dir);
nowhere otherwise. Its kinds are declared here (KINDS), not in mpiray; programs read the events' names and
fields, never the text; `mpiray logs` reads the kinds as the log declares them (a failed trainer's cause: a lost
learner's node, from learner_node_lost)."""

from __future__ import annotations

import os
from typing import Mapping, Optional

from mpiray import driver

PREFIX = "trainer-"
KINDS = driver.event_kinds(
    learners_placed=(driver.INFO, "trial {trial}: learners: {count} on {nodes} nodes: {addresses}"),
    env_runners_placed=(driver.INFO, "trial {trial}: env runners: {count} on {nodes} nodes: {addresses}"),
    learner_node_lost=(driver.ERROR, "trial {trial}: a learner's node was lost; RLlib does not restart learners, so "
                                     "the trial failed after its last checkpoint: {error}",
                       ("a node that held an RLlib learner was lost: RLlib does not restart learners, so the training "
                        "failed",
                        "run the job again (requeue, qrerun, or the same command): the trainer continues from its last "
                        "checkpoint; a node that fails often: see its rank's log and Ray's logs for why it went")),
)
_log: Optional[driver.JobLog] = None


def trainer_log(environ: Mapping[str, str] = os.environ) -> Optional[driver.JobLog]:
    """The job's trainer log, opened once (None: no launcher's job dir to write it in)."""
    global _log
    if _log is None:
        _log = driver.job_log(PREFIX, KINDS, environ)
    return _log


def event(name: str, /, **fields) -> None:
    """Log one of the trainer's events, if it runs under the launcher; an unwritable log costs nothing else."""
    try:
        log = trainer_log()
        if log is not None:
            log.event(name, **fields)
    except OSError:
        pass
