"""The driver's watch on the nodes that hold a trial's learners.

RLlib starts its remote learners with no restart, and they train in lockstep (torch DDP): when the node of one
is lost, the others wait in their next all-reduce for a peer that is gone, until torch's rendezvous timeout
(30 min, which RLlib does not expose) unless the dead peer's connections happened to close first. So the
driver watches the nodes the learners said they run on (train/config.py LearnerPlaces), and when one of them
is no longer alive in the cluster it ends that trial at once (ray.kill of the trial's actor: Tune records the
trial as errored: run.py continues it from its last checkpoint, in this job or a rerun) and says why (LOST;
run.py's report logs learner_node_lost where the trial could not continue).
"""

from __future__ import annotations

import sys
import time
from typing import Callable

from ray.tune import Callback

from train.config import LEARNERS_KEY

CHECK_EVERY_S = 2.0  # ray.nodes() at most this often (Tune steps its loop many times a second)
# trial id -> the node addresses it lost: read by run.py's report (Tune pickles callbacks: no state of its own)
LOST: dict[str, str] = {}
_PLACES: dict[str, set[str]] = {}
_checked = [0.0]
# The trials a restore in this job waits for: trial id -> (time.monotonic() from which a trial not yet started is
# looked at, and by which it must have started whatever the cluster holds), and what the cluster lacks for trials
# of given ids now ([] when it holds them). At most one restore at a time.
_RESTORING: dict[str, tuple[float, float]] = {}
_lacking: list[Callable[[set[str]], list[str]]] = []
HARD_LIMIT = 3  # times --restore-wait: a trial whose resources are there, but Tune has not started


class NotPlaced(RuntimeError):
    """Restored trials that the cluster could not place in time: it lacks what they need (str: what), and Tune
    would wait for it forever."""


def expect_placement(trial_ids, within_s: float, lacking: Callable[[set[str]], list[str]]) -> None:
    """The next fit restores these trials. Once within_s has passed with one still waiting to start, the fit ends
    with NotPlaced if lacking(those ids) names anything: a trial that waits for a node that is not coming. One
    whose resources are there is starting (its learners import and build their model): it goes on, up to
    HARD_LIMIT times within_s (Tune would otherwise wait for a placement that never comes)."""
    now = time.monotonic()
    _RESTORING.update(dict.fromkeys(trial_ids, (now + within_s, now + HARD_LIMIT * within_s)))
    _lacking[:] = [lacking]


def forget() -> dict[str, str]:
    """Start afresh: the trials of the next fit (a restore in this job) place their learners anew, and what they
    lose is theirs. Returns what was lost before."""
    lost = dict(LOST)
    LOST.clear()
    _PLACES.clear()
    _RESTORING.clear()
    _lacking.clear()
    _checked[0] = 0.0
    return lost


class LearnerNodeWatch(Callback):
    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result.get(LEARNERS_KEY):
            _PLACES[trial.trial_id] = set(result[LEARNERS_KEY].split(","))

    def on_trial_start(self, iteration, trials, trial, **info):
        _RESTORING.pop(trial.trial_id, None)

    def on_trial_error(self, iteration, trials, trial, **info):
        _RESTORING.pop(trial.trial_id, None)

    def on_step_begin(self, iteration, trials, **info):
        if time.monotonic() - _checked[0] < CHECK_EVERY_S:
            return
        _checked[0] = time.monotonic()
        _check_restoring(trials)
        if not _PLACES:
            return
        import ray

        alive = {node["NodeManagerAddress"] for node in ray.nodes() if node.get("Alive")}
        for trial in trials:
            gone = _PLACES.get(trial.trial_id, set()) - alive
            actor = trial.temporary_state.ray_actor
            if not gone or trial.trial_id in LOST or actor is None:
                continue
            LOST[trial.trial_id] = ", ".join(sorted(gone))
            print(f"[train] trial {trial.trial_id}: the node of a learner ({LOST[trial.trial_id]}) is gone, and RLlib "
                  "does not restart learners: ending the trial now (the others would wait for it in their next "
                  "all-reduce); it continues from its last checkpoint", file=sys.stderr, flush=True)
            ray.kill(actor)


def _check_restoring(trials) -> None:
    """NotPlaced for the restored trials still waiting to start past their time, where the cluster lacks what they
    need, or past the hard limit whatever it holds; the others (a trial of another sample running) go on."""
    now = time.monotonic()
    waiting = {trial.trial_id: _RESTORING[trial.trial_id] for trial in trials
               if trial.trial_id in _RESTORING and trial.status == trial.PENDING}
    late = {trial_id for trial_id, (by, _) in waiting.items() if now > by}
    if not late or not _lacking:
        return
    lacking = _lacking[0](late)
    if lacking:
        raise NotPlaced("; ".join(dict.fromkeys(lacking)))
    if any(now > hard_by for _, hard_by in waiting.values()):
        raise NotPlaced("what Tune has not placed, though the cluster's nodes hold its CPUs, GPUs and learner slots")
