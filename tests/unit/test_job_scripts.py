"""The batch scripts of jobs/: every one there, valid bash, no sleep and no Redis."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from helpers import JOBS

SCRIPTS = sorted(JOBS.glob("*.sh"))


def _code(script: Path) -> str:
    """The script without its comments (#SBATCH/#PBS/#COBALT lines included)."""
    lines = []
    for line in script.read_text().splitlines():
        if line.lstrip().startswith("#"):
            continue
        lines.append(re.sub(r"\s+#\s.*$", "", line))
    return "\n".join(lines)


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_job_script_is_valid_bash_without_sleeps_or_redis(script):
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 0, result.stderr
    code = _code(script)
    assert not re.search(r"\bsleep\b", code, re.IGNORECASE), "a fixed wait: wait for a condition instead"
    assert "redis" not in code.lower(), "Ray has no Redis: the launcher makes a per-job token"


def test_the_batch_scripts_are_all_there():
    names = {script.name for script in SCRIPTS}
    assert {"slurm_single_node.sh", "slurm_multi_node.sh", "slurm_hetjob.sh", "pbs_polaris.sh",
            "alps_theta.sh", "slurm_elastic.sh", "slurm_worker_template.sh", "pbs_elastic.sh",
            "pbs_worker_template.sh", "pbs_multi_node.sh", "pbs_tmrsh.sh"} <= names


# What srun is handed (its argv, and the variables the launcher reads), written by a stand-in srun: the scripts' own
# shell logic runs for real; Slurm's sbatch runs them in tests/real/slurm/.
RECORDING_SRUN = """#!/bin/sh
printf '%s\\n' "$*" "$MPIRAY_DRIVER" "$MPIRAY_SITE" > "$SLURM_SUBMIT_DIR/srun.txt"
"""


def batch_step(tmp_path: Path, script: str, slurm: dict[str, str], *args: str) -> list[str]:
    """script (with args) run as Slurm's batch step would run it, with Slurm's variables slurm: srun's argv, then
    the driver and the site the launcher would read."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(RECORDING_SRUN)
    (bin_dir / "srun").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "MPIRAY_DIR": str(JOBS.parent), "ENV_SETUP": "true",
           "SLURM_SUBMIT_DIR": str(tmp_path), "SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "2",
           "SLURM_JOB_NODELIST": "x[1-2]", "SLURM_CPUS_PER_TASK": "128", **slurm}
    result = subprocess.run(["bash", str(JOBS / script), *args], env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    return (tmp_path / "srun.txt").read_text().splitlines()


@pytest.mark.parametrize("form, slurm", [
    ("--gpus-per-node=4", {"SLURM_GPUS_PER_NODE": "4", "SLURM_GPUS_ON_NODE": "4"}),
    ("--gpus-per-node=h100:4", {"SLURM_GPUS_PER_NODE": "h100:4", "SLURM_GPUS_ON_NODE": "4"}),
    ("--gres=gpu:h100:4", {"SLURM_GPUS_ON_NODE": "4", "SLURM_JOB_GPUS": "0,1,2,3"}),  # no SLURM_GPUS_PER_NODE
])
def test_kestrels_script_trains_on_every_gpu_of_every_form_of_request(tmp_path, form, slurm):
    _, driver, site = batch_step(tmp_path, "slurm_kestrel.sh", slurm)
    assert "--num-gpus 8 " in driver + " ", (form, driver)  # a GPU learner per GPU: 2 nodes of 4
    assert site == "kestrel-gpu"


def test_kestrels_script_without_gpus_is_a_cpu_job(tmp_path):
    _, driver, site = batch_step(tmp_path, "slurm_kestrel.sh", {})
    assert "--num-gpus 0 " in driver + " " and site == "kestrel"


def test_a_driver_after_the_multi_node_scripts_name_is_the_one_that_runs(tmp_path):
    recipe = ["python", "jobs/recipes/ray_train_ddp.py", "--workers", "3"]  # the recipe's sbatch line's
    _, driver, _ = batch_step(tmp_path, "slurm_multi_node.sh", {"SLURM_CPUS_PER_TASK": "2"}, *recipe)
    assert driver.split() == recipe
