"""A hostile neighbour on a shared node (a real second uid) can neither break nor read a job, and a
job's end never fails or hangs: re-used job ids, planted or stalled log files, killed ranks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mpiray.elastic.registry import Entry, Registry
from mpiray.logs.events import read_events
from mpiray.raynode.raycompat import ray_version

from helpers import (
    NOBODY,
    ROOT,
    Launch,
    alive_pids,
    as_another_user,
    assert_nothing_left,
    driver_report,
    last_event,
    launch,
    launcher_argv,
    make_private_dir_in_a_process_that_ends,
    new_job_id,
    rank_pid,
)
from process_control import wait_for


def assert_private_dirs_gone(job_dir: Path) -> None:
    """Every rank's private dir was logged, and none is left: a check that fails when the event is renamed."""
    dirs = private_dirs(job_dir)
    assert dirs, f"no private_dir event in {job_dir}: renamed, or no rank started a node"
    assert not any(os.path.exists(d) for d in dirs), dirs


def private_dirs(job_dir: Path) -> list[str]:
    """Every private dir a rank of the job logged, in every run of it."""
    return [record["fields"]["path"] for path in job_dir.glob("rank-*.jsonl") for record in read_events(path)
            if record["event"] == "private_dir"]


def assert_no_world_writable(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            assert not path.lstat().st_mode & 0o002, f"{path} is world-writable"


@pytest.fixture
def secret(tmp_path):
    """A file only its owner may read: what a planted log symlink would ship to the driver."""
    path = tmp_path / "id_rsa"
    path.write_text("SECRET-KEY-MATERIAL\n")
    path.chmod(0o600)
    return path


@as_another_user
def test_another_user_can_neither_read_nor_change_a_running_jobs_files(tmp_path, secret):
    run = launch(tmp_path, 2, driver=[sys.executable, str(ROOT / "tests/drivers/attacked.py"), str(secret)],
                 tag="attacked")
    assert run.returncode == 0, run.stderr
    attack = driver_report(run.stdout, "ATTACK")
    assert attack.get("uid") == NOBODY, attack
    results = attack["results"]
    assert len(results) == 2 * 10  # every attack on both ranks' private dirs
    assert set(results.values()) == {"blocked"}, {k: v for k, v in results.items() if v != "blocked"}
    # Token and sockets untouched: a task ran on every node after the attack.
    after = driver_report(run.stdout, "AFTER")
    assert after["nodes"] == 2 and after["tasks_ran_on"] == 2
    assert "SECRET-KEY-MATERIAL" not in run.stdout + run.stderr + (run.job_dir / "driver.log").read_text()
    # Kept logs carry no world-writable entry; the private dirs (with the token) are gone.
    kept = sorted(run.job_dir.glob("ray-rank-*"))
    assert len(kept) == 2
    for path in kept:
        assert_no_world_writable(path)
    assert after["dirs"] and not any(os.path.exists(d) for d in after["dirs"])
    assert_nothing_left(run)


@pytest.mark.smoke_ray
def test_every_ray_node_keeps_its_files_in_its_ranks_private_dir(tmp_path):
    """Workers' too: Ray before 2.55 ignores a worker's --temp-dir (it would use the head's dir), so
    mpiray points it at the rank's own dir itself and says so in the rank's log."""
    run = launch(tmp_path, 2, driver=[sys.executable, str(ROOT / "tests/drivers/session_dirs.py")], tag="sessions")
    assert run.returncode == 0, run.stderr
    seen = driver_report(run.stdout, "SESSIONS")
    private = {int(rank): path for rank, path in seen["private"].items()}
    assert sorted(private) == [0, 1] and len(seen["nodes"]) == 2  # a task ran on each node
    for name, dirs in seen["nodes"].items():
        own = private[int(name.rsplit("-rank", 1)[1])]
        assert dirs["temp_dir"] == f"{own}/ray", (name, dirs, private)
        assert dirs["session_dir"].startswith(f"{own}/ray/session_"), (name, dirs, private)
    worker_ray_log = (run.job_dir / "rank-0001.ray.log").read_text()
    assert "will be ignored" not in worker_ray_log  # Ray's own warning about a worker's --temp-dir
    old_ray = tuple(map(int, ray_version().split(".")[:2])) < (2, 55)
    notes = {r["fields"]["key"]: r["fields"]["note"] for r in run.events(1) if r["event"] == "compat_note"}
    assert ("ignores a worker's --temp-dir" in notes.get("temp_dir", "")) == old_ray, notes
    assert not any(os.path.exists(d) for d in private.values())
    assert_nothing_left(run)


HOLD_RAYS_LOCK = """
import hashlib, fcntl, os, sys, time
from pathlib import Path
locks = Path(sys.argv[1]) / "_ray_lockfiles"  # where Ray Tune and Train put their locks without RAY_TMPDIR
locks.mkdir(mode=0o777)
os.chmod(locks, 0o777)
name = hashlib.sha256(str(Path(sys.argv[2]).resolve()).encode()).hexdigest() + ".lock"
fd = os.open(locks / name, os.O_RDWR | os.O_CREAT, 0o666)
fcntl.flock(fd, fcntl.LOCK_EX)
print("HELD", flush=True)
time.sleep(300)
"""


@as_another_user
def test_a_neighbour_holding_rays_file_locks_in_tmp_stalls_no_checkpoint(tmp_path, short_tmp):
    # Ray Tune and Train lock a checkpoint's local copy in $RAY_TMPDIR/_ray_lockfiles, else in
    # $TMPDIR's or /tmp's, where another user can hold the lock (a checkpoint then waits forever) or make
    # the directory first. mpiray points RAY_TMPDIR at each rank's private dir, for nodes and driver.
    shared_tmp = short_tmp  # a /tmp of its own: world-writable and sticky
    shared_tmp.chmod(0o1777)
    target = f"/tmp/mpiray-checkpoint-{os.getpid()}"
    neighbour = subprocess.Popen(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "/usr/bin/python3", "-c",
         HOLD_RAYS_LOCK, str(shared_tmp), target], stdout=subprocess.PIPE, text=True)
    try:
        assert neighbour.stdout.readline().strip() == "HELD"
        run = launch(tmp_path, 2, driver=[sys.executable, str(ROOT / "tests/drivers/tune_locks.py"), target],
                     env={"TMPDIR": str(shared_tmp)}, tag="locks")
    finally:
        neighbour.kill()
        neighbour.wait(timeout=10)
    assert run.returncode == 0, run.stderr[-3000:]
    locks = driver_report(run.stdout, "LOCKS")
    assert len(locks) == 3, locks  # the driver and a task on each of the 2 nodes
    private = private_dirs(run.job_dir)
    for place, lock_dir in locks.items():
        assert any(lock_dir == f"{own}/_ray_lockfiles" for own in private), (place, lock_dir, private)
    assert_nothing_left(run)


def test_a_reused_job_id_keeps_every_runs_logs_and_succeeds(tmp_path):
    job_id = new_job_id("again")
    job_dir = tmp_path / "logs" / job_id
    for run_number in (1, 2, 3):
        argv = launcher_argv(2, ["--log-dir", str(tmp_path / "logs"), "--job-id", job_id],
                             [sys.executable, "-c", f"print('run {run_number}')"])
        result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=180)
        assert result.returncode == 0, result.stderr
        assert "teardown" not in result.stderr
    assert sorted(p.name for p in job_dir.glob("ray-rank-0000*")) == ["ray-rank-0000", "ray-rank-0000.2", "ray-rank-0000.3"]
    assert (job_dir / "driver.log").read_text().splitlines() == ["run 1", "run 2", "run 3"]
    assert [r["fields"]["code"] for r in read_events(job_dir / "rank-0001.jsonl") if r["event"] == "exit"] == [0, 0, 0]
    assert_private_dirs_gone(job_dir)


def test_a_planted_driver_log_neither_hangs_the_job_nor_changes_its_exit_code(tmp_path):
    job_id = new_job_id("fifo")
    job_dir = tmp_path / "logs" / job_id
    job_dir.mkdir(parents=True)
    os.mkfifo(job_dir / "driver.log")  # opened for writing, a FIFO without a reader would block forever
    run = launch(tmp_path, 2, args=["--job-id", job_id],
                 driver=[sys.executable, "-c", "print('still here'); raise SystemExit(3)"], tag="fifo")
    assert run.returncode == 3, run.stderr
    assert "still here" in run.stdout
    assert last_event(job_dir, 0, "driver_log_incomplete")["problem"].startswith("cannot open")
    assert_private_dirs_gone(job_dir)




def test_killed_ranks_leave_no_private_dir(tmp_path):
    """SIGKILL of mpirun: no rank can tidy up; each rank's guard removes its dir (and the token), and the last
    one the job's spill dir on the host (a run here left it in /tmp before the guards knew of it)."""
    job_id = new_job_id("killed")
    job_dir = tmp_path / "logs" / job_id
    argv = launcher_argv(2, ["--log-dir", str(tmp_path / "logs"), "--job-id", job_id],
                         [sys.executable, "-c", "import time; time.sleep(120)"])
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (job_dir / "driver.log").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        dirs = private_dirs(job_dir)
        assert len(dirs) == 2 and all(os.path.isdir(d) for d in dirs)
        spill = Path(last_event(job_dir, 0, "spill_dir")["path"]).parent
        assert spill.is_dir()
        ranks = [rank_pid(job_dir, rank) for rank in (0, 1)]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        for pid in ranks:  # mpirun's death reaches its ranks through hydra's proxy; make sure it did
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 30
        while any(os.path.exists(d) for d in dirs) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [d for d in dirs if os.path.exists(d)]
        wait_for(lambda: not spill.exists(), 10, 0.2)  # the guards remove it after the private dirs
        assert not spill.exists(), sorted(spill.rglob("*"))
        assert any(job_dir.glob("ray-rank-*"))  # the guard kept Ray's logs
        logged = Launch(0, "", "", job_dir, 0).stopped_pids()
        deadline = time.monotonic() + 30
        while alive_pids(logged) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not alive_pids(logged)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


@pytest.mark.train
@as_another_user
def test_the_standalone_trainers_ray_needs_its_token_and_keeps_its_dir_private(tmp_path, secret):
    home = tmp_path / "home"
    home.mkdir()
    script = f"""
import json, os, subprocess, sys
from pathlib import Path
import ray
from train.cluster import ray_cluster
with ray_cluster(os.environ, num_cpus=1):
    private = str(Path(os.environ["RAY_AUTH_TOKEN_PATH"]).parent)
    attacker = Path({str(ROOT / "tests/drivers/attacker.py")!r}).read_text()
    attack = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3",
                             "-I", "-c", attacker, {str(secret)!r}, private], capture_output=True, text=True, timeout=60)
    env = {{k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}}
    env["RAY_AUTH_MODE"] = "disabled"
    client = subprocess.run([sys.executable, "-c", "import ray; ray.init(address=%r); print('CONNECTED')"
                             % ray.get_runtime_context().gcs_address], env=env, capture_output=True, text=True,
                            timeout=60)
    print("REPORT " + json.dumps({{"private": private, "attack": json.loads(attack.stdout),
                                  "connected": "CONNECTED" in client.stdout,
                                  "auth_mode": os.environ["RAY_AUTH_MODE"]}}), flush=True)
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MPIRAY_"))}
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env={**env, "HOME": str(home)},
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    report = driver_report(result.stdout, "REPORT")
    assert report["auth_mode"] == "token"
    assert report["connected"] is False  # a client without the token is refused
    assert set(report["attack"]["results"].values()) == {"blocked"}, report["attack"]
    assert not os.path.exists(report["private"])  # removed at the end
    assert not (home / ".ray").exists()  # no token written to ~/.ray/auth_token






def test_a_job_removes_the_private_dirs_that_killed_ranks_left(tmp_path, short_tmp):
    """Slurm's SIGKILL of a whole job step takes each rank's guard too; the next job on the host
    removes what they left (here under its own --temp-dir, as on a node-local /tmp)."""
    temp = short_tmp
    stale = [make_private_dir_in_a_process_that_ends(temp) for _ in range(2)]
    run = launch(tmp_path, 2, args=["--temp-dir", str(temp)], tag="sweep")
    assert run.returncode == 0, run.stderr[-3000:]
    assert not any(path.exists() for path in stale)
    swept = [path for rank in (0, 1) for path in (run.event(rank, "stale_dirs_removed") or {}).get("paths", [])]
    assert sorted(swept) == sorted(map(str, stale))
    assert not list(temp.iterdir())  # and this job's own dirs are gone too
    assert_nothing_left(run)


def entry(job_id: str = "1234", **changes) -> Entry:
    fields = dict(job_id=job_id, gcs_address="10.0.0.1:25200", head_ip="10.0.0.1", host="n1", pid=4242,
                  uid=os.getuid(), ray="2.60.0", python="3.11.7", log_dir="/logs/1234", started=time.time() - 5,
                  heartbeat=time.time())
    return Entry(**{**fields, **changes})


def test_another_user_can_neither_read_a_token_nor_plant_an_entry(tmp_path):
    # The registry sits in a world-searchable place here, as a home directory can be: its own mode keeps
    # everyone else out. Checked as a real second user (uid 65534).
    if os.getuid() != 0:
        pytest.skip("needs root to act as another user")
    os.chmod(tmp_path, 0o755)
    registry = Registry(tmp_path / "clusters")
    registry.publish(entry(), "s3cret")
    attack = (
        "import json, sys\n"
        f"root = {str(registry.root)!r}\n"
        "results = {}\n"
        "for what, action in [('read token', lambda: open(root + '/1234.token').read()),\n"
        "                     ('list', lambda: __import__('os').listdir(root)),\n"
        "                     ('plant', lambda: open(root + '/evil.json', 'w').write('{}'))]:\n"
        "    try:\n"
        "        action()\n"
        "        results[what] = 'done'\n"
        "    except OSError as error:\n"
        "        results[what] = type(error).__name__\n"
        "print(json.dumps(results))\n"
    )
    result = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-I",
                             "-c", attack], capture_output=True, text=True, timeout=30, check=True)
    assert json.loads(result.stdout) == {"read token": "PermissionError", "list": "PermissionError",
                                         "plant": "PermissionError"}
    assert [e.job_id for e in registry.running()] == ["1234"]
