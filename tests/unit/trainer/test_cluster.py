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


def pools() -> cluster.ClusterInfo:
    """A head and a trainer node (role trainer), and two rollout nodes of 4 CPUs (role rollout)."""
    slot = {"GPU": 0.0, cluster.LEARNER_SLOT: 1.0}
    return cluster.ClusterInfo(None, 4, 12.0, 0.0, nodes=(
        {"CPU": 2.0, **slot, cluster.HEAD_RESOURCE: 1.0, "mpiray_role_trainer": 1.0},
        {"CPU": 2.0, **slot, "mpiray_role_trainer": 1.0},
        {"CPU": 4.0, **slot, "mpiray_role_rollout": 1.0}, {"CPU": 4.0, **slot, "mpiray_role_rollout": 1.0}))


def test_learners_and_env_runners_ask_for_a_sliver_of_their_roles_resource_beside_what_was_asked():
    algorithm_config = config.default_algorithm_config("PPO").learners(num_learners=2)
    algorithm_config.env_runners(custom_resources_per_env_runner={"mine": 1})
    assert config.spread_learners(algorithm_config)
    config.place_by_role(algorithm_config, "trainer", "rollout")
    assert algorithm_config.custom_resources_per_learner == {cluster.LEARNER_SLOT: 1, "mpiray_role_trainer": 0.001}
    assert algorithm_config.custom_resources_per_env_runner == {"mine": 1, "mpiray_role_rollout": 0.001}
    with pytest.raises(config.OptionError, match="--learners-on trainer places remote learners, and this run has none"):
        config.place_by_role(config.default_algorithm_config("PPO"), "trainer", None)


def test_a_role_no_node_has_is_refused_with_the_roles_there_are():
    assert pools().roles == ["rollout", "trainer"]
    cluster.check_role(pools(), "rollout", "--env-runners-on")
    with pytest.raises(cluster.ResourceError, match=r"--env-runners-on rollouts: no node of this cluster has that role "
                                                    r"\(the roles here: rollout, trainer\).*--role rollouts"):
        cluster.check_role(pools(), "rollouts", "--env-runners-on")


def test_learners_on_a_role_count_that_roles_slots_and_env_runners_that_roles_cpus():
    two = config.default_algorithm_config("PPO").learners(num_learners=2)
    cluster.check_learners(two, pools(), spread=True, main_on_head=True, role="trainer")
    three = config.default_algorithm_config("PPO").learners(num_learners=3)
    cluster.check_learners(three, pools(), spread=True, main_on_head=True)  # four slots in all
    with pytest.raises(cluster.ResourceError, match="3 learners, but the role trainer's nodes can hold 2: they offer 2"):
        cluster.check_learners(three, pools(), spread=True, main_on_head=True, role="trainer")
    # The rollout pool holds neither the head nor the learners: all its 8 CPUs are the env runners'.
    assert cluster.env_runner_cpus(pools(), "rollout", 3.0, shared=False) == 8.0
    assert cluster.env_runner_cpus(pools(), "trainer", 3.0, shared=True) == 1.0
    cluster.check_env_runners_fit(config.default_algorithm_config("PPO").env_runners(num_env_runners=8), "rollout", 8.0)
    with pytest.raises(cluster.ResourceError, match="9 env runners of 1 CPUs need 9 CPUs on the role rollout's nodes, "
                                                    "which have 8 for them. Give --num-env-runners 8 or fewer"):
        cluster.check_env_runners_fit(config.default_algorithm_config("PPO").env_runners(num_env_runners=9), "rollout",
                                      8.0)


def test_learners_on_a_role_is_refused_in_one_line_where_rllib_cannot_place_learners_by_resource():
    class Ray252Config:  # Ray 2.52's AlgorithmConfig.learners: no custom_resources_per_learner
        num_learners = 2

        def learners(self, num_learners=None, num_gpus_per_learner=None):
            raise AssertionError("not to be called")

    with pytest.raises(config.OptionError, match=r"--learners-on trainer: this Ray's RLlib \(.*\) cannot place "
                                                 r"learners by a custom resource .*use Ray 2.60, or leave it out"):
        config.place_by_role(Ray252Config(), "trainer", None)
