"""A user's own RLlib script, as it would be written without mpiray: PPO on CartPole with N remote learners
(torch DDP over gloo), two training iterations. Nothing in it knows of mpiray: a plain ray.init().
Prints PLAIN {json}: each learner's node address and the GLOO_SOCKET_IFNAME it sees, and the returns.

    python plain_rllib.py N [ITERATIONS]
"""

import json
import os
import sys
import time

import ray
from ray.rllib.algorithms.ppo import PPOConfig

learners = int(sys.argv[1])
iterations = int(sys.argv[2]) if len(sys.argv) > 2 else 2
ray.init()
config = (
    PPOConfig()
    .environment("CartPole-v1")
    .env_runners(num_env_runners=1)
    .learners(num_learners=learners)
    .training(train_batch_size_per_learner=500, minibatch_size=250, num_epochs=2)
)
algorithm = config.build_algo()
returns, seconds = [], []
for _ in range(iterations):
    started = time.monotonic()
    returns.append(algorithm.train()["env_runners"]["episode_return_mean"])
    seconds.append(round(time.monotonic() - started, 3))
seen = algorithm.learner_group.foreach_learner(
    lambda learner: (ray.util.get_node_ip_address(), os.environ.get("GLOO_SOCKET_IFNAME")))
print("PLAIN " + json.dumps({"learners": [answer.get() for answer in seen if answer.ok], "returns": returns,
                            "iteration_s": seconds}), flush=True)
algorithm.stop()
