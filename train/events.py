"""The trainer's own events, where `mpiray logs` reads them: LOG_DIR/JOB/trainer-rank-0000.jsonl beside the
ranks' logs, when it runs as the launcher's driver (MPIRAY_LOG_DIR and MPIRAY_JOB_ID name the job's dir);
nowhere otherwise. Its kinds are declared here (KINDS), not in mpiray; programs read the events' names and
fields, never the text; `mpiray logs` reads the kinds as the log declares them (a failed trainer's cause: a lost
learner's node, from learner_node_lost; trial_restore: a trial that continues in the job after a node's loss)."""

from __future__ import annotations

import os
from typing import Mapping, Optional

from mpiray import driver

PREFIX = "trainer-"
KINDS = driver.event_kinds(
    learners_placed=(driver.INFO, "trial {trial}: learners: {count} on {nodes} nodes: {addresses}"),
    env_runners_placed=(driver.INFO, "trial {trial}: env runners: {count} on {nodes} nodes: {addresses}"),
    trial_restore=(driver.INFO, "trial {trial}: a node was lost; it continues from its last checkpoint in this job "
                                "(restore {restore} of --max-failures {max_failures}) once the cluster holds it"),
    learner_node_lost=(driver.ERROR, "trial {trial}: a learner's node was lost; RLlib does not restart learners, so "
                                     "the trial ended at its last checkpoint: {error}",
                       ("a node that held an RLlib learner was lost, and the training could not continue in the job "
                        "(no restore left of --max-failures, or no node took its place within --restore-wait)",
                        "give the job a spare host (mpiray --spares 1): its node takes the lost one's place and the "
                        "trial continues in the job; or run the job again (requeue, qrerun, or the same command): the "
                        "trainer continues from its last checkpoint. A node that fails often: see its rank's log and "
                        "Ray's logs for why it went")),
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
