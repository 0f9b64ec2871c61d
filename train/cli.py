"""Command line: ``python -m train [train|plot|evaluate] ...`` -> option records -> run."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import traceback
from typing import Any, Callable, Mapping, Optional, Sequence

from train.errors import TrainError
from train.options import (
    DEFAULT_CHECKPOINT_SCORE,
    DEFAULT_FCNET_HIDDENS,
    DEFAULT_MAX_FAILURES,
    DEFAULT_RESTORE_WAIT_S,
    DEFAULT_STOP_TIMESTEPS,
    EvaluateOptions,
    PlotOptions,
    TrainOptions,
)
from train.values import (
    int_tuple,
    json_object,
    non_negative_float,
    non_negative_int,
    optional_float,
    optional_int,
    optional_str,
    positive_float,
    positive_int,
    reward_target,
    str_tuple,
)

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
SUBCOMMANDS = ("train", "plot", "evaluate")
DEFAULT_STOP_GRACE_S = 8.0  # standalone (no launcher): a qdel'd job's kill_delay is often 10 s
STOP_GRACE_MARGIN_S = 2.0

DESCRIPTION = """\
Train an RLlib algorithm with Ray Tune on the Ray cluster in RAY_ADDRESS (as set by
start_ray.py), or on a local Ray when RAY_ADDRESS is unset.

Other commands:
  python -m train plot RUN_DIR... -o curves.png    reward curves of one or more runs
  python -m train evaluate CHECKPOINT --episodes N  roll out a saved policy
"""

EPILOG = """\
Outputs: STORAGE_PATH/NAME/<trial>/ holds progress.csv, result.json, TensorBoard
events (tensorboard --logdir STORAGE_PATH/NAME) and checkpoint_* directories.
On SIGTERM (walltime, scancel, preemption) or Ctrl-C a checkpoint is saved before exiting.
The same command continues the experiment from its last checkpoint: with --name, or in a
requeued launcher job (same job id), by itself; a finished one is not trained again.
Exit codes: 0 done, 1 training failed, 2 bad arguments or setup, 128+N stopped by signal N
after saving.
"""


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``python -m train``; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv.pop(0) if argv and argv[0] in SUBCOMMANDS else "train"
    try:
        options = PARSERS[command](os.environ).parse_args(argv)
    except SystemExit as parser_exit:  # --help, or a bad flag already explained by argparse
        return int(parser_exit.code or 0)
    from train.console import quiet

    with contextlib.nullcontext() if command == "plot" or options.verbose else quiet(os.environ):
        if getattr(options, "mpi", False):
            import mpiray

            mpiray.init()  # rank 0 returns connected to the cluster; the others serve, then exit with its code
        return _run_reporting_errors(RUNNERS[command], OPTION_BUILDERS[command](options))


def build_train_parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    """Flags of the (default) train command; the launcher's MPIRAY_STOP_GRACE sets --stop-grace's default."""
    parser = argparse.ArgumentParser(
        prog="python -m train",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_algorithm_flags(parser)
    _add_resource_flags(parser)
    _add_stopping_flags(parser)
    _add_checkpoint_flags(parser, environ)
    parser.add_argument("--mpi", action="store_true",
                        help="start the Ray cluster over this program's MPI ranks first, with mpiray.init() "
                        "(mpirun -np N python -m train --mpi; MPIRAY_* variables set its options): rank 0 "
                        "trains, the other ranks serve as Ray nodes")
    _add_verbose_flag(parser)
    return parser


def _add_verbose_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--verbose", action="store_true",
                        help="show everything Ray, Tune and RLlib print (by default their notes on their own "
                             "internals, listed in train/console.py, and one line per checkpoint are left out)")


def _add_algorithm_flags(parser: argparse.ArgumentParser) -> None:
    algorithm = parser.add_argument_group("algorithm and environment")
    algorithm.add_argument("--run", default="PPO",
                           help="RLlib algorithm name, e.g. PPO, DQN, APPO, IMPALA, SAC (default: %(default)s)")
    algorithm.add_argument("--env", "--name-env", dest="env", default="CartPole-v1",
                           help="gymnasium id, built-in env (BasicEnv, Corridor), 'package.module:Class' "
                                "or 'package.module:EnvId-v0' (default: %(default)s)")
    algorithm.add_argument("--env-config", type=json_object, default={},
                           help="JSON object passed to the env constructor, e.g. '{\"corridor_length\": 5}'")
    algorithm.add_argument("--framework", default="torch",
                           help="deep-learning framework; RLlib now supports torch only")
    algorithm.add_argument("--lr", type=positive_float, default=None, help="learning rate (default: the algorithm's)")
    algorithm.add_argument("--train-batch-size", type=positive_int, default=None,
                           help="env steps per training batch, split over learners "
                                "(default: the algorithm's, e.g. PPO 4000, DQN 32)")
    algorithm.add_argument("--fcnet-hiddens", type=int_tuple, default=DEFAULT_FCNET_HIDDENS,
                           help="hidden layer sizes, comma separated (default: 256,256)")
    algorithm.add_argument("--algo-config", type=json_object, default={},
                           help="JSON object of further AlgorithmConfig settings, "
                                "e.g. '{\"num_epochs\": 6, \"gamma\": 0.95}'")
    algorithm.add_argument("--seed", type=non_negative_int, default=None, help="random seed for env runners and learners")


def _add_resource_flags(parser: argparse.ArgumentParser) -> None:
    resources = parser.add_argument_group("resources")
    resources.add_argument("--num-env-runners", "--worker-num", dest="num_env_runners", type=non_negative_int, default=None,
                           help="sampling actors (old name: num_workers); default: all cluster CPUs minus "
                                "the algorithm/learner's one; 0 samples in the learner process")
    resources.add_argument("--num-samples", type=positive_int, default=1,
                           help="trials of the same config, each with Ray's own random seed (default: 1); each "
                                "trial defaults to the head node's CPUs, and trials that do not fit wait: on an "
                                "elastic cluster (--autoscale) Ray's autoscaler adds nodes for them")
    resources.add_argument("--num-envs-per-env-runner", type=positive_int, default=1,
                           help="vectorized envs per env runner (default: %(default)s)")
    resources.add_argument("--num-gpus", type=non_negative_float, default=0.0,
                           help="GPUs for learning: up to 1 on the local learner, N>1 as N learners of 1 GPU each "
                                "(default: 0); shorthand for --num-learners N --num-gpus-per-learner 1")
    resources.add_argument("--num-learners", type=non_negative_int, default=None,
                           help="remote learners, spread over the cluster's nodes (one per learner slot: each of "
                                "mpiray's nodes offers one, or one per GPU); they train together (torch DDP: gloo "
                                "on CPUs, NCCL on GPUs); 0: one local learner in the algorithm's process (default)")
    resources.add_argument("--num-cpus-per-learner", type=positive_float, default=None,
                           help="CPUs of each learner (default: 1 for a CPU learner, 0 beside a GPU)")
    resources.add_argument("--num-gpus-per-learner", type=non_negative_float, default=None,
                           help="GPUs of each learner (default: 0)")
    resources.add_argument("--learners-on", metavar="ROLE", default=None,
                           help="the remote learners on the nodes of this role only (mpiray --role ROLE; the "
                                "custom resource mpiray_role_ROLE), e.g. a hetjob's GPU component")
    resources.add_argument("--env-runners-on", metavar="ROLE", default=None,
                           help="the env runners on the nodes of this role only, e.g. a --join job's rollout pool; "
                                "their default number is then that pool's CPUs")
    resources.add_argument("--num-cpus", type=positive_int, default=None,
                           help="legacy: CPUs of the local Ray started when RAY_ADDRESS is unset; "
                                "ignored on the launcher's cluster")
    resources.add_argument("--local-mode", action="store_true",
                           help="legacy: Ray's local mode is gone; now means --num-env-runners 0")


def _add_stopping_flags(parser: argparse.ArgumentParser) -> None:
    stopping = parser.add_argument_group("stopping (whichever comes first; 'none' disables)")
    stopping.add_argument("--stop-iters", type=optional_int, default=None,
                          help="training iterations (default: no limit)")
    stopping.add_argument("--stop-timesteps", type=optional_int, default=DEFAULT_STOP_TIMESTEPS,
                          help="env steps sampled (default: %(default)s)")
    stopping.add_argument("--stop-reward", type=reward_target, default=None,
                          help="mean episode return (env_runners/episode_return_mean); "
                               "default: the env's reward threshold, e.g. 475 for CartPole-v1")


def _add_checkpoint_flags(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> None:
    checkpoints = parser.add_argument_group("checkpoints and results")
    checkpoints.add_argument("--checkpoint-frequency", type=non_negative_int, default=1,
                             help="checkpoint every N iterations, 0: only at the end (default: %(default)s, "
                                  "so a walltime kill loses at most the running iteration)")
    checkpoints.add_argument("--checkpoints-to-keep", type=optional_int, default=3,
                             help="keep the best N checkpoints ('none': all) (default: %(default)s)")
    checkpoints.add_argument("--checkpoint-score", type=optional_str, default=DEFAULT_CHECKPOINT_SCORE,
                             help="metric that ranks checkpoints (default: %(default)s; 'none': keep the newest)")
    checkpoints.add_argument("--checkpoint-score-order", choices=("max", "min"), default="max",
                             help="whether a higher or lower score is better (default: %(default)s)")
    checkpoints.add_argument("--storage-path", default=None,
                             help="results root; must be shared by all nodes (default: results/ beside "
                                  "the launcher's logs/, else ./results)")
    checkpoints.add_argument("--name", default=None, help="experiment name (default: ALGO_ENV_DATE-TIME)")
    checkpoints.add_argument("--resume", action="store_true",
                             help="continue the newest unfinished ALGO_ENV_* experiment (an unfinished --name "
                                  "or a requeued job's own experiment continues without it); a finished one "
                                  "exits 0")
    checkpoints.add_argument("--max-failures", type=non_negative_int, default=DEFAULT_MAX_FAILURES,
                             help="a trial that failed because a node was lost (a remote learner's, or the "
                                  "algorithm's) continues from its last checkpoint in this job, at most N times, once "
                                  "the nodes left (or a spare: mpiray --spares) hold it (default: %(default)s; 0: "
                                  "the trainer exits 1, and a rerun continues)")
    checkpoints.add_argument("--restore-wait", dest="restore_wait_s", type=positive_float,
                             default=DEFAULT_RESTORE_WAIT_S,
                             help="seconds such a trial waits for the cluster to hold its saved config again before "
                                  "the trainer gives up and exits 1 (default: %(default)s: the launcher's default "
                                  "--startup-timeout, 120, bounds a spare's start, and 60 more)")
    checkpoints.add_argument("--mlflow", nargs="?", const="", default=None, metavar="URI",
                             help="log every iteration to MLflow: to the tracking server URI names, else to a "
                                  "file store STORAGE_PATH/mlruns that `mlflow ui` reads (needs mlflow-skinny)")
    checkpoints.add_argument("--wandb", default=None, metavar="PROJECT",
                             help="log every iteration to Weights & Biases project PROJECT, offline unless "
                                  "WANDB_MODE says otherwise (compute nodes rarely reach the internet): "
                                  "`wandb sync STORAGE_PATH/wandb/offline-run-*` from a login node uploads it")
    checkpoints.add_argument("--stop-grace", dest="stop_grace_s", type=positive_float, default=default_stop_grace(environ),
                             help="seconds after SIGTERM to wait for the checkpoint before exiting anyway; "
                                  "keep below the launcher's grace period (default: MPIRAY_STOP_GRACE - 2, "
                                  "else %(default)s)")


def default_stop_grace(environ: Mapping[str, str]) -> float:
    """Leave 2 s of the launcher's SIGTERM-to-SIGKILL grace for writing state and exiting."""
    launcher_grace = optional_float(environ.get("MPIRAY_STOP_GRACE") or "none")
    if launcher_grace is None:
        return DEFAULT_STOP_GRACE_S
    return max(1.0, launcher_grace - STOP_GRACE_MARGIN_S)


def build_plot_parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    """Flags of the plot command."""
    parser = argparse.ArgumentParser(
        prog="python -m train plot",
        description="Draw mean episode return vs env steps and vs wall time for one or more runs "
                    "(experiment dirs, trial dirs or progress.csv files) into a PNG.",
    )
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="experiment/trial dir or progress.csv")
    parser.add_argument("-o", "--output", default="reward_curves.png", help="PNG to write (default: %(default)s)")
    parser.add_argument("--labels", type=str_tuple, default=(),
                        help="comma-separated legend labels, one per trial found (default: trial names)")
    parser.add_argument("--title", default=None, help="figure title")
    return parser


def build_evaluate_parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    """Flags of the evaluate command."""
    parser = argparse.ArgumentParser(
        prog="python -m train evaluate",
        description="Load a checkpoint (or the newest one under a trial/experiment dir), run "
                    "episodes with the trained policy and print mean/min/max return.",
    )
    parser.add_argument("checkpoint", metavar="CHECKPOINT", help="checkpoint_* dir, trial dir or experiment dir")
    parser.add_argument("--episodes", type=positive_int, default=10, help="episodes to run (default: %(default)s)")
    parser.add_argument("--explore", action="store_true", help="sample actions instead of taking the greedy one")
    parser.add_argument("--seed", type=non_negative_int, default=None, help="env seed")
    _add_verbose_flag(parser)
    return parser


def train_options(args: argparse.Namespace) -> TrainOptions:
    """Parsed train flags -> TrainOptions."""
    return TrainOptions(**{name: value for name, value in vars(args).items() if name != "mpi"})


def plot_options(args: argparse.Namespace) -> PlotOptions:
    """Parsed plot flags -> PlotOptions."""
    return PlotOptions(run_dirs=tuple(args.run_dirs), output=args.output, labels=args.labels, title=args.title)


def evaluate_options(args: argparse.Namespace) -> EvaluateOptions:
    """Parsed evaluate flags -> EvaluateOptions."""
    return EvaluateOptions(checkpoint=args.checkpoint, episodes=args.episodes, explore=args.explore, seed=args.seed,
                           verbose=args.verbose)


def _run_train(options: TrainOptions) -> int:
    from train.run import run_training

    return run_training(options, os.environ)


def _run_plot(options: PlotOptions) -> int:
    from train.plot import plot_runs

    return plot_runs(options)


def _run_evaluate(options: EvaluateOptions) -> int:
    from train.evaluate import evaluate_checkpoint

    return evaluate_checkpoint(options, os.environ)


# The one place that maps outcomes to exit codes.
def _run_reporting_errors(runner: Callable[[Any], int], options: Any) -> int:
    try:
        return runner(options)
    except TrainError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    except Exception:  # noqa: BLE001 - report anything else as a failure, never exit 0
        traceback.print_exc()
        return 1


PARSERS = {"train": build_train_parser, "plot": build_plot_parser, "evaluate": build_evaluate_parser}
OPTION_BUILDERS = {"train": train_options, "plot": plot_options, "evaluate": evaluate_options}
RUNNERS: dict[str, Callable[[Any], int]] = {"train": _run_train, "plot": _run_plot, "evaluate": _run_evaluate}
