"""A corridor walk with a Box observation: the shape most user envs have."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

STEP_PENALTY = -0.1
GOAL_REWARD = 1.0
LEFT, RIGHT = 0, 1


class CorridorEnv(gym.Env):
    """Walk from cell 0 to the goal at `corridor_length`; actions: 0 left, 1 right.

    Observation: Box(1,) float32 position. Reward: -0.1 per step, +1.0 on the
    step that reaches the goal. Episodes are truncated after
    `max_episode_steps` (default 4 x length). env_config keys:
    `corridor_length` (default 10), `max_episode_steps`.
    The best return is 1.0 - 0.1 * (length - 1); `reward_threshold` (the default
    --stop-reward) allows two wasted steps on average below that.
    """

    def __init__(self, config=None):
        config = dict(config or {})
        self.corridor_length = int(config.get("corridor_length", 10))
        if self.corridor_length < 1:
            raise ValueError(f"corridor_length must be >= 1, got {self.corridor_length}")
        self.max_episode_steps = int(config.get("max_episode_steps", 4 * self.corridor_length))
        best_return = GOAL_REWARD + STEP_PENALTY * (self.corridor_length - 1)
        self.reward_threshold = round(best_return + 2 * STEP_PENALTY, 6)
        self.observation_space = spaces.Box(
            0.0, float(self.corridor_length), shape=(1,), dtype=np.float32
        )
        self.action_space = spaces.Discrete(2)
        self.position = 0
        self.steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = 0
        self.steps = 0
        return self._observation(), {}

    def step(self, action):
        move = 1 if int(action) == RIGHT else -1
        self.position = max(0, self.position + move)
        self.steps += 1
        terminated = self.position >= self.corridor_length
        truncated = not terminated and self.steps >= self.max_episode_steps
        reward = GOAL_REWARD if terminated else STEP_PENALTY
        return self._observation(), reward, terminated, truncated, {}

    def _observation(self):
        return np.array([self.position], dtype=np.float32)
