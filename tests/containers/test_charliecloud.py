"""Ray from a container image, for real: Debian's Charliecloud 0.31 (`ch-run`, unprivileged, the caller's process
tree and network) with an image of Debian 12's Python 3.11.2 and Ray 2.60 (tests/containers/image.sh). The ranks run
on the host from a Python that cannot import Ray (tests/hooks/no_ray): every `ray start` and the driver run inside
the image, and the job keeps the driver's exit code and leaves nothing behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from helpers import BIN, JOB_TIMEOUT_S, PYTHON, ROOT, START_RAY, Launch, assert_nothing_left, driver_report, new_job_id

pytestmark = pytest.mark.slow

NO_RAY = ROOT / "tests" / "hooks" / "no_ray"
# The driver, inside the image: what it runs on and sees of the cluster.
DRIVER = ("import json, os, sys, ray; ray.init(); "
          "print('INSIDE ' + json.dumps({'nodes': len([n for n in ray.nodes() if n['Alive']]), "
          "'python': sys.version.split()[0], 'ray': ray.__version__, 'charliecloud': 'CH_RUNNING' in os.environ, "
          "'token': os.path.exists(os.environ['RAY_AUTH_TOKEN_PATH'])}), flush=True); "
          "sys.exit(int(os.environ.get('DRIVER_EXIT', '0')))")


def host_env(**extra: str) -> dict[str, str]:
    """The ranks' environment: no Ray importable; ch-run wants USER (a batch job has it)."""
    return {**os.environ, "USER": os.environ.get("USER", "root"),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(NO_RAY), os.environ.get("PYTHONPATH")])), **extra}


def run(tmp_path, image: str, ranks: int = 2, driver=("python3", "-c", DRIVER), **extra: str) -> Launch:
    job_id = new_job_id("container")
    argv = [str(BIN / "mpirun"), "-np", str(ranks), PYTHON, str(START_RAY), "--container", f"charliecloud:{image}",
            "--log-dir", str(tmp_path / "logs"), "--job-id", job_id, "--", *driver]
    started = time.monotonic()
    result = subprocess.run(argv, cwd=tmp_path, env=host_env(**extra), capture_output=True, text=True, timeout=300)
    return Launch(result.returncode, result.stdout, result.stderr, tmp_path / "logs" / job_id,
                  time.monotonic() - started)


def test_ray_and_the_driver_run_in_the_image_and_the_drivers_exit_code_is_kept(tmp_path, charliecloud_image):
    job = run(tmp_path, charliecloud_image, DRIVER_EXIT="3")
    assert job.returncode == 3, job.stdout[-3000:] + job.stderr[-3000:]
    inside = driver_report(job.stdout, "INSIDE", job.stderr)
    host_python = sys.version.split()[0]
    assert inside == {"nodes": 2, "python": "3.11.2", "ray": "2.60.0", "charliecloud": True, "token": True}
    assert host_python != "3.11.2"  # what ran the driver is the image's Python, not the ranks'
    for rank in range(2):
        assert job.event(rank, "rank_started")["ray"] == "not installed"  # the ranks' side has no Ray
        manifest = job.event(rank, "node_manifest")
        assert (manifest["ray"], manifest["python"]) == ("2.60.0", "3.11.2")
        assert job.event(rank, "container")["reference"] == f"charliecloud:{charliecloud_image}"
    assert "pre-flight: 1 host (" in job.stdout and "python 3.11.2, ray 2.60.0" in job.stdout
    assert_nothing_left(job, wait=10)
    for rank in range(2):  # the private dirs (the token, mpiray's code bound into them) are gone
        assert not os.path.exists(job.event(rank, "private_dir")["path"])


def test_an_image_that_does_not_run_stops_the_job_before_any_node_with_the_runtimes_words(tmp_path):
    missing = tmp_path / "no-such-image"
    job = run(tmp_path, str(missing))
    assert job.returncode == 2, job.stdout[-3000:] + job.stderr[-3000:]
    said = job.stdout + job.stderr
    assert f"charliecloud:{missing} did not run" in said and "ch-run" in said, said[-3000:]
    report = subprocess.run([PYTHON, "-m", "mpiray", "logs", "--json", str(job.job_dir)], capture_output=True,
                            text=True, timeout=60, cwd=ROOT)
    assert [cause["cause"] for cause in json.loads(report.stdout)["causes"]] == ["image_failed"], report.stdout
    assert not any(job.event(rank, "node_alive") for rank in range(2))
    assert_nothing_left(job, wait=10)


@pytest.mark.slurm
def test_the_container_job_script_as_shipped_on_three_hosts(slurm_testbed, jobs, tmp_path, charliecloud_image):
    env = jobs.env(tmp_path, ["python3", "-c", DRIVER], MPIRAY_CONTAINER=f"charliecloud:{charliecloud_image}",
                   USER=os.environ.get("USER", "root"),
                   PYTHONPATH=os.pathsep.join(filter(None, [str(NO_RAY), os.environ.get("PYTHONPATH")])))
    job_id = jobs.submit(ROOT / "jobs" / "slurm_container.sh", tmp_path, env, "--nodes=3", "--cpus-per-task=2",
                         "--account=", "--partition=testbed")
    result = slurm_testbed.wait_for_job(job_id, JOB_TIMEOUT_S)
    output = (tmp_path / f"ray-container-{job_id}.out").read_text()
    assert (result.state, result.exit_code) == ("COMPLETED", 0), output[-3000:]
    inside = driver_report(output, "INSIDE")
    assert (inside["nodes"], inside["python"], inside["charliecloud"]) == (3, "3.11.2", True)
    jobs.wait_until_gone(job_id)
