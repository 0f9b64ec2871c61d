"""Ray from a container image, for real, with Debian's runtimes: Charliecloud 0.31 (`ch-run`, unprivileged, the
caller's process tree and network) and podman 4.3 with runc (containers under conmon, named per job and rank). The
image holds Debian 12's Python 3.11.2 and Ray 2.60 (tests/containers/image.sh). The ranks run on the host from a
Python that cannot import Ray (tests/hooks/no_ray): every `ray start` and the driver run inside the image; the job
keeps the driver's exit code and leaves nothing behind, nor after its ranks are killed with SIGKILL."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from mpiray.elastic.registry import Registry

from containers.images import ELSEWHERE, RUNTIMES, runtime_env
from helpers import (
    BIN,
    JOB_TIMEOUT_S,
    PYTHON,
    ROOT,
    START_RAY,
    Launch,
    assert_nothing_left,
    driver_report,
    new_job_id,
    rank_pids,
    wait_for_text,
)
from process_control import wait_for
from trainer_args import TINY

NO_RAY = ROOT / "tests" / "hooks" / "no_ray"
# The driver, inside the image: what it runs on and sees of the cluster.
DRIVER = ("import json, os, sys, time, ray; ray.init(); "
          "print('INSIDE ' + json.dumps({'nodes': len([n for n in ray.nodes() if n['Alive']]), "
          "'python': sys.version.split()[0], 'ray': ray.__version__, "
          "'token': os.path.exists(os.environ['RAY_AUTH_TOKEN_PATH'])}), flush=True); "
          "time.sleep(float(os.environ.get('DRIVER_SLEEP', '0'))); sys.exit(int(os.environ.get('DRIVER_EXIT', '0')))")
COUNT_NODES = "import ray, sys; ray.init(); print('NODES', len(ray.nodes()), sys.version.split()[0], flush=True)"
GONE_WITHIN_S = 60  # the promise: after kill -9 of a job's ranks, none of its containers is left by then


def host_env(runtime: str, **extra: str) -> dict[str, str]:
    """The ranks' environment: no Ray importable there. podman passes the driver no variable of the user's unless
    told, with its own flag (--env NAME), as a user would."""
    return {**os.environ, **runtime_env(runtime), "MPIRAY_CONTAINER_FLAGS": "--env=DRIVER_EXIT --env=DRIVER_SLEEP"
            if runtime == "podman" else "",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(NO_RAY), os.environ.get("PYTHONPATH")])), **extra}


def processes_of(job_id: str) -> list[str]:
    """Every process whose command line names the job (its ranks, nodes, driver, runtimes' clients)."""
    found = []
    for process in psutil.process_iter():
        try:
            command = " ".join(process.cmdline())
        except psutil.Error:  # gone, a zombie, or not ours to read
            continue
        if job_id in command:
            found.append(f"{process.pid} {command[:150]}")
    return found


def argv(tmp_path, runtime: str, image: str, job_id: str, ranks: int = 2) -> list[str]:
    return [str(BIN / "mpirun"), "-np", str(ranks), PYTHON, str(START_RAY), "--container", f"{runtime}:{image}",
            "--log-dir", str(tmp_path / "logs"), "--job-id", job_id, "--", "python3", "-c", DRIVER]


def containers_of(job_id: str) -> list[str]:
    """podman's containers of the job, running or not (`podman ps -a`)."""
    listed = subprocess.run(["podman", "ps", "--all", "--format", "{{.Names}}"], capture_output=True, text=True,
                            timeout=60, env={**os.environ, **runtime_env("podman")})
    return [name for name in listed.stdout.split() if name.startswith(f"mpiray-{job_id}-")]


@pytest.mark.parametrize("runtime", RUNTIMES + ELSEWHERE)
def test_ray_and_the_driver_run_in_the_image_and_the_drivers_exit_code_is_kept(tmp_path, images, runtime):
    image, job_id = images(runtime), new_job_id(runtime)
    started = time.monotonic()
    result = subprocess.run(argv(tmp_path, runtime, image, job_id), cwd=tmp_path, capture_output=True, text=True,
                            env=host_env(runtime, DRIVER_EXIT="3"), timeout=300)
    job = Launch(result.returncode, result.stdout, result.stderr, tmp_path / "logs" / job_id, time.monotonic() - started)
    assert job.returncode == 3, job.stdout[-3000:] + job.stderr[-3000:]
    inside = driver_report(job.stdout, "INSIDE", job.stderr)
    assert inside == {"nodes": 2, "python": "3.11.2", "ray": "2.60.0", "token": True}
    assert sys.version.split()[0] != "3.11.2"  # what ran the driver is the image's Python, not the ranks'
    for rank in range(2):
        assert job.event(rank, "rank_started")["ray"] == "not installed"  # the ranks' side has no Ray
        manifest = job.event(rank, "node_manifest")
        assert (manifest["ray"], manifest["python"]) == ("2.60.0", "3.11.2")
        assert job.event(rank, "container")["reference"] == f"{runtime}:{image}"
    assert "python 3.11.2, ray 2.60.0" in job.stdout  # the pre-flight's line: the image's versions
    # without --dashboard, said before a user's first Ray Job meets it
    assert f"mpiray: job {job_id}: no dashboard (--dashboard turns it on)" in job.stdout
    assert_nothing_left(job, wait=10)
    for rank in range(2):  # the private dirs (the token, mpiray's code bound into them) are gone
        assert not os.path.exists(job.event(rank, "private_dir")["path"])
    if runtime == "podman":
        assert containers_of(job_id) == []


def test_a_podman_cluster_trains_keeps_its_checkpoints_on_the_host_and_takes_a_ray_job(tmp_path, images):
    """The default trainer in the image on 2 nodes, its storage (results/ beside the logs) the host's, and, with
    token auth, `mpiray submit` from here to the head's Jobs API in the image, while the driver waits."""
    image, job_id, go = images("podman"), new_job_id("podman-train"), tmp_path / "logs" / "go"
    train = ["python3", "-m", "train", *TINY, "--stop-iters", "2", "--checkpoint-frequency", "1", "--name", "boxed"]
    driver = f"{shlex.join(train)} && until [ -e {go} ]; do sleep 0.2; done"  # the log root is bound: go is seen
    command = [str(BIN / "mpirun"), "-np", "2", PYTHON, str(START_RAY), "--container", f"podman:{image}",
               "--dashboard", "--log-dir", str(tmp_path / "logs"), "--job-id", job_id, "--", "sh", "-c", driver]
    launcher = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=host_env("podman"))
    try:
        registry = Registry(Path(os.environ["MPIRAY_REGISTRY"]))
        assert wait_for(lambda: launcher.poll() is not None or any(e.job_id == job_id for e in registry.running()),
                        JOB_TIMEOUT_S, 0.5)
        assert launcher.poll() is None, launcher.communicate()[0][-3000:]
        assert registry.read(job_id).dashboard_host != "127.0.0.1"  # the image's Ray checks the token: reachable
        submitted = subprocess.run([str(BIN / "mpiray"), "submit", job_id, "--", "python3", "-c", COUNT_NODES],
                                   capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
        assert submitted.returncode == 0, submitted.stdout[-2000:] + submitted.stderr[-2000:]
        assert "NODES 2 3.11.2" in submitted.stdout  # on the cluster, by the image's Python
    finally:
        go.touch()
        try:
            output, _ = launcher.communicate(timeout=JOB_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            launcher.kill()
            output, _ = launcher.communicate()
    assert launcher.returncode == 0, output[-5000:]
    checkpoints = sorted((tmp_path / "results" / "boxed").glob("*/checkpoint_*"))
    assert [c.name for c in checkpoints] == ["checkpoint_000000", "checkpoint_000001"], output[-3000:]
    assert containers_of(job_id) == []


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_after_kill_9_of_the_ranks_no_container_and_no_process_of_the_job_is_left(tmp_path, images, runtime):
    image, job_id = images(runtime), new_job_id(f"{runtime}-kill")
    launcher = subprocess.Popen(argv(tmp_path, runtime, image, job_id), cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, env=host_env(runtime, DRIVER_SLEEP="300"))
    try:
        wait_for_text(tmp_path / "logs" / job_id, "rank-0000.log", "driver started (pid", timeout=JOB_TIMEOUT_S)
        ranks = rank_pids(launcher.pid)
        assert len(ranks) == 2
        for pid in ranks:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:  # ended on its own meanwhile: nothing of it may be left either
                pass
    finally:
        launcher.kill()
        launcher.wait(timeout=60)
        assert launcher.stdout is not None
        launcher.stdout.close()
    job = Launch(-9, "", "", tmp_path / "logs" / job_id, 0.0)
    assert_nothing_left(job, wait=GONE_WITHIN_S)
    if runtime == "podman":
        assert wait_for(lambda: containers_of(job_id) == [], GONE_WITHIN_S, 1.0), containers_of(job_id)
    assert wait_for(lambda: not processes_of(job_id), GONE_WITHIN_S, 1.0), processes_of(job_id)


@pytest.mark.parametrize("shm_size, refused", [("64m", True), ("200m", False)])
def test_a_container_with_a_dev_shm_of_its_own_is_sized_to_it_or_refused(tmp_path, images, shm_size, refused):
    """podman with the container's own /dev/shm (--ipc=private --shm-size): 64 MB cannot hold Ray's smallest object
    store with room to spare, and the job says so before any node starts; 200 MB holds a store sized to it."""
    job_id = new_job_id("shm")
    flags = f"--ipc=private --shm-size={shm_size} --env=DRIVER_EXIT"
    result = subprocess.run(argv(tmp_path, "podman", images("podman"), job_id), cwd=tmp_path, capture_output=True,
                            text=True, env=host_env("podman", MPIRAY_CONTAINER_FLAGS=flags), timeout=300)
    job = Launch(result.returncode, result.stdout, result.stderr, tmp_path / "logs" / job_id, 0.0)
    if refused:
        assert job.returncode == 2, job.stdout[-3000:] + job.stderr[-3000:]
        assert "/dev/shm holds 64 MiB" in job.stdout + job.stderr and "--ipc=host" in job.stdout + job.stderr
        assert not any(job.event(rank, "node_alive") for rank in range(2))
    else:
        assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
        for rank in range(2):
            store = job.event(rank, "node_manifest")["object_store"]
            assert 75 * 2**20 <= store <= 200 * 2**20 * 0.9
    assert_nothing_left(job, wait=10)
    assert containers_of(job_id) == []


@pytest.mark.skipif(os.getuid() != 0 or not shutil.which("setpriv"), reason="the attack runs as uid 65534 (setpriv)")
def test_another_uid_cannot_read_the_token_through_the_image(tmp_path, images):
    """The token sits in the rank's 0700 private dir, which the image binds: uid 65534 reads it neither on the host
    nor through its own ch-run of the same image with the same bind (Charliecloud runs unprivileged)."""
    image, job_id = images("charliecloud"), new_job_id("token")
    launcher = subprocess.Popen(argv(tmp_path, "charliecloud", image, job_id), cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, env=host_env("charliecloud", DRIVER_SLEEP="300"))
    try:
        wait_for_text(tmp_path / "logs" / job_id, "rank-0000.log", "driver started (pid", timeout=JOB_TIMEOUT_S)
        private = Path(Launch(0, "", "", tmp_path / "logs" / job_id, 0).event(0, "private_dir")["path"])
        token = next(private.glob("*token*"))
        nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        direct = subprocess.run([*nobody, "cat", str(token)], capture_output=True, text=True, timeout=60)
        bound = subprocess.run([*nobody, "env", "USER=nobody", "ch-run", f"--bind={private}:{private}", image, "--",
                                "cat", str(token)], capture_output=True, text=True, timeout=60)
        for attack in (direct, bound):
            assert attack.returncode != 0 and "Permission denied" in attack.stderr, attack
            assert token.read_text().strip() not in attack.stdout
    finally:
        launcher.send_signal(signal.SIGTERM)  # mpirun passes it on: the job ends as under scancel
        launcher.communicate(timeout=120)
    assert_nothing_left(Launch(launcher.returncode, "", "", tmp_path / "logs" / job_id, 0), wait=10)


def test_an_image_that_does_not_run_stops_the_job_before_any_node_with_the_runtimes_words(tmp_path, images):
    images("charliecloud")  # Charliecloud installed (the fixture installs it with its image): ch-run's own words
    missing, job_id = tmp_path / "no-such-image", new_job_id("no-image")
    result = subprocess.run(argv(tmp_path, "charliecloud", str(missing), job_id), cwd=tmp_path, capture_output=True,
                            text=True, env=host_env("charliecloud"), timeout=300)
    job = Launch(result.returncode, result.stdout, result.stderr, tmp_path / "logs" / job_id, 0.0)
    assert job.returncode == 2, job.stdout[-3000:] + job.stderr[-3000:]
    said = job.stdout + job.stderr
    assert f"charliecloud:{missing} did not run" in said and "ch-run" in said, said[-3000:]
    report = subprocess.run([PYTHON, "-m", "mpiray", "logs", "--json", str(job.job_dir)], capture_output=True,
                            text=True, timeout=60, cwd=ROOT)
    assert {cause["cause"] for cause in json.loads(report.stdout)["causes"]} == {"image_failed"}, report.stdout
    assert not any(job.event(rank, "node_alive") for rank in range(2))
    assert_nothing_left(job, wait=10)


@pytest.mark.slurm
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_the_container_job_script_as_shipped_on_three_hosts(slurm_testbed, jobs, tmp_path, images, runtime):
    image = images(runtime)
    env = jobs.env(tmp_path, ["python3", "-c", DRIVER], MPIRAY_CONTAINER=f"{runtime}:{image}",
                   **runtime_env(runtime),
                   PYTHONPATH=os.pathsep.join(filter(None, [str(NO_RAY), os.environ.get("PYTHONPATH")])))
    job_id = jobs.submit(ROOT / "jobs" / "slurm_container.sh", tmp_path, env, "--nodes=3", "--cpus-per-task=2",
                         "--account=")
    result = slurm_testbed.wait_for_job(job_id, JOB_TIMEOUT_S)
    output = (tmp_path / f"{jobs.name}-{job_id}.out").read_text()  # --output=%x-%j.out, %x the test's name
    assert (result.state, result.exit_code) == ("COMPLETED", 0), output[-3000:]
    inside = driver_report(output, "INSIDE")
    assert (inside["nodes"], inside["python"]) == (3, "3.11.2")
    jobs.wait_until_gone(job_id)
    if runtime == "podman":
        assert containers_of(job_id) == []
