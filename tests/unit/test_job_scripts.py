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
