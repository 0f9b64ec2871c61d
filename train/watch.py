"""The driver's watch on the nodes that hold a trial's learners.

RLlib starts its remote learners with no restart, and they train in lockstep (torch DDP): when the node of one
is lost, the others wait in their next all-reduce for a peer that is gone, until torch's rendezvous timeout
(30 min, which RLlib does not expose) unless the dead peer's connections happened to close first. So the
driver watches the nodes the learners said they run on (train/config.py LearnerPlaces), and when one of them
is no longer alive in the cluster it ends that trial at once (ray.kill of the trial's actor: Tune records the
trial as errored: run.py continues it from its last checkpoint, in this job or a rerun) and says why: the
learner_node_lost event.
"""

from __future__ import annotations

import sys
import time
from typing import Callable

from ray.tune import Callback

from train import events
from train.config import LEARNERS_KEY

CHECK_EVERY_S = 2.0  # ray.nodes() at most this often (Tune steps its loop many times a second)
# trial id -> the node addresses it lost: read by run.py's report (Tune pickles callbacks: no state of its own)
LOST: dict[str, str] = {}
_PLACES: dict[str, set[str]] = {}
_checked = [0.0]
# The trials a restore in this job waits for: time.monotonic() by which each should be placed (its actor started),
# and what the cluster lacks for them now ([] when it holds them). At most one restore at a time.
_RESTORING: dict[str, float] = {}
_lacking: list[Callable[[], list[str]]] = []


class NotPlaced(RuntimeError):
    """Restored trials that the cluster could not place in time: it lacks what they need (str: what), and Tune
    would wait for it forever."""


def expect_placement(trial_ids, within_s: float, lacking: Callable[[], list[str]]) -> None:
    """The next fit restores these trials. Once within_s has passed with one still not started, the fit ends with
    NotPlaced if lacking() names anything: a trial that waits for a node that is not coming. One whose resources
    are there is starting (its learners import and build their model): it goes on."""
    _RESTORING.update(dict.fromkeys(trial_ids, time.monotonic() + within_s))
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

    def on_step_begin(self, iteration, trials, **info):
        if time.monotonic() - _checked[0] < CHECK_EVERY_S:
            return
        _checked[0] = time.monotonic()
        if _lacking and any(time.monotonic() > by for by in _RESTORING.values()):
            lacking = _lacking[0]()
            if lacking:
                raise NotPlaced("; ".join(dict.fromkeys(lacking)))
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
            events.event("learner_node_lost", trial=trial.trial_id,
                         error=f"the node of a learner is no longer alive: {LOST[trial.trial_id]}")
            ray.kill(actor)
