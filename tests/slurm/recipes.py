"""The recipes' sbatch lines (jobs/recipes/*.py print them in their docstrings), run as printed on the testbed: from
a submit dir whose jobs/ is this checkout's, with each script's site lines filled in as the testbed has them."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from helpers import JOB_TIMEOUT_S, ROOT

# What each script marks as the site's own, as this testbed has it (Slurm 22.05 reads no variable for
# --cpus-per-task): its partitions, a node's CPUs.
SITE_LINES = {
    "slurm_multi_node.sh": {
        "#SBATCH --partition=standard": "#SBATCH --partition={partition}",
        "#SBATCH --cpus-per-task=36": "#SBATCH --cpus-per-task=2",
    },
    "slurm_hetjob.sh": {
        "#SBATCH --partition=gpu": "#SBATCH --partition={partition}",
        "#SBATCH --cpus-per-task=32": "#SBATCH --cpus-per-task=2",
        "#SBATCH --partition=standard": "#SBATCH --partition={partition}",
        "#SBATCH --cpus-per-task=36": "#SBATCH --cpus-per-task=1",
    },
}


def recipe_lines(recipe: Path) -> list[str]:
    """The sbatch lines a recipe's docstring prints, in order."""
    return [line.strip() for line in recipe.read_text().splitlines() if "sbatch " in line]


def recipe_line(recipe: Path) -> str:
    """The one sbatch line a recipe's docstring prints."""
    (line,) = recipe_lines(recipe)
    return line


def submit_dir(bed, tmp_path: Path) -> None:
    """tmp_path as a submit dir: jobs/ is this checkout's, its scripts' site lines the testbed's."""
    jobs_dir = tmp_path / "jobs"
    if jobs_dir.exists():
        return
    jobs_dir.mkdir()
    for path in (ROOT / "jobs").iterdir():
        (jobs_dir / path.name).symlink_to(path)
    for name, lines in SITE_LINES.items():
        script = jobs_dir / name
        text = script.read_text()
        for printed, here in lines.items():
            assert printed in text, f"jobs/{name} no longer has {printed!r}"
            text = text.replace(printed, here.format(partition=bed.partition))
        script.unlink()
        script.write_text(text)


def submit_printed(bed, jobs, tmp_path: Path, line: str) -> str:
    """line (`[VAR=value ...] sbatch ... jobs/SCRIPT [args]`), submitted as printed from tmp_path; its job id."""
    submit_dir(bed, tmp_path)
    words = shlex.split(line)
    settings = dict(word.split("=", 1) for word in words[:words.index("sbatch")])
    env = jobs.env(tmp_path, [], **settings)
    if "MPIRAY_DRIVER" not in settings:
        del env["MPIRAY_DRIVER"]  # the driver is the line's
    submitted = bed.login(words[words.index("sbatch"):], env=env, cwd=tmp_path, timeout=60)
    assert submitted.returncode == 0, submitted.stderr
    job_id = re.fullmatch(r"Submitted batch job (\d+)\n", submitted.stdout)[1]
    jobs.ids.append(job_id)
    return job_id


def finished(bed, tmp_path: Path, job_id: str, output_name: str) -> str:
    """The job's output once it completed with exit code 0 (the test fails otherwise)."""
    result = bed.wait_for_job(job_id, timeout=JOB_TIMEOUT_S)
    output = (tmp_path / f"{output_name}-{job_id}.out").read_text()
    assert (result.state, result.exit_code) == ("COMPLETED", 0), output[-3000:]
    return output


def submit_as_printed(bed, jobs, tmp_path: Path, line: str) -> tuple[str, str]:
    """line run as printed (submit_printed) to its end: (the job id, its output)."""
    job_id = submit_printed(bed, jobs, tmp_path, line)
    return job_id, finished(bed, tmp_path, job_id, "ray-multi-node")
