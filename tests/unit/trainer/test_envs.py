"""The environments of train/envs/: BasicEnv and CorridorEnv, both constructor conventions, and envs by
name, class path or Gymnasium id."""

from __future__ import annotations

import numpy as np
import pytest

from train.envs import BasicEnv, CorridorEnv, EnvFactory, inspect_env
from train.errors import EnvConfigError, EnvNotFoundError


def test_basic_env_rewards_only_action_two():
    env = BasicEnv()
    assert (env.observation_space.n, env.action_space.n) == (2, 5)
    for action in range(5):
        observation, info = env.reset(seed=0)
        assert observation == 0
        observation, reward, terminated, truncated, info = env.step(action)
        assert (observation, reward, terminated, truncated) == (1, 1.0 if action == 2 else -1.0, True, False)


def test_corridor_env_walks_to_the_goal():
    env = CorridorEnv({"corridor_length": 3})
    observation, _ = env.reset(seed=0)
    assert env.observation_space.contains(observation)
    rewards = [env.step(1)[1] for _ in range(3)]
    assert rewards == [-0.1, -0.1, 1.0]
    assert env.reward_threshold == pytest.approx(0.6)
    assert env.step(0)[0] == np.array([2.0], dtype=np.float32)


class KeywordEnv(BasicEnv):
    def __init__(self, reward_scale=1.0):
        super().__init__()
        self.reward_scale = reward_scale


class RequiredConfigEnv(BasicEnv):
    def __init__(self, settings):
        super().__init__()
        self.settings = settings


def test_env_factory_supports_both_constructor_conventions():
    assert EnvFactory(CorridorEnv)({"corridor_length": 4}).corridor_length == 4
    assert EnvFactory(CorridorEnv)({}).corridor_length == 10
    assert EnvFactory(KeywordEnv)({"reward_scale": 2.0}).reward_scale == 2.0
    assert EnvFactory(KeywordEnv)({}).reward_scale == 1.0
    assert EnvFactory(RequiredConfigEnv)({"x": 1}).settings == {"x": 1}
    assert isinstance(EnvFactory(BasicEnv)({}), BasicEnv)


def test_envs_resolve_by_name_class_path_and_gymnasium_id():
    assert inspect_env("BasicEnv").factory == EnvFactory(BasicEnv)
    assert inspect_env("train.envs.corridor:CorridorEnv").factory == EnvFactory(CorridorEnv)
    cartpole = inspect_env("CartPole-v1")
    assert cartpole.factory is None and cartpole.reward_threshold == 475.0
    with pytest.raises(EnvNotFoundError):
        inspect_env("NoSuchEnv-v0")
    with pytest.raises(EnvConfigError):
        inspect_env("CartPole-v1", {"no_such_kwarg": 1})
