"""``python -m train evaluate``: roll out a checkpointed policy and print its returns."""

from __future__ import annotations

import pickle
import statistics
import sys
from pathlib import Path
from typing import MutableMapping

from train.cluster import ray_cluster
from train.envs import inspect_env
from train.errors import UsageError
from train.options import EvaluateOptions

CHECKPOINT_MARKER = "rllib_checkpoint.json"
CTOR_ARGS_FILE = "class_and_ctor_args.pkl"


def evaluate_checkpoint(options: EvaluateOptions, environ: MutableMapping[str, str]) -> int:
    """Load the checkpoint, run ``options.episodes`` episodes, print mean/min/max return."""
    if options.episodes < 1:
        raise UsageError(f"--episodes must be >= 1, got {options.episodes}")
    checkpoint = find_checkpoint(Path(options.checkpoint))
    algorithm_class, algorithm_config = evaluation_config(checkpoint, options)
    env = inspect_env(algorithm_config.env, algorithm_config.env_config)
    print(f"[train] evaluating {checkpoint} ({algorithm_class.__name__} on {env.name})",
          file=sys.stderr, flush=True)
    with ray_cluster(environ, num_cpus=1):
        if env.factory is not None:
            from ray.tune import register_env

            register_env(env.name, env.factory)
        returns = _episode_returns(algorithm_class, algorithm_config, checkpoint, options)
    print(format_returns(returns), flush=True)
    return 0


def find_checkpoint(path: Path) -> Path:
    """``path`` if it is an RLlib checkpoint, else the newest checkpoint_* below it."""
    if (path / CHECKPOINT_MARKER).is_file():
        return path
    if not path.exists():
        raise UsageError(f"checkpoint {path} does not exist")
    found = [marker.parent for marker in path.rglob(CHECKPOINT_MARKER)]
    if not found:
        raise UsageError(
            f"no RLlib checkpoint under {path}: expected a checkpoint_* directory with {CHECKPOINT_MARKER}, "
            "or a trial/experiment directory containing one"
        )
    return max(found, key=lambda checkpoint: (checkpoint.stat().st_mtime, checkpoint.name))


def evaluation_config(checkpoint: Path, options: EvaluateOptions):
    """(Algorithm class, its saved config) made to sample locally: no env-runner actors, no GPU."""
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    with open(checkpoint / CTOR_ARGS_FILE, "rb") as ctor_file:
        ctor_info = pickle.load(ctor_file)
    algorithm_class = ctor_info["class"]
    config_state = ctor_info["ctor_args_and_kwargs"][0][0]
    config = AlgorithmConfig.from_state(config_state)
    config.env_runners(num_env_runners=0, num_envs_per_env_runner=1)
    config.learners(num_learners=0, num_gpus_per_learner=0)
    config.evaluation(evaluation_interval=None, evaluation_num_env_runners=0)
    if options.seed is not None:
        config.debugging(seed=options.seed)
    return algorithm_class, config


def format_returns(returns: list[float]) -> str:
    """'episodes: 10  mean return: 1.000  min: 1.000  max: 1.000'."""
    return (
        f"episodes: {len(returns)}  mean return: {statistics.fmean(returns):.3f}  "
        f"min: {min(returns):.3f}  max: {max(returns):.3f}"
    )


def _episode_returns(algorithm_class, algorithm_config, checkpoint: Path, options: EvaluateOptions) -> list[float]:
    algorithm = algorithm_class.from_checkpoint(str(checkpoint), config=algorithm_config)
    try:
        episodes = algorithm.env_runner.sample(num_episodes=options.episodes, explore=options.explore)
        return [float(episode.get_return()) for episode in episodes][: options.episodes]
    finally:
        algorithm.stop()
