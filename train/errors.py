"""Every failure the trainer explains to the user in one line and exits 2 for (bad input or set-up, found before
or instead of training): one base class, caught once (cli._run_reporting_errors). Anything else is a failure of
the training itself: its traceback, exit code 1."""

from __future__ import annotations


class TrainError(ValueError):
    """A message meant for the user: what was wrong and how to fix it."""


class UsageError(TrainError):
    """A command was asked for something that cannot work (bad path, no data)."""


class OptionError(TrainError):
    """A flag value RLlib would reject, caught before any Ray work."""


class AlgorithmNotFoundError(TrainError):
    """--run names no RLlib algorithm."""


class EnvNotFoundError(TrainError):
    """The --env value names no known env, class or gymnasium id."""


class EnvConfigError(TrainError):
    """The env exists but could not be built with the given --env-config."""


class StorageError(TrainError):
    """The results directory cannot be used (not writable, or not shared by all nodes)."""


class ResourceError(TrainError):
    """The run asks for more CPUs/GPUs (or learner slots) than the cluster has."""
