"""train/run.py's pure pieces: a trial that lost a learner's node told from other failures."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("text, lost", [
    ('ray::PPO.train() ... learner_group.py", line 722, in _get_results ... RuntimeError: [gloo/transport/tcp/pair.cc:553] '
     'Connection closed by peer [10.77.0.13]:64130. This is typically caused by a remote worker crashing.', True),
    ("learner_group.py ... ray.exceptions.ActorDiedError: The actor died because its node has died.", True),
    ("learner_group.py ... Gloo connectFullMesh failed ... Connection refused, remote=[127.0.0.1]", False),
    ("env_runner_group.py ... ActorDiedError: The actor died because its node has died.", False),
])
def test_a_trial_that_lost_a_learners_node_is_told_from_other_failures(text, lost):
    from train.run import lost_learner

    assert lost_learner(RuntimeError(text)) is lost


@pytest.mark.parametrize("text, watched, restored", [
    ("learner_group.py ... ray.exceptions.ActorDiedError: The actor died because its node has died.", False, True),
    ("The actor died because its node has died. Node Id: 8b1c", False, True),  # the algorithm's own node
    ("RayActorError: The actor died because of ray.kill", True, True),  # the learner watch ended it (train/watch.py)
    ("ValueError: observation out of bounds", False, False),  # the env's bug: it would fail again
    ("RayActorError: The actor died because of ray.kill", False, False),  # ended, but no node was lost
])
def test_only_a_trial_that_lost_a_node_continues_in_the_job(text, watched, restored):
    """--max-failures restores a trial in the job only where it failed because a node was lost: another failure
    would come again, and each restore costs the trial's start-up."""
    from types import SimpleNamespace

    from train import watch
    from train.run import _lost_a_node

    watch.forget()
    if watched:
        watch.LOST["t1"] = "10.0.0.3"
    try:
        assert _lost_a_node(SimpleNamespace(error=RuntimeError(text), metrics={"trial_id": "t1"})) is restored
    finally:
        watch.forget()
