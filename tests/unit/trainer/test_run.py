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
