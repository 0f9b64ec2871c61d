"""Frozen option records for the three commands: train, plot, evaluate."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Tuple

DEFAULT_FCNET_HIDDENS = (256, 256)
DEFAULT_STOP_TIMESTEPS = 1_000_000
DEFAULT_CHECKPOINT_SCORE = "env_runners/episode_return_mean"
RETURN_METRIC = "env_runners/episode_return_mean"
ENV_STEPS_METRIC = "num_env_steps_sampled_lifetime"
DEFAULT_MAX_FAILURES = 3
DEFAULT_RESTORE_WAIT_S = 180.0  # the launcher's default --startup-timeout (120 s), a spare's start, and 60



@dataclasses.dataclass(frozen=True)
class TrainOptions:
    """Everything `python -m train` was asked to do; None means "derive it"."""

    run: str = "PPO"
    env: str = "CartPole-v1"
    env_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    algo_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    num_env_runners: Optional[int] = None
    num_samples: int = 1
    num_envs_per_env_runner: int = 1
    num_gpus: float = 0.0
    num_learners: Optional[int] = None
    num_cpus_per_learner: Optional[float] = None
    num_gpus_per_learner: Optional[float] = None
    learners_on: Optional[str] = None  # the role (mpiray --role) whose nodes hold the remote learners
    env_runners_on: Optional[str] = None  # the role whose nodes hold the env runners
    framework: str = "torch"
    lr: Optional[float] = None
    train_batch_size: Optional[int] = None
    fcnet_hiddens: Tuple[int, ...] = DEFAULT_FCNET_HIDDENS
    stop_iters: Optional[int] = None
    stop_timesteps: Optional[int] = DEFAULT_STOP_TIMESTEPS
    stop_reward: Optional[float] = None
    checkpoint_frequency: int = 1
    checkpoints_to_keep: Optional[int] = 3
    checkpoint_score: Optional[str] = DEFAULT_CHECKPOINT_SCORE
    checkpoint_score_order: str = "max"
    storage_path: Optional[str] = None
    name: Optional[str] = None
    resume: bool = False
    max_failures: int = DEFAULT_MAX_FAILURES  # in-job restores of a trial that lost a node
    restore_wait_s: float = DEFAULT_RESTORE_WAIT_S
    seed: Optional[int] = None
    num_cpus: Optional[int] = None
    local_mode: bool = False
    stop_grace_s: float = 8.0
    verbose: bool = False
    mlflow: Optional[str] = None  # "": a file store under the storage path; None: no MLflow (tracking.py)
    wandb: Optional[str] = None  # the W&B project; None: no W&B


@dataclasses.dataclass(frozen=True)
class PlotOptions:
    """Runs to draw and where to write the PNG."""

    run_dirs: Tuple[str, ...]
    output: str = "reward_curves.png"
    labels: Tuple[str, ...] = ()
    title: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class EvaluateOptions:
    """Checkpoint to load and how many episodes to roll out."""

    checkpoint: str
    episodes: int = 10
    explore: bool = False
    seed: Optional[int] = None
    verbose: bool = False
