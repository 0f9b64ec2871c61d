"""What the cluster holds (train/cluster.py): env runners by default, and learners that the nodes cannot
hold refused before training, with what fits. Pure: no Ray started."""

from __future__ import annotations

import pytest

from train import cluster, config

from trainer_args import parse_train


@pytest.mark.parametrize(
    ("total_cpus", "reserved", "expected"),
    [(2, 1, 1), (4, 1, 3), (1, 1, 0), (0.5, 1, 0), (16, 2, 14)],
)
def test_default_env_runners_use_every_cpu_but_the_learners(total_cpus, reserved, expected):
    assert cluster.default_num_env_runners(total_cpus, reserved) == expected


def test_learners_map_onto_rllib_and_more_than_the_nodes_can_hold_is_refused_with_what_fits(monkeypatch):
    options = parse_train(["--num-learners", "3", "--num-cpus-per-learner", "2"])
    assert config.learners_of(options) == {"num_learners": 3, "num_gpus_per_learner": 0.0, "num_cpus_per_learner": 2.0}
    node = {"CPU": 2.0, "GPU": 0.0, cluster.LEARNER_SLOT: 1.0}
    three = cluster.ClusterInfo(None, 3, 6.0, 0.0, nodes=({**node, cluster.HEAD_RESOURCE: 1.0}, node, node))
    learners = config.default_algorithm_config("PPO").learners(num_learners=4)
    with pytest.raises(cluster.ResourceError, match="4 learners, but the cluster's nodes can hold 3: they offer 3 "
                                                    "learner slots.*--num-learners 3 or fewer"):
        cluster.check_learners(learners, three, spread=True, main_on_head=True)
    cluster.check_learners(config.default_algorithm_config("PPO").learners(num_learners=3), three, spread=True,
                           main_on_head=True)
    # Learners of 1.5 CPUs: the head's 2 CPUs less the main process's 1 hold none, the others one each.
    big = config.default_algorithm_config("PPO").learners(num_learners=3, num_cpus_per_learner=1.5)
    with pytest.raises(cluster.ResourceError, match="can hold 2: .*of its node's, the head's after the algorithm's"):
        cluster.check_learners(big, three, spread=True, main_on_head=True)
    # Ray 2.52's RLlib: one bundle for all learners, which must then fit one node.
    monkeypatch.setattr(cluster, "learner_bundles", lambda algorithm_config: [{"CPU": 3.0, "GPU": 0.0}])
    with pytest.raises(cluster.ResourceError, match="3 learners need 3 CPUs and 0 GPUs on one node: .* places all "
                                                    "learners in one bundle.*the largest: 2 CPUs"):
        cluster.check_learners(config.default_algorithm_config("PPO").learners(num_learners=3), three, spread=False)
