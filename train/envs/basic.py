"""The tutorials' BasicEnv on the gymnasium API."""

from __future__ import annotations

import gymnasium as gym
from gymnasium import spaces

REWARDED_ACTION = 2


class BasicEnv(gym.Env):
    """One-step bandit: 2 states, 5 actions; action 2 earns +1, any other -1.

    Every episode starts in state 0 and ends after one step in state 1, so the
    optimal policy always picks action 2 and its mean return is 1.0.
    `config` is accepted (and ignored) so RLlib can pass its env_config.
    """

    reward_threshold = 1.0

    def __init__(self, config=None):
        self.observation_space = spaces.Discrete(2)
        self.action_space = spaces.Discrete(5)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {}

    def step(self, action):
        reward = 1.0 if int(action) == REWARDED_ACTION else -1.0
        return 1, reward, True, False, {}
