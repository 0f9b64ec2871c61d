"""One line per training iteration, instead of Tune's periodic tables and config dumps."""

from __future__ import annotations

import sys
from collections import Counter

from ray.tune import Callback

from train import events
from train.config import ENV_RUNNERS_KEY, LEARNERS_KEY, lookup_metric
from train.options import ENV_STEPS_METRIC, RETURN_METRIC

# Checkpoints saved in this process, by trial id: said once at the end instead of Tune's line for each.
# Tune pickles callbacks into tuner.pkl and back on --resume, so the callback keeps no state of its own.
CHECKPOINTS_SAVED: Counter = Counter()
LEARNERS_SAID: set = set()  # trials whose learners' places were said


class ProgressLine(Callback):
    """Print iteration, env steps, mean/min/max return and wall time for every result; count checkpoints."""

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result.get(LEARNERS_KEY) and trial.trial_id not in LEARNERS_SAID:
            LEARNERS_SAID.add(trial.trial_id)
            addresses = result[LEARNERS_KEY].split(",")
            print(f"[train] {format_learners(addresses)}", file=sys.stderr, flush=True)
            events.event("learners_placed", trial=trial.trial_id, count=len(addresses), nodes=len(set(addresses)),
                         addresses=", ".join(addresses))
            runners = [address for address in result.get(ENV_RUNNERS_KEY, "").split(",") if address]
            if runners:
                print(f"[train] {format_places('env runners', runners)}", file=sys.stderr, flush=True)
                events.event("env_runners_placed", trial=trial.trial_id, count=len(runners), nodes=len(set(runners)),
                             addresses=", ".join(runners))
        print(format_progress(trial.trial_id, result), file=sys.stderr, flush=True)

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
        CHECKPOINTS_SAVED[trial.trial_id] += 1

    def on_trial_error(self, iteration, trials, trial, **info):
        print(f"[train] trial {trial.trial_id} failed; details in {trial.path}/error.txt",
              file=sys.stderr, flush=True)


def format_progress(trial_id: str, result: dict) -> str:
    """'[train] <trial> iter 3 | 12000 env steps | return 87.3 (min 12, max 200) | 45.1 s'."""
    return (
        f"[train] {trial_id} iter {result.get('training_iteration', 0)} | "
        f"{lookup_metric(result, ENV_STEPS_METRIC):.0f} env steps | "
        f"return {lookup_metric(result, RETURN_METRIC):.3f} "
        f"(min {lookup_metric(result, 'env_runners/episode_return_min'):.3f}, "
        f"max {lookup_metric(result, 'env_runners/episode_return_max'):.3f}) | "
        f"{result.get('time_total_s', 0.0):.1f} s"
    )


def format_learners(addresses: list[str]) -> str:
    """'learners: 3 on 3 nodes: 10.0.0.1, 10.0.0.2, 10.0.0.3' (each learner's node address, as the learners said)."""
    return format_places("learners", addresses)


def format_places(what: str, addresses: list[str]) -> str:
    """'WHAT: 3 on 2 nodes: 10.0.0.1, 10.0.0.1, 10.0.0.2': each actor's node address, as the actors said."""
    return f"{what}: {len(addresses)} on {len(set(addresses))} nodes: {', '.join(addresses)}"


def format_checkpoints(saved: int, kept: int) -> str:
    """'checkpoints: 5 saved, 2 kept' (saved by this run; kept in the trial directory)."""
    return f"checkpoints: {saved} saved, {kept} kept"
