"""Example environments, and how an ``--env`` value becomes an environment.

An ``--env`` value is one of, in this order:

1. a name in :data:`ENVS` (``BasicEnv``, ``Corridor``, or one you added with
   :func:`register_env`);
2. ``package.module:Class``, a ``gymnasium.Env`` subclass importable on every
   node (the repository root is on the workers' path when you start from it).
   A constructor whose first parameter is required or named ``config`` /
   ``env_config`` gets the ``--env-config`` dict (RLlib's convention); any
   other constructor gets the dict's items as keyword arguments;
3. any gymnasium id, e.g. ``CartPole-v1``, or ``package.module:MyEnv-v0`` for an
   env that ``package.module`` registers with ``gymnasium.register`` on import.
   ``--env-config`` becomes keyword arguments of ``gymnasium.make``.

To add your env by name for every run, add a line to :data:`ENVS`; from your
own driver script, call ``register_env("MyEnv", MyEnv)`` before
``train.cli.main([...,"--env", "MyEnv"])``.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import inspect
from typing import Any, Mapping, Optional, Union

import gymnasium as gym

from train.envs.basic import BasicEnv
from train.envs.corridor import CorridorEnv
from train.errors import EnvConfigError, EnvNotFoundError

ENVS: dict[str, Union[type, str]] = {
    "BasicEnv": BasicEnv,
    "Corridor": CorridorEnv,
}

# A first constructor parameter with one of these names receives the whole env_config dict.
CONFIG_PARAMETER_NAMES = ("config", "env_config", "env_context", "context", "cfg")
# Shown when an env is not found: the classic ones tutorial users try first.
SUGGESTED_GYM_IDS = ("CartPole-v1", "MountainCar-v0", "Acrobot-v1", "Pendulum-v1")




@dataclasses.dataclass(frozen=True)
class EnvFactory:
    """Builds an env class from RLlib's env_config, whichever constructor convention it uses."""

    env_class: type

    def __call__(self, env_config: Optional[Mapping[str, Any]] = None) -> gym.Env:
        env_config = env_config if env_config is not None else {}
        if _takes_config_dict(self.env_class):
            return self.env_class(env_config)
        return self.env_class(**dict(env_config))


@dataclasses.dataclass(frozen=True)
class EnvChoice:
    """A resolved --env value and what a probe instance said about it."""

    name: str
    factory: Optional[EnvFactory]  # None: a gymnasium id that RLlib builds itself
    observation_space: gym.Space
    action_space: gym.Space
    reward_threshold: Optional[float]


def register_env(name: str, env_class: Union[type, str]) -> None:
    """Make ``--env name`` build ``env_class`` (a class or a ``"module:Class"`` path)."""
    ENVS[name] = env_class


def inspect_env(spec: str, env_config: Optional[Mapping[str, Any]] = None) -> EnvChoice:
    """Resolve ``spec`` and build one instance to check it and read its spaces.

    Raises EnvNotFoundError or EnvConfigError with a message that lists valid choices.
    """
    env_config = dict(env_config or {})
    env_class = _find_env_class(spec)
    factory = EnvFactory(env_class) if env_class is not None else None
    env = _build_probe(spec, factory, env_config)
    try:
        return EnvChoice(
            name=spec,
            factory=factory,
            observation_space=env.observation_space,
            action_space=env.action_space,
            reward_threshold=_reward_threshold(env),
        )
    finally:
        env.close()


def known_env_names() -> list[str]:
    """Names of the built-in/registered envs followed by all gymnasium ids."""
    return list(ENVS) + sorted(gym.envs.registry)


def _find_env_class(spec: str) -> Optional[type]:
    if spec in ENVS:
        entry = ENVS[spec]
        return _import_attribute(entry) if isinstance(entry, str) else entry
    if ":" not in spec:
        return None
    module_name, attribute = spec.split(":", 1)
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise EnvNotFoundError(
            f"--env {spec!r}: cannot import module {module_name!r} ({error}). "
            "The module must be importable from the directory you start in."
        ) from error
    candidate = getattr(module, attribute, None)
    # Not an attribute: gymnasium's "module:EnvId-v0" form, the import registered the id.
    return candidate if isinstance(candidate, type) else None


def _import_attribute(path: str) -> type:
    module_name, attribute = path.split(":", 1)
    return getattr(importlib.import_module(module_name), attribute)


def _build_probe(spec: str, factory: Optional[EnvFactory], env_config: dict) -> gym.Env:
    try:
        if factory is not None:
            return factory(env_config)
        return gym.make(spec, **env_config)
    except gym.error.DependencyNotInstalled as error:
        raise EnvConfigError(f"--env {spec!r} needs a package that is not installed: {error}") from error
    except gym.error.Error as error:
        raise EnvNotFoundError(_not_found_message(spec, error)) from error
    except (TypeError, ValueError, KeyError) as error:
        raise EnvConfigError(
            f"--env {spec!r} could not be built with --env-config {env_config}: {error}"
        ) from error


def _not_found_message(spec: str, error: Exception) -> str:
    close = difflib.get_close_matches(spec, known_env_names(), n=3, cutoff=0.6)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    return (
        f"unknown --env {spec!r} ({error}).{hint}\n"
        f"Valid: a built-in env ({', '.join(ENVS)}); a class path 'package.module:Class'; "
        f"or a gymnasium id such as {', '.join(SUGGESTED_GYM_IDS)} "
        f"({len(gym.envs.registry)} ids registered; see gymnasium.pprint_registry())."
    )


def _reward_threshold(env: gym.Env) -> Optional[float]:
    if env.spec is not None and env.spec.reward_threshold is not None:
        return float(env.spec.reward_threshold)
    threshold = getattr(env.unwrapped, "reward_threshold", None)
    return float(threshold) if threshold is not None else None


def _takes_config_dict(env_class: type) -> bool:
    try:
        parameters = list(inspect.signature(env_class).parameters.values())
    except (TypeError, ValueError):
        return True
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if not parameters or parameters[0].kind not in positional:
        return False
    first = parameters[0]
    return first.default is inspect.Parameter.empty or first.name in CONFIG_PARAMETER_NAMES
