"""Where results go: default path, writability, shared-storage check, experiment to resume."""

from __future__ import annotations

import datetime
import json
import re
import socket
import uuid
from pathlib import Path
from typing import Mapping, Optional

from mpiray import driver
from train.errors import StorageError

PROBE_DIR_PREFIX = ".storage-probe-"
SHARED_CHECK_TIMEOUT_S = 60.0
# Tune's files in an experiment dir: tuner.pkl when the Tuner is made, experiment_state-<time>.json as it runs.
TUNER_STATE = "tuner.pkl"
EXPERIMENT_STATE = "experiment_state-*.json"
# The launcher's job id, written into the experiments a job starts: a requeued job (same id) finds its own.
JOB_TAG = ".mpiray-job-id"



def default_storage_path(environ: Mapping[str, str]) -> Path:
    """results/ beside the launcher's logs/ root, else ./results.

    MPIRAY_LOG_DIR is the job's log dir (logs/<jobid>) or the logs root itself.
    """
    log_dir = environ.get("MPIRAY_LOG_DIR")
    if not log_dir:
        return Path.cwd() / "results"
    log_dir_path = Path(log_dir).resolve()
    if log_dir_path.name == environ.get("MPIRAY_JOB_ID"):
        log_dir_path = log_dir_path.parent
    return log_dir_path.parent / "results"


def prepare_storage(path: Path) -> Path:
    """Create ``path`` and prove this process can write a file there; return it absolute."""
    path = path.expanduser().resolve()
    probe = path / f"{PROBE_DIR_PREFIX}{uuid.uuid4().hex}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe.write_text("ok")
        probe.unlink()
    except OSError as error:
        raise StorageError(
            f"--storage-path {path} is not writable ({error.strerror or error}). "
            "Pass --storage-path DIR on a writable (and, on multi-node runs, shared) filesystem."
        ) from error
    return path


def check_shared_storage(path: Path, timeout_s: float = SHARED_CHECK_TIMEOUT_S) -> None:
    """On a multi-node Ray cluster, check every node can see and write ``path``.

    Each node writes a file named after itself and reads the driver's file; the
    driver then looks for every node's file. Raises StorageError naming the
    nodes that failed. Requires ray.init() to have been called.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [node for node in ray.nodes() if node.get("Alive")]
    if len(nodes) <= 1:
        return
    probe_dir = path / f"{PROBE_DIR_PREFIX}{uuid.uuid4().hex}"
    probe_dir.mkdir()
    (probe_dir / "driver").write_text(socket.gethostname())
    probe = ray.remote(num_cpus=0, max_retries=0)(_probe_from_node)
    try:
        refs = {
            node["NodeID"]: probe.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
            ).remote(str(probe_dir), node["NodeID"])
            for node in nodes
        }
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
        problems = [
            _describe_problem(node, refs[node["NodeID"]], ready, probe_dir) for node in nodes
        ]
    finally:
        _remove_tree(probe_dir)
    problems = [problem for problem in problems if problem]
    if problems:
        raise StorageError(
            f"--storage-path {path} is not shared by all {len(nodes)} Ray nodes; Tune needs "
            "one directory every node can write (checkpoints are written where the trial runs):\n  "
            + "\n  ".join(problems)
            + "\nPass --storage-path on a shared filesystem (e.g. project/scratch space)."
        )


def experiment_name(algorithm: str, env: str, now: Optional[datetime.datetime] = None) -> str:
    """Default experiment name: ALGO_ENV_YYYYmmdd-HHMMSS (file-name safe)."""
    stamp = (now or datetime.datetime.now()).strftime("%Y%m%d-%H%M%S")
    return f"{experiment_prefix(algorithm, env)}{stamp}"


def experiment_prefix(algorithm: str, env: str) -> str:
    """Common start of the default names of ALGO-on-ENV experiments."""
    return f"{algorithm}_{re.sub(r'[^A-Za-z0-9_.-]+', '_', env)}_"


def latest_experiment(storage_path: Path, prefix: str) -> Optional[Path]:
    """The most recently modified unfinished experiment whose name starts with ``prefix``."""
    candidates = [
        path
        for path in storage_path.glob(f"{prefix}*")
        if path.is_dir() and experiment_status(path) in ("unfinished", "errored")
    ]
    return max(candidates, key=lambda path: path.stat().st_mtime, default=None)


def experiment_status(path: Path) -> Optional[str]:
    """Where an experiment dir stands, from Tune's files (no Ray): None (no experiment), "unstarted",
    "finished" (every trial TERMINATED), "errored" (every trial TERMINATED or ERROR) or "unfinished"
    (a trial still PENDING/RUNNING/PAUSED: stopped by a signal, a requeue or a lost head)."""
    if not (path / TUNER_STATE).is_file():
        return None
    states = sorted(path.glob(EXPERIMENT_STATE))  # Tune restores the newest, by name
    if not states:
        return "unstarted"
    try:
        trials = json.loads(states[-1].read_text())["trial_data"]
        statuses = {json.loads(trial)["status"] for trial, _runtime in trials}
    except (OSError, ValueError, KeyError, TypeError):
        return "unfinished"  # unreadable: let Tune's restore decide, and say what it finds
    if not statuses:
        return "unstarted"
    if statuses == {"TERMINATED"}:
        return "finished"
    return "errored" if statuses <= {"TERMINATED", "ERROR"} else "unfinished"


def saved_params(path: Path) -> list[dict]:
    """Each trial's saved config (params.json) in an experiment dir; unreadable ones are left to Tune."""
    return [params for saved in sorted(path.glob("*/params.json")) for params in trial_params(saved.parent)]


def trial_params(trial_dir: Path) -> list[dict]:
    """A trial's saved config (params.json), as a list of one; [] where it is unreadable (left to Tune)."""
    try:
        return [json.loads((trial_dir / "params.json").read_text())]
    except (OSError, ValueError):
        return []


def tag_experiment(path: Path, job_id: Optional[str]) -> None:
    """Mark the experiment dir as this launcher job's (a requeue of the job continues it)."""
    if job_id:
        (path / JOB_TAG).write_text(job_id + "\n")


def experiment_of_job(storage_path: Path, job_id: str, prefix: str = "") -> Optional[Path]:
    """The newest experiment under storage_path named prefix* that the launcher job job_id started."""
    tagged = []
    for tag in storage_path.glob(f"{prefix}*/{JOB_TAG}"):
        try:
            if tag.read_text().strip() == job_id:
                tagged.append(tag.parent)
        except OSError:
            continue
    return max(tagged, key=lambda path: path.stat().st_mtime, default=None)


def restart_of(environ: Mapping[str, str]) -> Optional[str]:
    """How the batch system says this job is a restart, e.g. "restart 1 (SLURM_RESTART_COUNT)"; None if not.

    PBS keeps PBS_JOBID on qrerun and names no count in the job's environment: the launcher reads qstat's
    run_count and tells its driver (MPIRAY_RESTART, "run 2 (PBS run_count)"); the job tag then finds the
    experiment.
    """
    return driver.restart(environ)


def _probe_from_node(probe_dir: str, node_id: str) -> str:
    probe_path = Path(probe_dir)
    if not (probe_path / "driver").exists():
        return f"cannot see {probe_dir} (created by the driver)"
    try:
        (probe_path / node_id).write_text(socket.gethostname())
    except OSError as error:
        return f"cannot write to {probe_dir}: {error}"
    return ""


def _describe_problem(node: dict, ref, ready: list, probe_dir: Path) -> str:
    import ray

    where = f"node {node.get('NodeManagerAddress', '?')} ({node.get('NodeManagerHostname', '?')})"
    if ref not in ready:
        return f"{where}: no answer from the check within the timeout"
    try:
        problem = ray.get(ref)
    except Exception as error:  # noqa: BLE001 - any task failure is a problem to report
        return f"{where}: check failed: {error}"
    if problem:
        return f"{where}: {problem}"
    if not (probe_dir / node["NodeID"]).exists():
        return f"{where}: its file is not visible from the driver"
    return ""


def _remove_tree(path: Path) -> None:
    for child in path.iterdir():
        child.unlink()
    path.rmdir()
