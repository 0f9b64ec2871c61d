"""Experiment tracking beside TensorBoard: MLflow and Weights & Biases, through Ray Tune's own logger callbacks.

Compute nodes rarely reach the internet, so both default to what works without it:
- MLflow logs to a file store under the storage path (`STORAGE_PATH/mlruns`), which `mlflow ui` on a login node
  reads from the shared file system, or to the tracking server (or database) a URI names. MLflow 3 keeps its file
  store in maintenance mode and refuses it unless MLFLOW_ALLOW_FILE_STORE=true, which is set for that default: a
  database (sqlite) on a parallel file system is the worse choice, its locks are not reliable there;
- W&B runs offline (`WANDB_MODE=offline`, unless the job set WANDB_MODE itself) into `STORAGE_PATH/wandb/`, one
  run per trial grouped by the experiment's name, which `wandb sync` uploads from a login node that can reach W&B.
Both stores sit beside the experiments, not in one: the trainer reads an experiment's dirs as its trials.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, MutableMapping, Optional, Tuple

from train.errors import UsageError
from train.options import TrainOptions

WANDB_MODE = "WANDB_MODE"
WANDB_OFFLINE = "offline"
MLFLOW_FILE_STORE = "MLFLOW_ALLOW_FILE_STORE"


def mlflow_uri(option: Optional[str], experiment_dir: Path) -> Optional[str]:
    """Where MLflow logs: the URI given, else a file store beside the experiments; None: no MLflow."""
    if option is None:
        return None
    return option or (experiment_dir.parent / "mlruns").resolve().as_uri()


def callbacks(options: TrainOptions, experiment_dir: Path,
              environ: MutableMapping[str, str]) -> Tuple[List[Any], List[str]]:
    """Tune's logger callbacks for the trackers asked for, and a line for each on where its records go. WANDB_MODE defaults
    to offline and MLFLOW_ALLOW_FILE_STORE to true for a file store, in environ (this process's, where the MLflow
    callback runs; W&B's logging actor is a Ray worker with the raylet's environment, so it is given the mode)."""
    found: List[Any] = []
    notes: List[str] = []
    uri = mlflow_uri(options.mlflow, experiment_dir)
    if uri is not None:
        MLflowLoggerCallback = _import("ray.air.integrations.mlflow", "MLflowLoggerCallback", "mlflow", "mlflow-skinny")
        if uri.startswith("file:"):
            environ.setdefault(MLFLOW_FILE_STORE, "true")
        found.append(MLflowLoggerCallback(tracking_uri=uri, experiment_name=experiment_dir.name))
        notes.append(f"MLflow: experiment {experiment_dir.name} in {uri} (mlflow ui --backend-store-uri {uri})")
    if options.wandb:
        WandbLoggerCallback = _import("ray.air.integrations.wandb", "WandbLoggerCallback", "wandb", "wandb")
        mode = environ.setdefault(WANDB_MODE, WANDB_OFFLINE)
        runs = experiment_dir.parent / "wandb"  # wandb.init(dir=D) writes to D/wandb
        runs.mkdir(parents=True, exist_ok=True)
        found.append(WandbLoggerCallback(project=options.wandb, group=experiment_dir.name,
                                         dir=str(experiment_dir.parent), mode=mode))
        where = (f"offline in {runs}; from a login node: wandb sync {runs}/offline-run-*" if mode == WANDB_OFFLINE
                 else f"{mode}, runs in {runs}")
        notes.append(f"W&B: project {options.wandb}, {where}")
    return found, notes


def _import(module: str, name: str, needs: str, package: str) -> Any:
    try:
        __import__(needs)
        return getattr(__import__(module, fromlist=[name]), name)
    except ImportError as missing:
        raise UsageError(f"--{needs} needs {package}, which is not installed here ({missing}): "
                         f"pip install {package}, or pip install '.[tracking]' in mpiray's checkout") from missing

