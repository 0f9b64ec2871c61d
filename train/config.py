"""Options -> RLlib AlgorithmConfig, stop criteria and checkpoint policy (no Ray started)."""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import math
from typing import Any, Mapping

import gymnasium as gym

from mpiray.driver import LEARNER_SLOT, ROLE_SHARE, ray_version, role_resource
from train.cluster import HEAD_RESOURCE
from train.envs import EnvChoice
from train.errors import AlgorithmNotFoundError, OptionError
from train.options import ENV_STEPS_METRIC, RETURN_METRIC, TrainOptions

FRAMEWORKS = ("torch",)
# Spread bundles over nodes so env runners are not packed onto the head node.
PLACEMENT_STRATEGY = "SPREAD"
SWEEP_PLACEMENT_STRATEGY = "PACK"  # several trials: each on as few nodes as it fits, so more trials run at once
# Ray's own resource of the head node: a bundle asking for a sliver of it is placed there.
HEAD_NODE = {HEAD_RESOURCE: 0.001}
# Losing a node: its env runners' actors restart (once the placement group finds room again) and
# sampling goes on with the healthy ones; RLlib probes the lost ones before each training step
# for at most this long (its default, 30 s, would stall every iteration while a node is gone).
HEALTH_PROBE_TIMEOUT_S = 5.0
# How long an env runner that failed on its own waits before it restarts (RLlib's default: 60 s).
RESTART_DELAY_S = 5.0




@dataclasses.dataclass(frozen=True)
class ScoreMetricCopy:
    """RLlib on_train_result hook: copy a nested metric to a top-level key.

    Tune's checkpoint manager looks the score up in the unflattened result, so a
    nested metric like env_runners/episode_return_mean would be ignored and
    checkpoints kept by age. NaN until the metric exists (no finished episode).
    """

    metric: str

    def __call__(self, *, result: dict, **kwargs) -> None:
        result[self.metric] = lookup_metric(result, self.metric)


LEARNERS_KEY = "mpiray_learners"  # a result's learners: their nodes' addresses, comma separated
ENV_RUNNERS_KEY = "mpiray_env_runners"  # a result's remote env runners: their nodes' addresses, comma separated


def _node_address(_=None) -> str:
    import ray

    return ray.util.get_node_ip_address()


@dataclasses.dataclass(frozen=True)
class LearnerPlaces:
    """RLlib on_train_result hook: where the learners and the remote env runners run, asked of them (once),
    into every result as LEARNERS_KEY and ENV_RUNNERS_KEY; the driver says it once per trial (train/progress.py)."""

    def __call__(self, *, algorithm, result: dict, **kwargs) -> None:
        places = getattr(algorithm, "_mpiray_places", None)
        if places is None:
            group = algorithm.learner_group
            if group is None or group.is_local:  # the local learner: in the algorithm's own process
                learners = [_node_address()]
            else:
                learners = [answer.get() for answer in group.foreach_learner(_node_address) if answer.ok]
            runners = algorithm.env_runner_group
            env_runners = [] if runners is None or runners.num_remote_env_runners() == 0 else \
                list(runners.foreach_env_runner(_node_address, local_env_runner=False, timeout_seconds=30))
            places = algorithm._mpiray_places = (",".join(learners), ",".join(env_runners))
        result[LEARNERS_KEY], result[ENV_RUNNERS_KEY] = places


def algorithm_names() -> list[str]:
    """Names --run accepts (RLlib's algorithm registry)."""
    from ray.rllib.algorithms.registry import ALGORITHMS

    return sorted(ALGORITHMS)


def resolve_algorithm(run: str) -> str:
    """Canonical RLlib name for ``run`` (case-insensitive); AlgorithmNotFoundError lists valid ones."""
    by_lower_name = {name.lower(): name for name in algorithm_names()}
    if run.lower() in by_lower_name:
        return by_lower_name[run.lower()]
    close = difflib.get_close_matches(run.upper(), algorithm_names(), n=2, cutoff=0.5)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise AlgorithmNotFoundError(
        f"unknown --run {run!r}.{hint} Valid algorithms: {', '.join(algorithm_names())}."
    )


def default_algorithm_config(algorithm: str):
    """RLlib's default AlgorithmConfig for a canonical algorithm name."""
    from ray.rllib.algorithms.registry import ALGORITHMS

    _, config = ALGORITHMS[algorithm]()
    return config


def build_algorithm_config(options: TrainOptions, env: EnvChoice, num_env_runners: int):
    """The AlgorithmConfig the flags describe; ``num_env_runners`` already resolved."""
    if options.framework not in FRAMEWORKS:
        raise OptionError(
            f"--framework {options.framework!r}: RLlib's new API stack supports only "
            f"{', '.join(FRAMEWORKS)} (tf/tf2 were removed)."
        )
    learners = learners_of(options)
    config = (
        default_algorithm_config(resolve_algorithm(options.run))
        .framework(options.framework)
        .environment(env=env.name, env_config=dict(options.env_config))
        .env_runners(
            num_env_runners=num_env_runners,
            num_envs_per_env_runner=options.num_envs_per_env_runner,
        )
        .learners(**learners)
        .resources(placement_strategy=PLACEMENT_STRATEGY if options.num_samples == 1 else SWEEP_PLACEMENT_STRATEGY)
        .fault_tolerance(
            restart_failed_env_runners=True,
            env_runner_health_probe_timeout_s=HEALTH_PROBE_TIMEOUT_S,
            delay_between_env_runner_restarts_s=RESTART_DELAY_S,
        )
        .rl_module(model_config={"fcnet_hiddens": list(options.fcnet_hiddens)})
    )
    if needs_flattening(env.observation_space):
        config.env_runners(env_to_module_connector=flatten_observations)
    on_train_result: list = [LearnerPlaces()]
    if options.checkpoint_score and "/" in options.checkpoint_score:
        on_train_result.append(ScoreMetricCopy(options.checkpoint_score))
    config.callbacks(on_train_result=on_train_result)
    if options.seed is not None:
        if options.num_samples > 1:
            raise OptionError(f"--seed with --num-samples {options.num_samples} would train {options.num_samples} "
                              "identical trials: leave --seed out (each trial then has a seed of its own)")
        config.debugging(seed=options.seed)
    config.training(**_training_settings(config, options, learners["num_learners"]))
    return _apply_algo_config(config, options.algo_config)


def takes(algorithm_config, method: str, keyword: str) -> bool:
    """Whether this Ray's AlgorithmConfig.method takes keyword (2.52's lacks custom_resources_per_learner and
    custom_resources_for_main_process: a TypeError there)."""
    return keyword in inspect.signature(getattr(algorithm_config, method)).parameters


def pin_to_head(algorithm_config) -> bool:
    """Place the algorithm's main process (the Tune trainable, with its local learner if it has no remote
    ones) on the head node, which is already the cluster's single point of failure (its GCS): then losing
    another node costs env runners only, which RLlib restarts, or a remote learner (see spread_learners).
    Merged into what the config already asks; False where this Ray cannot say it."""
    if not takes(algorithm_config, "resources", "custom_resources_for_main_process"):
        return False
    asked = dict(getattr(algorithm_config, "custom_resources_for_main_process", None) or {})
    algorithm_config.resources(custom_resources_for_main_process={**asked, **HEAD_NODE})
    return True


def spread_learners(algorithm_config) -> bool:
    """Each remote learner takes one of mpiray's learner slots, so that N learners land on N slots: one per
    node (or per GPU) over the whole cluster, never all on the head. Merged into what the config already asks
    (RLlib replaces the whole dict); False where this Ray cannot say it, or there is no remote learner."""
    if algorithm_config.num_learners == 0 or not takes(algorithm_config, "learners", "custom_resources_per_learner"):
        return False
    asked = dict(getattr(algorithm_config, "custom_resources_per_learner", None) or {})
    asked.setdefault(LEARNER_SLOT, 1)
    algorithm_config.learners(custom_resources_per_learner=asked)
    return True


def place_by_role(algorithm_config, learners_on: str | None, env_runners_on: str | None) -> None:
    """--learners-on / --env-runners-on: each remote learner or env runner asks ROLE_SHARE of its role's custom
    resource (mpiray --role), so it runs on that pool's nodes; merged into what the config already asks (RLlib
    replaces the whole dict). OptionError where it cannot be said: no remote learner, or a Ray without
    custom_resources_per_learner."""
    if env_runners_on:
        asked = dict(algorithm_config.custom_resources_per_env_runner or {})
        algorithm_config.env_runners(custom_resources_per_env_runner={**asked, role_resource(env_runners_on): ROLE_SHARE})
    if not learners_on:
        return
    if algorithm_config.num_learners == 0:
        raise OptionError(f"--learners-on {learners_on} places remote learners, and this run has none (its one learner "
                          "runs in the algorithm's main process, on the head): give --num-learners N")
    if not takes(algorithm_config, "learners", "custom_resources_per_learner"):
        raise OptionError(f"--learners-on {learners_on}: this Ray's RLlib ({ray_version()}) cannot place learners by a "
                          "custom resource (no custom_resources_per_learner): use Ray 2.60, or leave it out")
    asked = dict(getattr(algorithm_config, "custom_resources_per_learner", None) or {})
    algorithm_config.learners(custom_resources_per_learner={**asked, role_resource(learners_on): ROLE_SHARE})


def learners_of(options: TrainOptions) -> dict[str, Any]:
    """--num-learners, --num-cpus-per-learner, --num-gpus-per-learner; else --num-gpus as their shorthand."""
    explicit = options.num_learners is not None or options.num_gpus_per_learner is not None
    if explicit and options.num_gpus:
        raise OptionError("give either --num-gpus (a shorthand) or --num-learners / --num-gpus-per-learner, not both")
    if explicit:
        learners, gpus = options.num_learners or 0, options.num_gpus_per_learner or 0.0
        if learners == 0 and gpus > 1:
            raise OptionError(f"--num-gpus-per-learner {gpus:g} without --num-learners: the local learner uses "
                              "at most 1 GPU; give --num-learners N for N learners")
        settings: dict[str, Any] = {"num_learners": learners, "num_gpus_per_learner": gpus}
    else:
        settings = learner_settings(options.num_gpus)
    if options.num_cpus_per_learner is not None:
        settings["num_cpus_per_learner"] = options.num_cpus_per_learner
    return settings


def learner_settings(num_gpus: float) -> dict[str, Any]:
    """--num-gpus: <= 1 GPU on the local learner; N > 1 whole GPUs as N remote learners."""
    if num_gpus < 0:
        raise OptionError(f"--num-gpus must be >= 0, got {num_gpus}")
    if num_gpus <= 1:
        return {"num_learners": 0, "num_gpus_per_learner": num_gpus}
    if not float(num_gpus).is_integer():
        raise OptionError(f"--num-gpus above 1 must be a whole number (one learner per GPU), got {num_gpus}")
    return {"num_learners": int(num_gpus), "num_gpus_per_learner": 1}


def stop_criteria(options: TrainOptions, env: EnvChoice) -> dict[str, float]:
    """Tune stop dict; --stop-reward defaults to the env's reward threshold."""
    stop_reward = options.stop_reward if options.stop_reward is not None else env.reward_threshold
    criteria = {
        "training_iteration": options.stop_iters,
        ENV_STEPS_METRIC: options.stop_timesteps,
        RETURN_METRIC: stop_reward,
    }
    # --stop-reward none is +inf (never reached), distinct from None (use the env's threshold).
    return {metric: value for metric, value in criteria.items() if value is not None and value != math.inf}


def checkpoint_config(options: TrainOptions):
    """Tune CheckpointConfig: every N iterations, keep the best K by score, and one at the end."""
    from ray.tune import CheckpointConfig

    return CheckpointConfig(
        checkpoint_frequency=options.checkpoint_frequency,
        num_to_keep=options.checkpoints_to_keep,
        checkpoint_score_attribute=options.checkpoint_score,
        checkpoint_score_order=options.checkpoint_score_order,
        checkpoint_at_end=True,
    )


def needs_flattening(space: gym.Space) -> bool:
    """RLlib's default models take flat Box observations; Discrete/Dict/Tuple need one-hot/flattening."""
    return not isinstance(space, gym.spaces.Box)


def flatten_observations(env=None, spaces=None, device=None):
    """env_to_module connector factory: one-hot/flatten non-Box observations."""
    from ray.rllib.connectors.env_to_module import FlattenObservations

    return FlattenObservations()


def _training_settings(config, options: TrainOptions, num_learners: int) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    if options.lr is not None:
        settings["lr"] = options.lr
    if options.train_batch_size is not None:
        per_learner = math.ceil(options.train_batch_size / max(1, num_learners))
        settings["train_batch_size_per_learner"] = per_learner
        # PPO-style algorithms reject a minibatch larger than the batch.
        minibatch = getattr(config, "minibatch_size", None)
        if minibatch and minibatch > per_learner and "minibatch_size" not in options.algo_config:
            settings["minibatch_size"] = per_learner
    return settings


def _apply_algo_config(config, algo_config: Mapping[str, Any]):
    known = set(config.to_dict()) | set(vars(config))
    unknown = [key for key in algo_config if key not in known and not hasattr(config, key)]
    if unknown:
        suggestions = {key: difflib.get_close_matches(key, sorted(known), n=3) for key in unknown}
        raise OptionError(
            "--algo-config: unknown AlgorithmConfig key(s) "
            + "; ".join(f"{key!r} (close: {', '.join(close) or 'none'})" for key, close in suggestions.items())
        )
    try:
        return config.update_from_dict(dict(algo_config))
    except (AttributeError, TypeError, ValueError) as error:
        raise OptionError(f"--algo-config {dict(algo_config)}: {error}") from error


def lookup_metric(result: Mapping[str, Any], metric: str) -> float:
    """A metric from a (nested) Tune result by its flat name, NaN when absent."""
    if metric in result:
        return _as_float(result[metric])
    value: Any = result
    for part in metric.split("/"):
        if not isinstance(value, Mapping) or part not in value:
            return math.nan
        value = value[part]
    return _as_float(value)


def _as_float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan
