"""The training lifecycle: validate -> connect Ray -> size -> check storage -> fit -> report."""

from __future__ import annotations

import functools
import math
import os
import signal
import sys
from pathlib import Path
from typing import MutableMapping, Optional

from train import cluster, config, events, storage, tracking
from train.envs import EnvChoice, inspect_env
from train.options import ENV_STEPS_METRIC, RETURN_METRIC, TrainOptions

EXIT_OK = 0
EXIT_TRAINING_FAILED = 1
EXPERIMENT_STATE_PERIOD_S = 2
# A learner whose node went: Ray's word for the dead actor, or (what the others see first, measured on the testbed
# with a node's raylet SIGKILLed) gloo's "Connection closed by peer [ADDRESS]" in their all-reduce. Not gloo's
# "connectFullMesh failed ... Connection refused": that is a group that never formed (the wrong network).
LEARNER_SIGNS = ("learner_group", "Learner")
LOST_NODE_SIGNS = ("ActorDiedError", "RayActorError", "ActorUnavailableError", "Connection closed by peer",
                   "Connection reset by peer", "node has died", "node died")


def run_training(options: TrainOptions, environ: MutableMapping[str, str]) -> int:
    """Train as ``options`` say; return the process exit code.

    Everything that can be checked without Ray (algorithm, env, JSON, flags,
    storage path) is checked first and raises ValueError subclasses.
    """
    algorithm = config.resolve_algorithm(options.run)
    env = inspect_env(options.env, options.env_config)
    # Catch bad flags/--algo-config before starting Ray; env runners are sized later.
    provisional_config = config.build_algorithm_config(options, env, num_env_runners=0)
    reserved_cpus = _reserved_cpus(provisional_config)
    storage_path = storage.prepare_storage(
        Path(options.storage_path) if options.storage_path else storage.default_storage_path(environ)
    )
    _print_legacy_flag_notes(options, environ)
    experiment, why = _experiment_to_continue(options, algorithm, storage_path, environ)
    status = storage.experiment_status(experiment) if experiment is not None else None
    if status == "finished":
        _say(f"{experiment} has finished ({why}): nothing to do. Give a new --name to train again")
        return EXIT_OK
    resume_dir = experiment if status in ("unfinished", "errored") else None
    if resume_dir is not None:
        _say(f"continuing {resume_dir} from its last checkpoint ({why})")

    # Checkpointing every iteration makes Tune warn that it snapshots its state often; that is intended.
    environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    # Tune's experiment state (which checkpoint each trial has) every 2 s rather than every >= 10 s:
    # scancel, requeue and preemption SIGTERM Ray's processes too, so a job may end before the
    # checkpoint on SIGTERM is written, and a restart resumes from what this state names.
    environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", str(EXPERIMENT_STATE_PERIOD_S))
    with cluster.ray_cluster(environ, num_cpus=_local_num_cpus(options, environ)) as ray_cluster:
        num_env_runners = _num_env_runners(options, ray_cluster, reserved_cpus)
        algorithm_config = config.build_algorithm_config(options, env, num_env_runners)
        # Several trials: each goes where it fits, and its node's loss ends it alone.
        on_head = options.num_samples == 1 and _place_algorithm(algorithm_config, ray_cluster)
        spread = ray_cluster.learner_slots > 0 and config.spread_learners(algorithm_config)
        config.place_by_role(algorithm_config, options.learners_on, options.env_runners_on)
        cluster.check_role(ray_cluster, options.learners_on, "--learners-on")
        cluster.check_role(ray_cluster, options.env_runners_on, "--env-runners-on")
        # first: the learners' own reason
        cluster.check_learners(algorithm_config, ray_cluster, spread, on_head, options.learners_on)
        if options.env_runners_on:
            cluster.check_env_runners_fit(algorithm_config, options.env_runners_on, _pool_cpus(options, ray_cluster,
                                                                                              reserved_cpus))
        cluster.check_resources(algorithm_config, ray_cluster)
        if resume_dir is not None:  # Tune restores the saved config, sized for the cluster it started on
            for params in storage.saved_params(resume_dir):
                cluster.check_saved_resources(params, ray_cluster, str(resume_dir))
        storage.check_shared_storage(storage_path)
        trials = f"{options.num_samples} trials of " if options.num_samples > 1 else ""
        _say(
            f"{trials}{algorithm} on {env.name}: {num_env_runners} env runners{' each' if trials else ''} on a "
            f"{ray_cluster.num_nodes}-node cluster ({ray_cluster.total_cpus:g} CPUs, {ray_cluster.total_gpus:g} GPUs)"
        )
        _register_env(env)
        name = experiment.name if experiment is not None else options.name or storage.experiment_name(algorithm, env.name)
        tuner = _make_or_restore_tuner(options, algorithm_config, env, storage_path / name, resume_dir is not None)
        storage.tag_experiment(storage_path / name, environ.get("MPIRAY_JOB_ID"))
        from train.interrupt import checkpoint_on_signal

        with checkpoint_on_signal(options.stop_grace_s) as stop_request:
            results = _fit(tuner, options, algorithm_config, storage_path / name, stop_request)
        return _report(results, options, stop_request)


def _fit(tuner, options: TrainOptions, algorithm_config, experiment_dir: Path, stop_request):
    """tuner.fit(); where each failed trial failed because a node was lost, the experiment continues from its
    last checkpoints in this job, at most --max-failures times, once the cluster holds the trials' saved configs
    again (a spare's node in the lost one's place, or room on the rest) within --restore-wait. Not Tune's
    FailureConfig: that restarts any failure, a bug in the env too, and waits for resources that may never come."""
    from train import progress, watch

    watch.forget()
    results = tuner.fit()
    for restore in range(1, options.max_failures + 1):
        failed = [result for result in results if result.error is not None]
        if not failed or stop_request.requested or not all(_lost_a_node(result) for result in failed):
            break
        names = ", ".join(Path(result.path).name for result in failed)
        _say(f"trial {names}: a node was lost: it continues from its last checkpoint in this job (restore {restore} "
             f"of --max-failures {options.max_failures}) once the cluster holds it")
        events.event("trial_restore", trial=names, restore=restore, max_failures=options.max_failures)
        lost = watch.forget()
        progress.LEARNERS_SAID.clear()  # where the restored trials' learners run, said anew
        restored = _make_or_restore_tuner(options, algorithm_config, None, experiment_dir, resume=True)
        if stop_request.requested:  # while it restored: leave it to the requeue (Tune's SIGUSR1 is the last fit's)
            watch.LOST.update(lost)
            break
        watch.expect_placement([_trial_id(result) for result in failed], options.restore_wait_s,
                               functools.partial(_lacking, failed))
        try:
            results = restored.fit()
        except watch.NotPlaced as lacking:
            _say(f"trial {names}: not continued in this job: not placed within --restore-wait "
                 f"{options.restore_wait_s:g} s: its saved config needs {lacking}; a spare host (mpiray --spares K) "
                 "takes a lost node's place")
            watch.LOST.update(lost)  # the failed results and what they lost: their report says why they failed
            break
    return results


def _lost_a_node(result) -> bool:
    """Whether a trial failed because a node it ran on was lost: a remote learner's (the watch ended it, or the
    learners said so) or the algorithm's own."""
    from train.watch import LOST

    text = f"{type(result.error).__name__}: {result.error}"
    return _trial_id(result) in LOST or lost_learner(result.error) or "node has died" in text


def _trial_id(result) -> str | None:
    return (result.metrics or {}).get("trial_id")


def _lacking(failed, trial_ids: set[str]) -> list[str]:
    """What the live cluster (Ray's nodes now, not the launcher's totals at start) lacks for the saved config of
    each failed trial of trial_ids; [] too where Ray cannot say now (its GCS restarting): asked again later."""
    import ray

    try:
        live = cluster.describe_cluster({}, None)
    except ray.exceptions.RayError:
        return []
    return [problem for result in failed if _trial_id(result) in trial_ids
            for params in storage.trial_params(Path(result.path))
            for problem in cluster.saved_resource_problems(params, live)]


def _reserved_cpus(provisional_config) -> float:
    # Asking for the resource request also runs RLlib's own validation of the config.
    try:
        cpus, _ = cluster.requested_resources(provisional_config)
    except (ValueError, TypeError, KeyError) as error:
        raise config.OptionError(f"RLlib rejected the configuration: {error}") from error
    return cpus


def _num_env_runners(options: TrainOptions, ray_cluster: cluster.ClusterInfo, reserved_cpus: float) -> int:
    if options.local_mode:
        return 0
    if options.num_env_runners is not None:
        return options.num_env_runners
    if options.env_runners_on:  # the pool's CPUs (an unknown role: check_role says so next)
        return max(0, int(_pool_cpus(options, ray_cluster, reserved_cpus)))
    if options.num_samples > 1:  # a trial per node: the head's CPUs each (an elastic cluster adds nodes of that size)
        return cluster.default_num_env_runners(ray_cluster.head_cpus or ray_cluster.total_cpus, reserved_cpus)
    return cluster.default_num_env_runners(ray_cluster.total_cpus, reserved_cpus)


def _pool_cpus(options: TrainOptions, ray_cluster: cluster.ClusterInfo, reserved_cpus: float) -> float:
    """The CPUs the env runners have on --env-runners-on's nodes: less the algorithm's main process and its
    learners' where they may run there too (the head is in the pool, or the learners may go there)."""
    role = options.env_runners_on or ""
    learners = config.learners_of(options)["num_learners"] > 0
    shared = any(node.get(cluster.HEAD_RESOURCE) for node in ray_cluster.pool(role)) or \
        options.learners_on == role or (learners and options.learners_on is None)
    return cluster.env_runner_cpus(ray_cluster, role, reserved_cpus, shared)


def _local_num_cpus(options: TrainOptions, environ: MutableMapping[str, str]) -> Optional[int]:
    return None if environ.get("RAY_ADDRESS") else options.num_cpus


def _register_env(env: EnvChoice) -> None:
    if env.factory is None:
        return
    from ray.tune import register_env

    register_env(env.name, env.factory)


def _place_algorithm(algorithm_config, ray_cluster: cluster.ClusterInfo) -> bool:
    """The algorithm on the head node when it fits there (losing another node is then survivable); whether it is."""
    problem = cluster.head_problem(algorithm_config, ray_cluster)
    if problem is None:
        if config.pin_to_head(algorithm_config):
            return True
        if ray_cluster.num_nodes > 1:
            _say("note: this Ray's RLlib cannot pin the algorithm to the head node: Tune places it on any node, "
                 "and losing that node ends the run")
    elif ray_cluster.num_nodes > 1:
        _say(f"note: {problem}, so Tune places them on any node: losing that node ends the run")
    return False


def _say_where_trials_continue(tuner) -> None:
    """Each trial's checkpoint to continue from: the newest that Tune's saved experiment state names. That
    state is written every EXPERIMENT_STATE_PERIOD_S and at a clean stop, so a job killed within that time
    of its newest checkpoint continues from the one before (or from the start, if it named none)."""
    for result in tuner.get_results():
        trial = Path(result.path).name
        if result.checkpoint is None:
            _say(f"trial {trial}: its saved state names no checkpoint: it starts from iteration 1")
            continue
        name = Path(result.checkpoint.path).name
        iteration = next((metrics.get("training_iteration") for checkpoint, metrics in result.best_checkpoints
                          if Path(checkpoint.path).name == name), None)
        after = f" (iteration {iteration})" if iteration is not None else ""
        _say(f"trial {trial}: continues from {name}{after}")


def _make_or_restore_tuner(options, algorithm_config, env, experiment_dir: Path, resume: bool):
    from ray import tune
    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback, TBXLoggerCallback

    from train.interrupt import CheckpointOnSignal
    from train.progress import ProgressLine
    from train.watch import LearnerNodeWatch

    # The class, not its name: a name makes Tune import (and register) every RLlib algorithm.
    trainable = algorithm_config.algo_class
    if resume:
        # Tune restores the trials' saved configs: the algorithm's placement (and env runners) as saved.
        _say("its saved config (env runners too) and stop criteria apply")
        _say(f"TensorBoard: tensorboard --logdir {experiment_dir}")
        tuner = tune.Tuner.restore(str(experiment_dir), trainable=trainable, resume_errored=True)
        _say_where_trials_continue(tuner)
        return tuner
    _say(f"results: {experiment_dir}; stop at {config.stop_criteria(options, env)}")
    _say(f"TensorBoard: tensorboard --logdir {experiment_dir}")
    trackers, notes = tracking.callbacks(options, experiment_dir, os.environ)
    for note in notes:
        _say(note)
    run_config = tune.RunConfig(
        name=experiment_dir.name,
        storage_path=str(experiment_dir.parent),
        stop=config.stop_criteria(options, env),
        checkpoint_config=config.checkpoint_config(options),
        callbacks=[
            CSVLoggerCallback(), JsonLoggerCallback(), TBXLoggerCallback(), CheckpointOnSignal(), ProgressLine(),
            LearnerNodeWatch(), *trackers,
        ],
        verbose=0,  # ProgressLine replaces Tune's tables and full-config dumps
    )
    return tune.Tuner(trainable, param_space=algorithm_config, run_config=run_config,
                      tune_config=tune.TuneConfig(num_samples=options.num_samples))


def _experiment_to_continue(
    options: TrainOptions, algorithm: str, storage_path: Path, environ: MutableMapping[str, str]
) -> tuple[Optional[Path], str]:
    """The experiment this run continues (or finds finished) and why; (None, "") for a new one.

    --name names it; else a job that the batch system started again (Slurm's requeue keeps the job
    id) finds the ALGO_ENV_* one that its id started; else --resume takes the newest unfinished
    ALGO_ENV_* one. Runs of one allocation (salloc) share a job id, but are no restart: they start anew.
    """
    if options.name:
        return storage_path / options.name, f"--name {options.name}"
    job_id, restart = environ.get("MPIRAY_JOB_ID"), storage.restart_of(environ)
    prefix = storage.experiment_prefix(algorithm, options.env)
    tagged = storage.experiment_of_job(storage_path, job_id, prefix) if job_id and restart else None
    if tagged is not None:
        return tagged, f"job {job_id} started it; this is its {restart}"
    if not options.resume:
        return None, ""
    latest = storage.latest_experiment(storage_path, storage.experiment_prefix(algorithm, options.env))
    if latest is None:
        _say(f"--resume: no unfinished {algorithm} on {options.env} experiment in {storage_path}; starting a new one")
        return None, ""
    return latest, "--resume: the newest unfinished one"


def _report(results, options: TrainOptions, stop_request) -> int:
    _say(f"experiment: {results.experiment_path}")
    for result in results:
        _report_trial(result, options)
    if results.errors:
        for result in results:
            if result.error is None:
                continue
            _say(f"trial failed: {result.error}")
            from train.watch import LOST

            trial_id = _trial_id(result) or ""
            if trial_id in LOST or lost_learner(result.error):
                spare = (", and give it a spare host (mpiray --spares 1) to continue in the job next time"
                         if options.max_failures else " (--max-failures 0: no restore in the job)")
                _say("a learner's node was lost: RLlib does not restart learners, and the trial could not continue "
                     "in this job; run the job again (requeue, or the same command) and it continues from the last "
                     f"checkpoint{spare}")
                # Said here, where it is what failed the run: a loss that a restore got over is no cause.
                events.event("learner_node_lost", trial=trial_id or Path(result.path).name,
                             error=f"the node of a learner is no longer alive: {LOST[trial_id]}" if trial_id in LOST
                             else str(result.error).strip().splitlines()[-1][:300])
        return EXIT_TRAINING_FAILED
    if stop_request.requested and not all(result.metrics.get("done") for result in results):
        saved = "a checkpoint was saved" if stop_request.checkpoint_paths else (
            f"no checkpoint within --stop-grace {options.stop_grace_s:g} s, resume starts from the last periodic one"
        )
        _say(
            f"stopped by {signal.Signals(stop_request.signal_number).name} ({saved}); "
            f"resume with: python -m train --resume --name {Path(results.experiment_path).name} "
            f"--storage-path {Path(results.experiment_path).parent}"
        )
        return 128 + stop_request.signal_number
    return EXIT_OK


def lost_learner(error: BaseException) -> bool:
    """Whether a trial failed because a remote learner's actor died with its node (RLlib's learners are
    started with no restart: the whole trial fails)."""
    text = f"{type(error).__name__}: {error}"
    return any(sign in text for sign in LEARNER_SIGNS) and any(sign in text for sign in LOST_NODE_SIGNS)


def _report_trial(result, options: TrainOptions) -> None:
    metrics = result.metrics or {}
    mean_return = config.lookup_metric(metrics, RETURN_METRIC)
    _say(
        f"trial {Path(result.path).name}: {metrics.get('training_iteration', 0)} iterations, "
        f"{metrics.get(ENV_STEPS_METRIC, 0):.0f} env steps, {metrics.get('time_total_s', 0):.1f} s, "
        f"mean return {mean_return:.3f}"
    )
    from train.progress import CHECKPOINTS_SAVED, format_checkpoints

    saved, kept = CHECKPOINTS_SAVED[metrics.get("trial_id")], len(list(Path(result.path).glob("checkpoint_*")))
    if saved or kept:
        _say(format_checkpoints(saved, kept))
    if result.checkpoint is not None:
        _say(f"last checkpoint: {result.checkpoint.path}")
    best = _best_checkpoint(result, options)
    if best is not None:
        _say(f"best checkpoint ({options.checkpoint_score}): {best.path}")
        _say(f"evaluate it: python -m train evaluate {best.path}")


def _best_checkpoint(result, options: TrainOptions):
    if not options.checkpoint_score or not result.best_checkpoints:
        return None
    scored = [
        (checkpoint, config.lookup_metric(metrics, options.checkpoint_score))
        for checkpoint, metrics in result.best_checkpoints
    ]
    scored = [(checkpoint, score) for checkpoint, score in scored if not math.isnan(score)]
    if not scored:
        return None
    pick = max if options.checkpoint_score_order == "max" else min
    return pick(scored, key=lambda pair: pair[1])[0]


def _print_legacy_flag_notes(options: TrainOptions, environ: MutableMapping[str, str]) -> None:
    if options.local_mode:
        _say(
            "note: Ray has no local mode any more; --local-mode now means 0 env runners "
            "(sampling runs in the algorithm's own process), the closest debugging setup"
        )
    if options.num_cpus is not None and environ.get("RAY_ADDRESS"):
        _say(
            "note: --num-cpus only sizes a local Ray; on the launcher's cluster the CPUs are "
            "fixed by start_ray.py. Use --num-env-runners to use fewer of them"
        )


def _say(message: str) -> None:
    print(f"[train] {message}", file=sys.stderr, flush=True)
