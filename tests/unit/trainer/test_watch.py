"""The watch on the learners' nodes (train/watch.py), with Ray's node list and kill stood in for."""

from __future__ import annotations

from train import config


def test_the_watch_ends_a_trial_whose_learner_node_is_gone_once_and_says_why(monkeypatch, capsys):
    """A node lost without closing its connections (power, a dead host) leaves the other learners waiting in
    their all-reduce (torch's 30 min): the driver ends that trial itself once Ray sees the node gone."""
    from types import SimpleNamespace

    import ray

    from train import watch

    killed, nodes = [], [{"NodeManagerAddress": "10.0.0.1", "Alive": True}, {"NodeManagerAddress": "10.0.0.2", "Alive": True}]
    monkeypatch.setattr(ray, "nodes", lambda: nodes)
    monkeypatch.setattr(ray, "kill", killed.append)
    monkeypatch.setattr(watch, "CHECK_EVERY_S", 0.0)
    monkeypatch.setattr(watch, "LOST", {})
    monkeypatch.setattr(watch, "_PLACES", {})
    trial = SimpleNamespace(trial_id="t1", temporary_state=SimpleNamespace(ray_actor="the trial's actor"))
    callback = watch.LearnerNodeWatch()
    callback.on_trial_result(0, [trial], trial, {config.LEARNERS_KEY: "10.0.0.1,10.0.0.2"})
    callback.on_step_begin(1, [trial])
    assert killed == []  # every learner's node alive
    nodes[1]["Alive"] = False
    callback.on_step_begin(2, [trial])
    callback.on_step_begin(3, [trial])
    assert killed == ["the trial's actor"] and watch.LOST == {"t1": "10.0.0.2"}
    assert "the node of a learner (10.0.0.2) is gone" in capsys.readouterr().err
