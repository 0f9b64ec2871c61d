"""The launcher for real: mpirun, Ray, the driver, exit codes, logs, teardown, failures."""

from __future__ import annotations

import importlib.util
import json
import os
import pty
import re
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from helpers import (
    BIN,
    ROOT,
    Launch,
    assert_nothing_left,
    causes,
    driver_report,
    exit_codes,
    fail_join,
    hydra_loses_exit_codes_after_a_signal,
    last_event,
    launch,
    launcher_argv,
    mpirun_is_open_mpi,
    new_job_id,
    rank_pids,
)
from process_control import wait_for

HOST_CPUS = len(os.sched_getaffinity(0))


def memory_the_kernel_allows() -> int:
    """The oracle, read from the kernel's own files, not mpiray's code: MemTotal, or the lowest memory limit of
    this process's cgroup and its parents (v1's memory.limit_in_bytes or v2's memory.max) if lower."""
    (total,) = [int(line.split()[1]) * 1024 for line in open("/proc/meminfo") if line.startswith("MemTotal:")]
    limits = []
    for line in open("/proc/self/cgroup"):
        _, controllers, path = line.rstrip("\n").split(":", 2)
        if controllers == "memory":
            root, name = Path("/sys/fs/cgroup/memory"), "memory.limit_in_bytes"
        elif controllers == "":
            root = next((p for p in (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))
                         if (p / "cgroup.controllers").exists()), None)
            if root is None:
                continue
            name = "memory.max"
        else:
            continue
        here = root / path.lstrip("/")
        for directory in (here, *here.parents):
            if directory == root.parent:
                break
            value = (directory / name).read_text().strip() if (directory / name).exists() else "max"
            if value != "max":
                limits.append(int(value))
    return min([total, *limits])


@pytest.mark.parametrize("ranks", [1, pytest.param(2, marks=[pytest.mark.smoke_mpi, pytest.mark.smoke_ray]), 4])
def test_cluster_has_one_node_per_rank_and_the_host_cpus(tmp_path, ranks):
    run = launch(tmp_path, ranks, tag=f"np{ranks}")
    assert run.returncode == 0, run.stderr
    probe = run.probe()
    assert probe["nodes"] == ranks
    assert probe["cpus"] == HOST_CPUS  # ranks on one host split it, never count it twice
    host_memory = memory_the_kernel_allows()
    given = probe["memory"] + probe["object_store_memory"]
    assert host_memory * 0.99 <= given <= host_memory
    assert probe["env"]["MPIRAY_NUM_NODES"] == str(ranks)
    assert probe["env"]["RAY_AUTH_MODE"] == "token"
    assert "127." not in " ".join(probe["ips"])
    assert run.event(0, "cluster_ready")["nodes"] == ranks
    joined = [record["fields"]["peer"] for record in run.events(0) if record["event"] == "worker_joined"]
    assert sorted(joined) == list(range(1, ranks))
    for rank in range(1, ranks):
        assert run.event(rank, "node_alive")["ip"] == probe["ips"][rank]
    assert "ready in" in run.stdout
    assert_nothing_left(run)


@pytest.mark.skipif(HOST_CPUS < 2, reason="one CPU cannot be split")
def test_tasks_of_the_other_nodes_on_the_heads_host_never_run_on_the_gcs_cpu(tmp_path):
    # Unbound ranks share this host with the head: one CPU is left to the head's GCS ("on": this
    # host has fewer than the 8 CPUs that "auto" asks for).
    driver = [sys.executable, str(ROOT / "tests" / "drivers" / "affinity.py")]
    run = launch(tmp_path, 3, args=["--gcs-core", "on"], driver=driver, tag="affinity")
    assert run.returncode == 0, run.stderr
    found = driver_report(run.stdout, "AFFINITY", run.stderr)
    host, every = socket.gethostname(), sorted(os.sched_getaffinity(0))
    kept = max(every)
    assert found == {f"{host}-rank0": every, f"{host}-rank1": every[:-1], f"{host}-rank2": every[:-1]}
    assert any(f"CPU {kept} is left to the head's GCS" in record["fields"]["note"]
               for record in run.events(1) if record["event"] == "resource_note")
    assert_nothing_left(run)


@pytest.mark.smoke_ray
def test_task_output_on_every_node_reaches_the_driver(tmp_path):
    # Each node's log monitor streams its tasks' prints to the driver, as with a plain `ray start`.
    run = launch(tmp_path, 3, driver=[sys.executable, str(ROOT / "tests/drivers/task_output.py")], tag="output",
                 env={"RAY_DEDUP_LOGS": "0"})  # else Ray folds the lines that differ only in the node id
    assert run.returncode == 0, run.stderr
    nodes = next(line for line in run.stdout.splitlines() if line.startswith("NODES ")).split()[1:]
    assert len(nodes) == 3
    for node in nodes:
        assert f"TASK-OUTPUT from {node}" in run.stdout + run.stderr, f"no output from node {node}"
    assert_nothing_left(run)


@pytest.mark.smoke_mpi
def test_driver_exit_code_is_the_job_exit_code(tmp_path):
    run = launch(tmp_path, 2, driver=[sys.executable, str(ROOT / "tests/drivers/probe.py"), "--exit", "3"], tag="exit3")
    assert run.returncode == 3, run.stderr
    assert run.event(0, "driver_exited") == {"code": 3}
    assert run.event(1, "job_ended") == {"code": 3}
    assert exit_codes(run.job_dir, 2) == [3, 3]
    assert causes(run.job_dir) == {"driver_failed": [0]}
    assert_nothing_left(run)


@pytest.mark.smoke_ray
def test_token_is_required_and_never_on_a_command_line_or_in_a_log(tmp_path):
    driver = [sys.executable, str(ROOT / "tests/drivers/probe.py"), "--unauthenticated-client"]
    run = launch(tmp_path, 2, driver=driver, tag="auth")
    assert run.returncode == 0, run.stderr
    assert run.probe()["unauthenticated"]["connected"] is False
    token_file = run.probe()["env"]["RAY_AUTH_TOKEN_PATH"]
    assert not os.path.exists(token_file)  # removed with the temp dir at teardown
    token = Path(token_file).name
    for log in [*run.job_dir.glob("rank-*.log"), *run.job_dir.glob("rank-*.jsonl")]:
        # Ray 2.52 logs the token file's path (not the token) whenever a process loads it: not ours to change.
        lines = [line for line in log.read_text().splitlines() if "Loaded authentication token from file" not in line]
        assert token not in "\n".join(lines).replace("RAY_AUTH_TOKEN_PATH", "")
    fingerprints = {run.event(rank, "node_manifest")["token"] for rank in (0, 1)}
    assert len(fingerprints) == 1 and fingerprints.pop().startswith("sha256:")
    assert_nothing_left(run)


def test_missing_driver_fails_cleanly(tmp_path):
    run = launch(tmp_path, 2, driver=["no-such-program-xyz"], tag="nodriver")
    assert run.returncode == 2
    assert "cannot start the driver ['no-such-program-xyz']" in run.stderr
    assert causes(run.job_dir) == {"driver_not_found": [0]}
    assert_nothing_left(run)


def test_port_in_use_is_named_within_seconds(tmp_path):
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = launch(tmp_path, 2, args=["--port", str(port)], tag="port")
    assert run.returncode == 2
    assert f"--port {port} is already in use" in run.stderr
    assert causes(run.job_dir) == {"port_in_use": [0]}
    assert run.seconds < 30
    assert_nothing_left(run)


def test_startup_timeout_names_the_rank_whose_node_never_came_up(tmp_path, pace):
    """One worker's `ray start` hangs (a sick host); the others come up well within the timeout, which is sized
    from this machine's pace. The job ends at the timeout, naming that rank alone, and stops the hung start."""
    timeout = round(pace.deadline(3))
    run = launch(tmp_path, 3, args=["--startup-timeout", str(timeout)], tag="timeout",
                 env=fail_join(str(tmp_path / "hung"), "HANG_JOIN"))
    assert run.returncode == 1, run.stderr[-3000:]  # exit 1, as docs/options.md#exit-codes promises
    (found,) = causes(run.job_dir).items()
    assert found[0] == "startup_timeout" and len(found[1]) == 1, found
    (rank,) = found[1]
    said = [line for line in run.stderr.splitlines() if f"--startup-timeout {timeout} s" in line]
    assert said and all(f"rank {rank}" in line for line in said), run.stderr[-3000:]
    assert run.seconds < timeout + pace.deadline(), run.seconds  # at the timeout, not at the hang's end
    assert_nothing_left(run)


def test_time_limit_stops_a_hanging_driver(tmp_path):
    driver = [sys.executable, str(ROOT / "tests/drivers/probe.py"), "--sleep", "600"]
    run = launch(tmp_path, 1, args=["--time-limit", "20", "--stop-grace", "2"], driver=driver, tag="limit")
    assert run.returncode == 124
    assert "ran past --time-limit 20 s" in run.stderr
    assert causes(run.job_dir) == {"time_limit": [0]}
    assert_nothing_left(run)


def test_a_walltime_end_the_scheduler_names_stops_the_driver_margin_seconds_before(tmp_path, pace):
    # A Slurm job's end (SLURM_JOB_END_TIME) with an explicit --walltime-margin, as under PBS by default:
    # the driver gets SIGTERM and its grace, and the job ends (124) before its walltime would.
    marker = tmp_path / "driver-got-sigterm"
    driver = [sys.executable, str(ROOT / "tests/drivers/probe.py"), "--sleep", "600", "--sigterm-marker", str(marker)]
    margin, start_up = 20, pace.deadline(phases=2)
    ends_at = int(time.time() + start_up + margin)
    run = launch(tmp_path, 2, args=["--walltime-margin", str(margin), "--stop-grace", "3"], driver=driver,
                 env={"SLURM_JOB_ID": "77", "SLURM_JOB_END_TIME": str(ends_at)}, tag="walltime")
    assert run.returncode == 124, run.stderr[-3000:]
    assert time.time() < ends_at  # ended before the walltime
    watched, near = run.event(0, "walltime_watched"), run.event(0, "walltime_near")
    assert watched["ends_at"] == near["ends_at"] == ends_at and near["margin"] == margin
    assert marker.exists() and exit_codes(run.job_dir, 2) == [124, 124]
    assert causes(run.job_dir) == {"walltime": [0]}
    assert_nothing_left(run)


def test_at_the_walltime_ray_sees_the_workers_draining_before_the_driver_is_stopped(tmp_path, pace):
    """Before the driver's SIGTERM, rank 0 drains every worker's node through Ray (reason preemption, the moment
    they are killed) and leaves Ray's libraries DRAIN_NOTICE to see it: Ray Train's get_preemption_info() and
    Serve act on it. The head's node is not drained (the driver connects through it)."""
    checkpoint = tmp_path / "checkpoint.json"
    driver = [sys.executable, str(ROOT / "tests/drivers/drain_watch.py"), str(checkpoint)]
    margin, grace, start_up = 25, 4, pace.deadline(phases=3)
    ends_at = int(time.time() + start_up + margin)
    run = launch(tmp_path, 3, args=["--walltime-margin", str(margin), "--stop-grace", str(grace)], driver=driver,
                 env={"SLURM_JOB_ID": "78", "SLURM_JOB_END_TIME": str(ends_at)}, tag="drain")
    assert run.returncode == 124, run.stderr[-3000:]
    saved = json.loads(checkpoint.read_text())  # the driver's checkpoint is there after the job
    (record,) = [record for record in run.events(0) if record["event"] == "nodes_draining"]
    drained = record["fields"]
    workers = sorted(set(saved["nodes"]) - {saved["head"]})
    assert drained["nodes"] == 2 and drained["refused"] == {}
    assert sorted(saved["draining"]) == workers  # every worker's node, seen while the driver ran
    for seen in saved["draining"].values():
        assert seen["seen_at"] < saved["sigterm_at"]
        # The deadline Ray was given: the notice, the driver's grace and Ray's stop after it (5 s), from the drain.
        assert abs(seen["deadline_ms"] / 1000 - (record["time"] + drained["seconds"])) < 2
    assert drained["seconds"] == round(6 + grace + 5)
    assert exit_codes(run.job_dir, 3) == [124] * 3 and causes(run.job_dir) == {"walltime": [0]}
    assert_nothing_left(run)


def start_until_probe(tmp_path: Path, tag: str, *driver_args: str) -> tuple[subprocess.Popen, str]:
    """A 2-rank job whose driver (tests/drivers/probe.py) is running: it printed its probe line."""
    job_id = new_job_id(tag)
    driver = [sys.executable, str(ROOT / "tests/drivers/probe.py"), *driver_args]
    argv = launcher_argv(2, ["--log-dir", str(tmp_path / "logs"), "--job-id", job_id], driver)
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if line.startswith("PROBE "):
            break
    return proc, job_id


@pytest.mark.smoke_mpi
def test_sigterm_reaches_the_driver_first_then_everything_stops(tmp_path):
    marker = tmp_path / "driver-got-sigterm"
    proc, job_id = start_until_probe(tmp_path, "sigterm", "--sleep", "600", "--sigterm-marker", str(marker))
    try:
        if mpirun_is_open_mpi():
            # Open MPI's mpirun SIGKILLs its ranks 0.25 s after a SIGTERM (PRRTE's fixed delay; see
            # the next test); scancel and a walltime signal every task, so the test does that.
            for pid in rank_pids(proc.pid):
                os.kill(pid, signal.SIGTERM)
        else:
            proc.send_signal(signal.SIGTERM)  # hydra forwards it to every rank and waits for them
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    job_dir = tmp_path / "logs" / job_id
    assert marker.exists(), "the driver never saw SIGTERM"
    assert last_event(job_dir, 0, "stop_signal")["signum"] == signal.SIGTERM
    assert exit_codes(job_dir, 2) == [143, 143]
    assert causes(job_dir) == {"signal": [0]}
    if hydra_loses_exit_codes_after_a_signal():
        assert proc.returncode in (0, 128 + signal.SIGTERM), err
    else:
        assert proc.returncode == 128 + signal.SIGTERM, err
    assert_nothing_left(Launch(proc.returncode, "", err, job_dir, 0))


@pytest.mark.smoke_mpi
def test_sigterm_to_open_mpis_mpirun_leaves_nothing_behind(tmp_path):
    """Open MPI's mpirun answers SIGTERM (or Ctrl-C) with SIGTERM to the ranks and SIGKILL 0.25 s
    later, hard-coded in PRRTE: no time for an orderly stop, and mpirun exits 1. Each rank's guard
    must still kill its Ray node and remove its private dir (with the token)."""
    if not mpirun_is_open_mpi():
        pytest.skip("hydra forwards SIGTERM and waits for the ranks: the test before covers it")
    proc, job_id = start_until_probe(tmp_path, "ompi-term", "--sleep", "600")
    try:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0, err
    job_dir = tmp_path / "logs" / job_id
    assert_nothing_left(Launch(proc.returncode, "", err, job_dir, 0), wait=15)
    private = [last_event(job_dir, rank, "private_dir")["path"] for rank in (0, 1)]
    assert len(private) == 2
    deadline = time.monotonic() + 15
    while any(os.path.exists(d) for d in private) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(os.path.exists(d) for d in private), private


def test_two_jobs_on_one_host_do_not_disturb_each_other(tmp_path):
    """Both run at once; stopping one leaves the other running to its normal end."""
    short_ended = tmp_path / "short-ended"
    long_driver = [sys.executable, str(ROOT / "tests/drivers/probe.py"), "--until", str(short_ended)]
    short_driver = [sys.executable, str(ROOT / "tests/drivers/probe.py"), "--sleep", "600"]
    jobs = {}
    for name, driver in (("long", long_driver), ("short", short_driver)):
        job_id = new_job_id(name)
        argv = launcher_argv(2, ["--log-dir", str(tmp_path / "logs"), "--job-id", job_id], driver)
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        jobs[name] = (proc, tmp_path / "logs" / job_id)
    try:
        short_proc = jobs["short"][0]
        for line in short_proc.stdout:
            if line.startswith("PROBE "):
                break
        short_proc.send_signal(signal.SIGTERM)
        _, short_err = short_proc.communicate(timeout=60)
        short_ended.touch()  # the long job's driver ends now, its cluster whole through the other's end
        long_proc = jobs["long"][0]
        out, err = long_proc.communicate(timeout=180)
    finally:
        for proc, _ in jobs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert short_proc.returncode == 143, short_err
    assert long_proc.returncode == 0, err
    assert '"nodes": 2' in out  # the long job kept both of its own nodes
    gcs = [last_event(job_dir, 0, "session_sent")["gcs_address"] for _, job_dir in jobs.values()]
    assert gcs[0] != gcs[1]


def test_waiting_ranks_use_almost_no_cpu(tmp_path):
    """While the driver runs, the launcher's own rank processes sleep between polls."""
    proc, job_id = start_until_probe(tmp_path, "cpu", "--sleep", "12")
    try:
        ranks = [psutil.Process(pid) for pid in rank_pids(proc.pid)]
        before = {p.pid: sum(p.cpu_times()[:2]) for p in ranks}
        time.sleep(8)
        used = {p.pid: sum(p.cpu_times()[:2]) - before[p.pid] for p in ranks}
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert len(ranks) == 2
    assert proc.returncode == 0
    assert all(seconds / 8 < 0.05 for seconds in used.values()), used


@pytest.mark.smoke_mpi
def test_the_default_driver_without_the_train_extra_says_what_to_install(tmp_path):
    """In the smoke environments (the launcher alone, no RLlib): a clear error before MPI starts, not
    a bare ModuleNotFoundError from rank 0's driver after the whole cluster came up."""
    if importlib.util.find_spec("gymnasium") is not None:
        pytest.skip("the trainer's packages are installed here: the smoke environments have none")
    argv = [str(BIN / "mpirun"), "-np", "2", sys.executable, str(ROOT / "start_ray.py"), "--log-dir", str(tmp_path)]
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    said = [line for line in result.stderr.splitlines() if line.startswith("mpiray:")]  # Open MPI adds its own
    assert len(said) == 1 and said[0].startswith("mpiray: error: the default driver (python -m train") and \
        "pip install '.[train]' in the mpiray checkout" in said[0], result.stderr
    assert not list(tmp_path.iterdir())  # nothing started, nothing logged


def run_in_a_terminal(argv: list[str], timeout: float) -> tuple[int, str]:
    """argv with a pseudo-terminal as stdin/stdout/stderr, as a user's shell runs mpirun."""
    main, child = pty.openpty()
    process = subprocess.Popen(argv, cwd=ROOT, stdin=child, stdout=child, stderr=child, start_new_session=True)
    os.close(child)
    output = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(main, 65536)
                except OSError:  # EIO: every writer closed the terminal
                    break
                if not chunk:
                    break
                output += chunk
            elif process.poll() is not None:
                break
        return process.wait(timeout=max(1.0, deadline - time.monotonic())), output.decode(errors="replace")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, 9)
            process.wait(timeout=10)
        os.close(main)


def test_mpirun_in_a_terminal_shows_the_live_line_and_erases_it_before_the_table(tmp_path, monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    job_id = new_job_id("progress")
    argv = launcher_argv(3, ["--log-dir", str(tmp_path / "logs"), "--job-id", job_id], [sys.executable, "-c", "pass"])
    code, text = run_in_a_terminal(argv, timeout=120)
    assert code == 0, text[-3000:]
    assert re.search(r"\rmpiray: 1/3 ranks ready, 2 joining \(\d+\.\d s\)\x1b\[K", text), repr(text[:2000])
    # Erased (on the same stream) right before the cluster table, which starts a clean line.
    assert re.search(rf"\x1b\[K\r\x1b\[Kmpiray: job {job_id}: 3 Ray nodes", text), repr(text[:2000])


def test_piped_output_has_no_live_line(tmp_path):
    run = launch(tmp_path, 3, driver=[sys.executable, "-c", "pass"], tag="noprogress", timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "ranks ready" not in run.stdout + run.stderr and "\r" not in run.stdout
    assert re.search(r"^mpiray: job \S+: 3 Ray nodes", run.stdout, re.M)


def own_memory_cgroup() -> Path | None:
    """This process's memory cgroup directory (v1's memory controller, else v2's unified tree), if writable."""
    for line in open("/proc/self/cgroup"):
        _, controllers, path = line.rstrip("\n").split(":", 2)
        root = {"memory": Path("/sys/fs/cgroup/memory"), "": Path("/sys/fs/cgroup")}.get(controllers)
        if root is not None and os.access(root / path.lstrip("/"), os.W_OK):
            return root / path.lstrip("/")
    return None


@pytest.mark.skipif(own_memory_cgroup() is None, reason="needs a memory cgroup this user may create (root)")
def test_a_cgroup_memory_limit_caps_what_the_host_gives_ray(tmp_path):
    """A job confined to a memory cgroup (a batch system's or a container's) gives Ray that limit, split between
    its nodes, not the host's memory, which would get the nodes OOM-killed."""
    cgroup = own_memory_cgroup() / f"mpiraytest-{os.getpid()}"
    cgroup.mkdir()
    limit = 6 * 2**30
    try:
        (cgroup / ("memory.limit_in_bytes" if (cgroup / "memory.limit_in_bytes").exists() else "memory.max")) \
            .write_text(str(limit))
        job_id = new_job_id("cgroup")
        argv = launcher_argv(2, ["--log-dir", str(tmp_path / "logs"), "--job-id", job_id])
        enter = 'echo $$ > "$0"/cgroup.procs && exec "$@"'  # the launcher starts inside the cgroup
        result = subprocess.run(["sh", "-c", enter, str(cgroup), *argv], cwd=ROOT, capture_output=True, text=True,
                                timeout=240)
        run = Launch(result.returncode, result.stdout, result.stderr, tmp_path / "logs" / job_id, 0)
        assert run.returncode == 0, run.stderr[-3000:]
        probe = run.probe()
        assert limit * 0.99 <= probe["memory"] + probe["object_store_memory"] <= limit
        assert_nothing_left(run, wait=15)
    finally:
        wait_for(lambda: not (cgroup / "cgroup.procs").read_text().strip(), 30)
        cgroup.rmdir()
