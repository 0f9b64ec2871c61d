"""Two pools in one Ray cluster, addressed by the labels mpiray gives every node: trainers kept under one leaf
switch, rollouts on nodes of their own, from another batch job that joined the cluster.

    MPIRAY_ROLE=trainer sbatch -N 2 --switches=1 jobs/slurm_multi_node.sh python jobs/recipes/rl_pools.py
    MPIRAY_JOIN=JOB_ID MPIRAY_ROLE=rollout MPIRAY_DRIVER= sbatch -N 1 jobs/slurm_multi_node.sh

The first job's nodes have the role trainer (`--role`, the label mpiray.io/role) and, with `--switches=1`, one leaf
switch (Slurm's topology plugin; the label mpiray.io/switch); its rank 0 runs this driver. The second job, with JOB_ID
the first's, joins the cluster (`--join`) with the role rollout and no driver of its own: its nodes serve until the
first job's driver ends. As a heterogeneous job (the trainer component and the rollout component, each its role):

    sbatch jobs/slurm_hetjob.sh python jobs/recipes/rl_pools.py

What runs: a learner actor on each trainer node, in one placement group that packs them under one switch
(topology_strategy {"mpiray.io/switch": "STRICT_PACK"}, one node each) where every trainer node has a switch; and a
rollout actor per CPU of the rollout pool (label_selector {"mpiray.io/role": "rollout"}). Each learner improves a
linear CartPole policy by hill climbing, its candidates played by the rollout actors. It prints `RECIPE {json}`: each
node's labels, where each learner and each rollout actor ran, and each learner's return before and after.
"""

from __future__ import annotations

import argparse
import json
import time

import gymnasium as gym
import numpy as np
import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

ROLE, SWITCH = "mpiray.io/role", "mpiray.io/switch"


def node_labels() -> dict[str, dict[str, str]]:
    """Every alive node's labels, by node id."""
    return {node["NodeID"]: node.get("Labels", {}) for node in ray.nodes() if node["Alive"]}


def wait_for_pool(role: str, nodes: int, timeout: float) -> list[dict[str, str]]:
    """The labels of role's nodes once there are at least `nodes` of them (the joining job's, started later)."""
    deadline = time.monotonic() + timeout
    while True:
        pool = [labels for labels in node_labels().values() if labels.get(ROLE) == role]
        if len(pool) >= nodes:
            return pool
        if time.monotonic() > deadline:
            raise SystemExit(f"rl_pools: {len(pool)} of {nodes} nodes of role {role} after {timeout:g} s: is the "
                             f"job that gives them (--role {role}) running?")
        time.sleep(1)


def here() -> dict[str, str]:
    labels = node_labels()[ray.get_runtime_context().get_node_id()]
    return {"host": labels.get("mpiray.io/host", ""), "role": labels.get(ROLE, ""),
            "switch": labels.get(SWITCH, ""), "batch_job": labels.get("mpiray.io/batch-job", "")}


def play(weights: np.ndarray, episodes: int, seed: int) -> float:
    """The mean return of the linear policy `weights` over CartPole episodes."""
    env = gym.make("CartPole-v1")
    total = 0.0
    for episode in range(episodes):
        observation, _ = env.reset(seed=seed + episode)
        done = False
        while not done:
            observation, reward, terminated, truncated, _ = env.step(int(observation @ weights > 0))
            total += reward
            done = terminated or truncated
    return total / episodes


class Rollout:
    def where(self) -> dict[str, str]:
        return here()

    def play(self, weights: np.ndarray, episodes: int, seed: int) -> float:
        return play(weights, episodes, seed)


class Learner:
    def __init__(self, seed: int):
        self.random = np.random.default_rng(seed)
        self.weights = self.random.normal(size=4) * 0.1

    def where(self) -> dict[str, str]:
        return here()

    def improve(self, rollouts: list, rounds: int, episodes: int) -> tuple[float, float]:
        """Hill climbing: each round, one candidate per rollout actor; the best replaces the policy if better."""
        best = ray.get(rollouts[0].play.remote(self.weights, episodes, 0))
        first = best
        for _ in range(rounds):
            candidates = [self.weights + self.random.normal(size=4) * 0.5 for _ in rollouts]
            scores = ray.get([actor.play.remote(weights, episodes, 0) for actor, weights in zip(rollouts, candidates)])
            if max(scores) > best:
                best, self.weights = max(scores), candidates[int(np.argmax(scores))]
        return first, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trainer-role", default="trainer")
    parser.add_argument("--rollout-role", default="rollout")
    parser.add_argument("--rollout-nodes", type=int, default=1, help="wait for this many rollout nodes (default: 1)")
    parser.add_argument("--wait", type=float, default=600, help="seconds to wait for them (default: 600)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--episodes", type=int, default=3)
    args = parser.parse_args()
    ray.init()
    trainers = wait_for_pool(args.trainer_role, 1, args.wait)
    wait_for_pool(args.rollout_role, args.rollout_nodes, args.wait)

    # One learner per trainer node, under one switch where the nodes know theirs; the switch label alone decides.
    packed = all(labels.get(SWITCH) for labels in trainers)
    group = placement_group(
        [{"CPU": 1}] * len(trainers), bundle_label_selector=[{ROLE: args.trainer_role}] * len(trainers),
        **({"topology_strategy": {SWITCH: "STRICT_PACK", "ray.io/node-id": "STRICT_SPREAD"}} if packed
           else {"strategy": "STRICT_SPREAD"}))
    ray.get(group.ready(), timeout=args.wait)
    learners = [ray.remote(num_cpus=1)(Learner).options(
        scheduling_strategy=PlacementGroupSchedulingStrategy(group, bundle)).remote(bundle)
        for bundle in range(len(trainers))]
    rollout_cpus = int(sum(node["Resources"].get("CPU", 0) for node in ray.nodes()
                           if node["Alive"] and node.get("Labels", {}).get(ROLE) == args.rollout_role))
    rollouts = [ray.remote(num_cpus=1, label_selector={ROLE: args.rollout_role})(Rollout).remote()
                for _ in range(max(1, rollout_cpus))]
    returns = ray.get([learner.improve.remote(rollouts, args.rounds, args.episodes) for learner in learners])
    report = {
        "labels": sorted(node_labels().values(), key=lambda labels: int(labels.get("mpiray.io/rank", 0))),
        "packed_by_switch": packed,
        "learners": ray.get([learner.where.remote() for learner in learners]),
        "rollouts": ray.get([actor.where.remote() for actor in rollouts]),
        "returns": returns,
    }
    print("RECIPE " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
