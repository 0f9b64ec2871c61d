"""mpiray installed as a user installs it, `pip install .` (a wheel, not this checkout): the `mpiray` command
does all that start_ray.py does, from any directory, and what it starts (each rank's `ray start` starter,
an elastic cluster's worker job) finds the installed package by itself."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from mpiray.batch.jobs import WorkerJob

from helpers import ROOT, rank_events


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A new venv with mpiray installed from a wheel of this checkout, and the MPICH wheel (its mpirun and
    libmpi, which mpi4py finds under the venv). Ray and the rest come from this test run's environment
    (a .pth line: its site-packages on the path, its own .pth files, this checkout's editable install
    among them, not read)."""
    root = tmp_path_factory.mktemp("install")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(root / "wheels"), str(ROOT)], check=True, timeout=300, capture_output=True)
    (wheel,) = (root / "wheels").glob("mpiray-*.whl")
    return make_venv(root / "venv", str(wheel))


@pytest.fixture(scope="module")
def site_env(tmp_path_factory) -> Path:
    """A site's environment (a conda env, a module's venv) with Ray, mpi4py and the trainer's packages, but
    not mpiray: a batch script runs this checkout's start_ray.py by its path with it."""
    return make_venv(tmp_path_factory.mktemp("site") / "venv")


def make_venv(venv: Path, *packages: str) -> Path:
    """A new venv with packages and the MPICH wheel installed (its mpirun, and its libmpi, which mpi4py finds
    under the venv); the rest comes from this test run's environment (a .pth line: its site-packages on the
    path, its own .pth files, this checkout's editable install among them, not read)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               check=True, timeout=60, capture_output=True, text=True).stdout.strip())
    mpich = [f"mpich=={_version('mpich')}", f"mpi4py=={_version('mpi4py')}"]
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    "--no-deps", *packages, *mpich], check=True, timeout=600, capture_output=True)
    (site / "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")  # after: pip would find mpich there
    return venv


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


def run(argv: list[str], cwd: Path, timeout: float = 240, env=None) -> subprocess.CompletedProcess:
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, **(env or {})}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_installed_package_is_the_wheels_and_needs_no_help_to_be_found(installed, tmp_path):
    probe = ("import mpiray, mpiray.package as p; print(mpiray.__file__); print(p.found_without_help()); "
             "print(p.helper_env({}).get('PYTHONPATH'))")
    where, found, pythonpath = run([str(installed / "bin" / "python"), "-c", probe], tmp_path).stdout.split()
    assert where.startswith(str(installed)) and not where.startswith(str(ROOT))
    assert (found, pythonpath) == ("True", "None")  # helpers get no PYTHONPATH: site-packages is theirs already


def test_a_bare_mpiray_says_what_it_can_do(installed, tmp_path):
    result = run([str(installed / "bin" / "mpiray")], tmp_path, timeout=60)
    assert result.returncode == 0
    for command in ("run", "logs", "list", "attach", "dashboard"):
        assert f"\n  {command} " in result.stdout, command


def test_mpiray_run_starts_the_cluster_from_anywhere_and_its_worker_jobs_command_runs(installed, tmp_path):
    logs = tmp_path / "logs"
    driver = [str(installed / "bin" / "python"), "-c", "import ray; ray.init(); print('NODES', len(ray.nodes()))"]
    result = run([str(installed / "bin" / "mpirun"), "-np", "2", str(installed / "bin" / "mpiray"), "run",
                  "--log-dir", str(logs), "--job-id", "installed", "--", *driver], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "NODES 2" in result.stdout
    for rank in (0, 1):
        argv = next(r["fields"]["argv"] for r in rank_events(logs / "installed", rank) if r["event"] == "node_starting")
        assert argv[0] == str(installed / "bin" / "python") and "mpiray.raynode.starter" in argv
    # What an elastic cluster's worker job runs, with this install's interpreter: the installed command.
    job = WorkerJob(cluster="4711", python=str(installed / "bin" / "python"), log_dir=str(logs / "4711"))
    command = job.join_command(1, [])
    assert command[command.index("-m") + 1:command.index("-m") + 3] == ["mpiray", "run"]
    help_text = run([*command[:command.index("run") + 1], "--help"], tmp_path, timeout=60)
    assert help_text.returncode == 0 and "--join" in help_text.stdout


def test_the_default_driver_finds_the_checkouts_trainer_from_a_submit_dir(site_env, tmp_path):
    """jobs/pbs_polaris.sh and its kind run `python $MPIRAY_DIR/start_ray.py` from the submit dir with the
    site's env, and rank 0 runs the default driver, `python -m train`, there."""
    submit = tmp_path / "submit"
    submit.mkdir()
    python = str(site_env / "bin" / "python")
    alone = run([python, "-m", "train", "--help"], submit, timeout=60)
    assert alone.returncode != 0 and "No module named train" in alone.stderr  # the env has no trainer of its own
    env_path = {"PATH": f"{site_env / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    result = run([python, str(ROOT / "start_ray.py"), "--log-dir", str(tmp_path / "logs"), "--", "python", "-m",
                  "train", "--help"], submit, env=env_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "usage: python -m train" in result.stdout
