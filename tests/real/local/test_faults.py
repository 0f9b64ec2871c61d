"""The fault matrix: each failure injected for real ends the job quickly, loudly and cleanly."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from helpers import (
    ROOT,
    Launch,
    alive_pids,
    assert_nothing_left,
    causes,
    exit_codes,
    last_event,
    launch,
    launcher_argv,
    mpirun_version,
    new_job_id,
    rank_pid,
    wait_for_events,
)

PROBE = [sys.executable, str(ROOT / "tests/drivers/probe.py")]


def start(tmp_path: Path, ranks: int, args=(), driver=(), env=None):
    job_id = new_job_id("fault")
    argv = launcher_argv(ranks, ["--log-dir", str(tmp_path / "logs"), "--job-id", job_id, *args], driver)
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    return proc, tmp_path / "logs" / job_id


def finish(proc: subprocess.Popen, job_dir: Path, timeout: float) -> Launch:
    started = time.monotonic()
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return Launch(proc.returncode, out, err, job_dir, time.monotonic() - started)


def test_worker_rank_killed_during_startup(tmp_path):
    """mpirun kills the other ranks; their Ray processes die with them (no rank can tidy up)."""
    proc, job_dir = start(tmp_path, 2)
    wait_for_events(job_dir / "rank-0001.jsonl", "worker_will_connect")[-1]
    time.sleep(2)  # let both ranks' Ray processes spawn, so that there is something to leak
    run_pids = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
    os.kill(rank_pid(job_dir, 1), signal.SIGKILL)
    killed_at = time.monotonic()
    run = finish(proc, job_dir, timeout=60)
    assert run.returncode != 0
    assert time.monotonic() - killed_at < 30
    assert "rank-0000.log" in os.listdir(job_dir)  # logs kept
    assert len(run_pids) > 6  # mpirun's proxy, 2 ranks, their `ray start`s and Ray's processes
    deadline = killed_at + 30
    while alive_pids(run_pids) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not alive_pids(run_pids)
    # The killed rank could not remove its private dir (with the cluster's token): its guard did.
    dirs = [last_event(job_dir, rank, "private_dir")["path"] for rank in (0, 1)]
    assert len(dirs) == 2 and not [d for d in dirs if os.path.exists(d)]


def head_pid(job_dir: Path, name: str = "gcs_server") -> int:
    """The pid of the head node's process of that name (gcs_server, raylet), as rank 0 logged its node's."""
    (pid,) = [pid for pid in last_event(job_dir, 0, "node_pids")["pids"] if psutil.Process(pid).name() == name]
    return pid


def test_the_heads_gcs_killed_comes_back_and_the_drivers_actors_tasks_and_nodes_carry_on(tmp_path):
    """The default (--gcs-restarts 3, Ray 2.60's RocksDB store): SIGKILL of the head's gcs_server mid-run, with the
    dashboard on. The GCS answers again within seconds; the driver's actors on every node answer from the same
    PIDs, a detached one too, a new task runs on every node and a new actor starts; the job ends 0, nothing left."""
    go = tmp_path / "go"
    proc, job_dir = start(tmp_path, 3, args=["--dashboard"],
                          driver=[sys.executable, str(ROOT / "tests/drivers/gcs_restart.py"), str(go)])
    before, back, gcs, read = None, None, 0, []
    try:
        for line in proc.stdout:
            read.append(line)
            if line.startswith("BEFORE "):
                before = json.loads(line[len("BEFORE "):])
                break
        if before is not None:
            gcs = head_pid(job_dir)
            os.kill(gcs, signal.SIGKILL)
            (back,) = wait_for_events(job_dir / "rank-0000.jsonl", "gcs_back", timeout=60)
            go.touch()
    finally:
        run = finish(proc, job_dir, timeout=120)
    assert before is not None and run.returncode == 0, run.stderr[-3000:]
    assert "mpiray: pre-flight: gcs restarts 3: its tables in RocksDB on the head's node-local disk\n" in read
    (lost,) = [r for r in run.events(0) if r["event"] == "gcs_lost"]
    assert lost["fields"]["pid"] == gcs and lost["fields"]["restarts_left"] == 3
    assert back["restart"] == 1 and back["pid"] != gcs and back["seconds"] < 30
    after = json.loads(run.stdout[run.stdout.index("AFTER ") + len("AFTER "):].splitlines()[0])
    assert after["actors"] == before["actors"] and len(after["actors"]) == 3  # the same processes, on every node
    assert after["detached"] == before["detached"]
    assert after["tasks"] == after["nodes"] == sorted(before["actors"]) and after["new_actor"]["pid"]
    assert "head_lost" not in {r["event"] for r in run.events(0)}
    assert exit_codes(job_dir, 3) == [0, 0, 0]
    assert_nothing_left(run, wait=10)
    assert not psutil.pid_exists(back["pid"])  # the GCS started again is stopped with its node


@pytest.mark.parametrize("process, args", [("gcs_server", ["--gcs-restarts", "0"]), ("raylet", [])],
                         ids=["gcs-without-restarts", "raylet"])
def test_the_heads_gcs_without_restarts_or_its_raylet_killed_ends_every_rank_with_1(tmp_path, process, args):
    proc, job_dir = start(tmp_path, 2, args=args, driver=[*PROBE, "--sleep", "600"])
    wait_for_events(job_dir / "rank-0000.jsonl", "driver_started")[-1]
    os.kill(head_pid(job_dir, process), signal.SIGKILL)
    killed_at = time.monotonic()
    run = finish(proc, job_dir, timeout=90)
    assert run.returncode == 1
    assert time.monotonic() - killed_at < 30
    assert run.event(0, "head_lost")["output"].endswith("rank-0000.ray.log")
    assert "rank-0000.ray.log" in run.stderr  # said where to look, at once
    assert causes(run.job_dir) == {"head_lost": [0]}
    assert exit_codes(job_dir, 2) == [1, 1]
    if args:
        assert "mpiray: pre-flight: gcs restarts off (--gcs-restarts 0)" in run.stdout
    assert_nothing_left(run, wait=10)


def test_rank_0s_own_process_killed_ends_the_job_and_leaves_nothing(tmp_path):
    """SIGKILL of rank 0's own process (mpiray's, not a Ray one) while the driver runs: nothing of it can tear down,
    so the MPI launcher must end the job, and no Ray process of any rank, nor the driver, may outlive it."""
    proc, job_dir = start(tmp_path, 2, driver=[*PROBE, "--sleep", "600"])
    driver = wait_for_events(job_dir / "rank-0000.jsonl", "driver_started")[-1]["pid"]
    os.kill(psutil.Process(driver).ppid(), signal.SIGKILL)  # the driver's parent: rank 0
    killed_at = time.monotonic()
    run = finish(proc, job_dir, timeout=90)
    assert run.returncode != 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert time.monotonic() - killed_at < 30
    assert_nothing_left(run, wait=15)
    assert not psutil.pid_exists(driver) or psutil.Process(driver).status() == psutil.STATUS_ZOMBIE


def test_driver_exception_exit_7(tmp_path):
    driver = [sys.executable, "-c", "import ray; ray.init(); raise SystemExit(7)"]
    run = launch(tmp_path, 2, driver=driver, tag="exc")
    assert run.returncode == 7
    assert_nothing_left(run)


LONG_TEMP = "/tmp/" + "t" * 60  # with mpiray's own part, Ray's socket paths exceed 107 bytes


# Input that the command line already refuses fails before MPI starts, and only the first task says so.
BEFORE_MPI = ["unknown-option", "nan-timeout", "bad-env-choice", "job-id-outside-log-dir"]


@pytest.mark.parametrize("args, env, messages, cause", [
    (["--temp-dir", LONG_TEMP], {}, ["107-byte AF_UNIX limit", "--temp-dir"], "socket_path_too_long"),
    (["--temp-dir", "/proc/mpiray"], {}, ["cannot create the temp dir /proc/mpiray/", "--temp-dir"], "temp_dir"),
    (["--interface", "ib99"], {}, ["--interface ib99: no such interface", "lo (127.0.0.1)"], "config"),
    (["--object-store-memory", "100T"], {}, ["--object-store-memory", "does not fit"], "config"),
    (["--no-such-option"], {}, ["unrecognized arguments: --no-such-option"], None),
    (["--startup-timeout", "nan"], {}, ["--startup-timeout", "must be a finite number"], None),
    ([], {"MPIRAY_RAY_NODE_PER": "node"}, ["MPIRAY_RAY_NODE_PER='node': invalid choice (choose from rank, host)"], None),
    (["--job-id", "../escaped"], {}, ["--job-id", "not a job id: '../escaped'"], None),
], ids=["long-temp-dir", "unwritable-temp-dir", "unknown-interface", "object-store-too-big", *BEFORE_MPI])
def test_bad_input_fails_fast_with_a_message_and_leaves_nothing(request, tmp_path, args, env, messages, cause):
    run = launch(tmp_path, 2, args=args, env=env, tag="badinput")
    assert run.returncode == 2
    for message in messages:
        assert message in run.stderr
    if request.node.callspec.id in BEFORE_MPI:
        assert run.stderr.startswith("mpiray: error: ") and len(run.stderr.splitlines()) == 1, run.stderr
        assert not (tmp_path / "logs").exists()
    else:
        assert set(causes(run.job_dir)) == {cause}
    assert run.seconds < 30
    assert [path.name for path in tmp_path.iterdir()] in ([], ["logs"])  # nothing written beside --log-dir
    assert_nothing_left(run)


def test_one_ray_node_per_host(tmp_path):
    run = launch(tmp_path, 4, args=["--ray-node-per", "host"], tag="perhost")
    assert run.returncode == 0, run.stderr
    probe = run.probe()
    assert probe["nodes"] == 1
    assert probe["cpus"] == len(os.sched_getaffinity(0))
    assert "idle_by_design" in run.names(3)
    assert_nothing_left(run)


def test_no_auth_warns_and_leaves_no_shared_token(tmp_path):
    shared_token = Path.home() / ".ray" / "auth_token"
    existed = shared_token.exists()
    run = launch(tmp_path, 2, args=["--no-auth"], tag="noauth")
    assert run.returncode == 0, run.stderr
    assert "--no-auth: anyone who can reach" in run.stderr
    assert run.probe()["env"]["RAY_AUTH_MODE"] == "disabled"
    assert shared_token.exists() == existed  # never written by the launcher
    assert_nothing_left(run)


def test_a_lone_failing_worker_ends_every_rank_with_its_code(tmp_path):
    """Rank 3 alone fails (its temp dir root is missing), never reading rank 0's later messages.

    Those unread messages once made MPICH's MPI_Finalize fail on rank 3 before its closing PMI
    barrier: under srun the other ranks waited there forever; under mpirun hydra SIGKILLed them (9).
    """
    job_id = new_job_id("lone")
    common = [sys.executable, str(ROOT / "start_ray.py"), "--log-dir", str(tmp_path / "logs"), "--job-id", job_id,
              "--", *PROBE]
    argv = [str(Path(sys.executable).parent / "mpirun"), "-np", "3", *common,
            ":", "-np", "1", "-env", "MPIRAY_TEMP_DIR", "/nonexistent-mpiray-root", *common]
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "BAD TERMINATION" not in result.stdout + result.stderr
    assert "rank 3 on" in result.stderr and "/nonexistent-mpiray-root" in result.stderr
    job_dir = tmp_path / "logs" / job_id
    assert exit_codes(job_dir, 4) == [2, 2, 2, 2]
    assert_nothing_left(Launch(result.returncode, result.stdout, result.stderr, job_dir, 0))


@pytest.mark.skipif("HYDRA" not in mpirun_version().upper(), reason="MPICH's PMI-1 client (PMI_PORT) makes the hang")
def test_a_rank_whose_mpi_init_never_returns_exits_after_the_startup_timeout(tmp_path):
    """A process manager that never answers (a PMI server that accepts and stays silent: MPICH's PMI-1 client
    waits for its reply inside MPI_Init) held the rank, deaf to SIGTERM too, until the server went away; now it
    exits 1 after --startup-timeout and says where it hung."""
    with socket.socket() as deaf:
        deaf.bind(("127.0.0.1", 0))
        deaf.listen(4)  # connections queue in the kernel: the client's PMI init is sent and never answered
        env = {**os.environ, "PMI_PORT": f"127.0.0.1:{deaf.getsockname()[1]}", "PMI_ID": "0", "PMI_RANK": "0",
               "PMI_SIZE": "2"}
        started = time.monotonic()
        result = subprocess.run([sys.executable, str(ROOT / "start_ray.py"), "--startup-timeout", "3", "--dry-run",
                                 "--log-dir", str(tmp_path / "logs")], cwd=tmp_path, env=env, capture_output=True,
                                text=True, timeout=120)
        took = time.monotonic() - started
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Timeout (0:00:03)!" in result.stderr and "in mpi_world" in result.stderr, result.stderr[-3000:]
    assert took < 60  # the deadline, not the 120 s timeout of this run
