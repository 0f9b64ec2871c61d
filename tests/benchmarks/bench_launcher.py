#!/usr/bin/env python3
"""How fast the launcher brings a Ray cluster up and down, and what it costs, against doing it by hand.

    python tests/benchmarks/bench_launcher.py [--repeats N] [--quick] [--no-slurm] [--out-dir DIR]

The machine may be shared, so absolute times drift: every time is also a ratio to a reference
measured in the same run, and the repeats of all startup measures are interleaved so that a busy
minute hits them alike. Measures:

 1. reference: `ray start --head` then `ray start --address` for one worker, by hand, no sleep
    (both daemonize and return once their node is up): first command to the second's return;
 2. baseline "as users do today": the same with `sleep 10` between head and worker;
 3. the launcher: `mpirun -np N python start_ray.py -- python hello.py` (N = 1, 2, 4) and, on the
    Slurm testbed, `srun -N3 --ntasks-per-node=1 --mpi=pmi2 ...`: start to the driver's first line;
 4. driver exit -> job exit: the driver's last line to mpirun's (srun's) exit; and the processes of
    the job still alive after it (the PIDs the ranks logged as stopped, the job's descendants and
    every process carrying the job's id or temp dir);
 5. CPU of the launcher's rank processes (not Ray's) while a 30 s driver runs;
 6. RLlib PPO on CartPole-v1, env steps/s through `mpirun -np 2 start_ray.py` vs `ray.init(num_cpus=2)`;
 7. memory: RSS (and PSS) of the process tree of an idle Ray worker node started by the launcher.

Writes launcher_report.md and launcher_report.json to --out-dir (default: this file's directory).
It ends only processes it started, by PID or by the group of a job it started in a session of its own,
with the tests' process control (tests/support/process_control.py): it makes itself a child subreaper, so the
processes that `ray start` daemonizes stay its descendants; it never uses `ray stop` or kills by name.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import resource
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path[:0] = [str(ROOT / "tests" / "support"), str(ROOT / "tests")]

from mpiray.host import network  # noqa: E402  (pure helpers: addresses and free port blocks)
from mpiray.logs.events import read_events  # noqa: E402

from helpers import assert_pids_logged  # noqa: E402
from process_control import alive, descendants, describe, end_group, terminate  # noqa: E402

PYTHON = sys.executable
BIN = Path(PYTHON).parent
MPIRUN = BIN / "mpirun"
RAY = BIN / "ray"
START_RAY = ROOT / "start_ray.py"
HERE = Path(__file__).resolve().parent

TARGETS = {  # measure -> (comparison, bound); "le": value <= bound passes
    "ratio_n2": ("le", 0.7),
    "ratio_slurm3": ("le", 0.7),
    "ratio_n4": ("le", 1.2),
    "exit_s": ("le", 3.0),
    "left": ("le", 0),
    "rank_cpu_pct": ("le", 2.0),
    "rllib_ratio": ("ge", 0.95),
}
BASELINE_SLEEP_S = 10.0
STARTUP_TIMEOUT_S = 240.0
STOP_GRACE_S = 10.0

# What the drivers print; the markers keep them apart from the launcher's own output.
HELLO_DRIVER = 'print("BENCH-HELLO", flush=True)\n'
IDLE_DRIVER = """\
import sys, time
import ray
ray.init()  # a job's driver is connected: the nodes run as they do in a real job
print("BENCH-START", flush=True)
time.sleep(float(sys.argv[1]))
print("BENCH-END", flush=True)
"""
RLLIB_DRIVER = """\
import json, sys, time
import ray
from ray.rllib.algorithms.ppo import PPOConfig

seconds, temp_dir = float(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None
if temp_dir:  # standalone: a one-node cluster of this driver's own, on the same 2 CPUs
    ray.init(address="local", num_cpus=2, include_dashboard=False, _temp_dir=temp_dir)
else:
    ray.init()  # the launched cluster (RAY_ADDRESS)
# The same config in both runs: one remote env runner, the learner in the driver. Few epochs, so
# that an iteration is mostly sampling, the part that goes through the cluster.
config = (
    PPOConfig()
    .environment("CartPole-v1")
    .env_runners(num_env_runners=1, num_envs_per_env_runner=1)
    .learners(num_learners=0)
    .training(train_batch_size_per_learner=1000, minibatch_size=500, num_epochs=2)
    .debugging(seed=0)
)
algo = config.build_algo()

def sampled(result):
    for scope in (result, result.get("env_runners", {})):
        if "num_env_steps_sampled_lifetime" in scope:
            return float(scope["num_env_steps_sampled_lifetime"])
    raise KeyError("num_env_steps_sampled_lifetime not in the result")

first = time.monotonic()
algo.train()  # warm-up: the env runner actor starts, the first batch; timing starts after the second
points = [(time.monotonic(), sampled(algo.train()))]
while points[-1][0] - points[0][0] < seconds:
    points.append((time.monotonic(), sampled(algo.train())))
algo.stop()
(t0, s0), (t1, s1) = points[0], points[-1]
print("BENCH-RLLIB " + json.dumps({
    "steps_per_s": (s1 - s0) / (t1 - t0), "iterations": len(points) - 1,
    "steps": s1 - s0, "seconds": t1 - t0, "warmup_s": points[0][0] - first,
    "cluster_cpus": ray.cluster_resources().get("CPU", 0),
}), flush=True)
"""

_PR_SET_CHILD_SUBREAPER = 36
_libc = ctypes.CDLL(None, use_errno=True)
# Popen objects whose exit status we still read: the orphan reaper must leave them alone.
_tracked: dict[int, subprocess.Popen] = {}


class Interrupted(BaseException):
    """SIGTERM/SIGHUP: like Ctrl-C, not a failed measurement."""


# ---- processes ----------------------------------------------------------------------------------


def become_subreaper() -> None:
    """Daemonized descendants (`ray start` without --block) are re-parented to us, not to init."""
    if _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def _testbed_daemons() -> set[int]:
    module = sys.modules.get("slurm.testbed")
    return set(getattr(module, "_started", {})) if module else set()


def reap_orphans() -> None:
    """Wait for exited orphans re-parented to us; never for a child whose status someone reads."""
    keep = set(_tracked) | _testbed_daemons()
    try:
        children = psutil.Process().children()
    except psutil.Error:
        return
    for child in children:
        if child.pid in keep:
            continue
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(child.pid, os.WNOHANG)
        except (psutil.Error, ChildProcessError):
            pass


def descendant_pids() -> set[int]:
    reap_orphans()
    return {p.pid for p in descendants()}


def new_descendants(before: set[int]) -> list[psutil.Process]:
    """Our live descendants that were not there before (testbed daemons are in before)."""
    reap_orphans()
    return descendants(before)


def children_cpu_s() -> float:
    """CPU seconds of every descendant this process (a subreaper) has reaped, through any depth."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Captured:
    """A child whose stdout/stderr lines are time-stamped (time.monotonic) as they arrive."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path = ROOT):
        self.argv = [str(a) for a in argv]
        self.lines: list[tuple[float, str, str]] = []  # (time, "out"/"err", text)
        self.ended: float | None = None
        self.ended_wall: float | None = None
        self._changed = threading.Condition()
        self.started_wall = time.time()
        self.started = time.monotonic()
        # A session of its own: an interrupted benchmark can end the whole job by its group.
        self.proc = subprocess.Popen(
            self.argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True,
        )
        _tracked[self.proc.pid] = self.proc
        self._threads = [
            threading.Thread(target=self._pump, args=(self.proc.stdout, "out"), daemon=True),
            threading.Thread(target=self._pump, args=(self.proc.stderr, "err"), daemon=True),
            threading.Thread(target=self._wait, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _pump(self, pipe, stream: str) -> None:
        for raw in iter(pipe.readline, b""):
            now = time.monotonic()
            with self._changed:
                self.lines.append((now, stream, raw.decode(errors="replace").rstrip("\n")))
                self._changed.notify_all()
        pipe.close()

    def _wait(self) -> None:
        self.proc.wait()
        with self._changed:
            self.ended, self.ended_wall = time.monotonic(), time.time()
            self._changed.notify_all()

    def wait_for_line(self, prefix: str, timeout: float) -> float | None:
        """When a stdout line starting with prefix arrived, or None (timeout or exit without it)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for when, stream, text in self.lines:
                    if stream == "out" and text.startswith(prefix):
                        return when
                if self.ended is not None or time.monotonic() >= deadline:
                    return None
                self._changed.wait(timeout=min(1.0, max(0.0, deadline - time.monotonic())))

    def wait(self, timeout: float) -> int | None:
        self._threads[2].join(timeout)
        for thread in self._threads[:2]:
            thread.join(5)
        if self.ended is None:
            return None
        _tracked.pop(self.proc.pid, None)
        return self.proc.returncode

    def kill(self) -> None:
        """The whole job, by its process group (mpirun/srun and what it started here)."""
        end_group(self.proc, STOP_GRACE_S + 5)
        self.wait(5)
        _tracked.pop(self.proc.pid, None)

    def text(self, stream: str = "out") -> str:
        return "\n".join(t for _, s, t in self.lines if s == stream)

    def last_line(self, prefix: str) -> float | None:
        times = [w for w, s, t in self.lines if s == "out" and t.startswith(prefix)]
        return times[-1] if times else None


_registry: list[Path] = []  # the cluster registry the measured jobs publish in: the scratch dir's, not ~/.mpiray


def clean_env(local: bool = True) -> dict[str, str]:
    """Our environment without launcher defaults, Ray addresses, tokens (and, locally, a scheduler), with
    the benchmark's own cluster registry."""
    env = dict(os.environ)
    drop = ("MPIRAY_", "RAY_ADDRESS", "RAY_AUTH")
    if local:  # mpirun on this host only, even when this runs inside an allocation
        drop += ("SLURM_", "PBS_", "PMI_", "PMIX_", "OMPI_", "ALPS_", "PALS_", "COBALT_")
    env = {k: v for k, v in env.items() if not k.startswith(drop)}
    if _registry:
        env["MPIRAY_REGISTRY"] = str(_registry[0])
    return env


# ---- the launcher's logs --------------------------------------------------------------------------

@dataclass
class JobLogs:
    """What the ranks logged as events (LOG_DIR/JOB_ID/rank-NNNN.jsonl), with wall-clock times."""

    events: dict[int, list[dict]] = field(default_factory=dict)
    job_dir: Path | None = None

    @classmethod
    def read(cls, job_dir: Path) -> JobLogs:
        return cls({int(path.stem.split("-")[1]): read_events(path) for path in sorted(job_dir.glob("rank-*.jsonl"))},
                   job_dir)

    def fields(self, name: str) -> list[dict]:
        return [record["fields"] for records in self.events.values() for record in records if record["event"] == name]

    def private_dirs(self) -> list[str]:
        return [fields["path"] for fields in self.fields("private_dir")]

    def when(self, rank: int, name: str) -> float | None:
        return next((record["time"] for record in self.events.get(rank, []) if record["event"] == name), None)

    def first_time(self, rank: int) -> float | None:
        return self.events[rank][0]["time"] if self.events.get(rank) else None

    def stopped_pids(self) -> list[int]:
        return [pid for fields in self.fields("processes_stopped") for pid in fields["pids"]]

    def node_pids(self) -> list[int]:
        """Every PID the ranks logged (their nodes' and what they stopped): the tests' assert_pids_logged,
        which fails where a rank started a node and logged no PID, rather than let `leftovers` find none."""
        return assert_pids_logged(self.job_dir) if self.job_dir is not None else []

    def rank_pids(self) -> dict[int, int]:
        return {rank: records[0]["pid"] for rank, records in self.events.items() if records}

    def driver_pid(self) -> int | None:
        found = [record["fields"]["pid"] for record in self.events.get(0, []) if record["event"] == "driver_started"]
        return found[0] if found else None


def job_processes(job_id: str, logs: JobLogs, since_wall: float) -> list[psutil.Process]:
    """Live processes started since since_wall whose command line or environment names the job or
    one of its ranks' private dirs (Ray's processes carry their temp dir)."""
    markers = (job_id, *logs.private_dirs())
    found = []
    for proc in psutil.process_iter(["create_time"]):
        try:
            if proc.pid == os.getpid() or proc.info["create_time"] < since_wall - 1:
                continue
            text = " ".join(proc.cmdline()) + " " + " ".join(proc.environ().values())
            if any(marker in text for marker in markers) and alive(proc):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def leftovers(job_id: str, logs: JobLogs, before: set[int], since_wall: float) -> list[psutil.Process]:
    """Processes of the job still alive after it exited (none is the target)."""
    left = {p.pid: p for p in new_descendants(before)}
    left.update((p.pid, p) for p in job_processes(job_id, logs, since_wall))
    for pid in logs.node_pids() + list(logs.rank_pids().values()):
        try:
            proc = psutil.Process(pid)
            if alive(proc) and proc.create_time() >= since_wall - 1:  # not a reused PID
                left[pid] = proc
        except psutil.Error:
            pass
    return list(left.values())


BY_HAND = ("reference", "reference_lean", "baseline")  # measures that are not launcher runs


# ---- 1, 2: by hand --------------------------------------------------------------------------------


def by_hand(scratch: Path, sleep_s: float, lean: bool = False) -> dict:
    """`ray start --head`, [sleep], `ray start --address`: seconds from the first to the second's return.

    As users type them (Ray's default autoscaler monitor and API server on the head), with only what
    isolation needs (1 CPU each as the launcher gives 2 ranks on this host, a private temp dir and
    port block per node); lean=True adds the launcher's own savings (--no-monitor, no dashboard), so
    that only the orchestration differs. --block is left out, as users do by hand.
    """
    before = descendant_pids()
    node_ip = network.head_address(None)
    base = network.free_block(f"bench-{secrets.token_hex(4)}", 2).base
    head_ports, worker_ports = network.node_ports(base), network.node_ports(base + network.UNIT)
    root = Path(tempfile.mkdtemp(prefix="mb", dir="/tmp"))  # short: Ray's socket paths <= 107 bytes
    env = clean_env()
    env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    gcs_address = f"{node_ip}:{head_ports.gcs}"
    head = [RAY, "start", "--head", f"--port={head_ports.gcs}", *ray_flags(node_ip, root / "h", head_ports)]
    if lean:
        head += ["--no-monitor", "--include-dashboard=false"]
    worker = [RAY, "start", f"--address={gcs_address}", *ray_flags(node_ip, root / "w", worker_ports)]
    result = {"sleep_s": sleep_s, "head_argv": [str(a) for a in head], "worker_argv": [str(a) for a in worker],
              "load_average": os.getloadavg()[0]}
    cpu_before = children_cpu_s()
    try:
        started = time.monotonic()
        run_ray_start(head, env, scratch / "by-hand-head.log")
        result["head_s"] = time.monotonic() - started
        if sleep_s:
            time.sleep(sleep_s)
        worker_started = time.monotonic()
        run_ray_start(worker, env, scratch / "by-hand-worker.log")
        done = time.monotonic()
        result.update(seconds=done - started, worker_s=done - worker_started)
        result["alive_nodes"] = alive_nodes(gcs_address, env)  # untimed check that both joined
    finally:
        result["stop"] = stop_daemonized_ray(new_descendants(before))
        left = new_descendants(before)
        result["left"] = describe(left)
        if left:
            terminate(left, grace=0)
        reap_orphans()
        result["cpu_s"] = children_cpu_s() - cpu_before
        shutil.rmtree(root, ignore_errors=True)
    if result["alive_nodes"] != 2:
        raise RuntimeError(f"by hand: {result['alive_nodes']} nodes alive after both `ray start`s, not 2")
    return result


def stop_daemonized_ray(procs: list[psutil.Process]) -> dict:
    """Raylets first, then the rest, the GCS last (`ray stop`'s order, without its search by name).

    Signalled all at once, a raylet whose agents died first hangs for over 15 s.
    """
    def named(proc, name):
        try:
            return proc.name() == name
        except psutil.Error:
            return False

    raylets = [p for p in procs if named(p, "raylet")]
    gcs = [p for p in procs if named(p, "gcs_server")]
    rest = [p for p in procs if p not in raylets and p not in gcs]
    reports = [terminate(group, STOP_GRACE_S) for group in (raylets, rest, gcs) if group]
    return {
        "stopped": sum(r.stopped for r in reports),
        "killed": sum(r.killed for r in reports),
        "seconds": round(sum(r.seconds for r in reports), 2),
    }


def ray_flags(node_ip: str, temp_dir: Path, ports: network.NodePorts) -> list[str]:
    return [
        "--disable-usage-stats", f"--node-ip-address={node_ip}", f"--temp-dir={temp_dir}", "--num-cpus=1",
        f"--node-manager-port={ports.node_manager}", f"--object-manager-port={ports.object_manager}",
        f"--min-worker-port={ports.min_worker}", f"--max-worker-port={ports.max_worker}",
        f"--dashboard-agent-grpc-port={ports.dashboard_agent_grpc}",
        f"--dashboard-agent-listen-port={ports.dashboard_agent_listen}",
        f"--metrics-export-port={ports.metrics_export}", f"--runtime-env-agent-port={ports.runtime_env_agent}",
    ]


def run_ray_start(argv: list, env: dict, output: Path) -> None:
    with open(output, "ab") as out:
        # A new session, as a shell's background job would not get our signals; stays our
        # descendant anyway through the subreaper.
        proc = subprocess.Popen([str(a) for a in argv], env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        _tracked[proc.pid] = proc
        try:
            code = proc.wait(timeout=STARTUP_TIMEOUT_S)
        finally:
            if proc.poll() is None:  # timed out or interrupted: with what it started so far in its session
                end_group(proc, STOP_GRACE_S)
            _tracked.pop(proc.pid, None)
    if code != 0:
        tail = output.read_text(errors="replace").strip().splitlines()[-5:]
        raise RuntimeError(f"`{' '.join(map(str, argv[:3]))} ...` exited {code}: {' | '.join(tail)}")


def alive_nodes(gcs_address: str, env: dict) -> int:
    code = (
        "from ray._raylet import GcsClient\n"
        f"infos = GcsClient(address={gcs_address!r}).get_all_node_info(timeout=10)\n"
        "print(sum(1 for i in infos.values() if i.state == 0))\n"
    )
    result = subprocess.run([PYTHON, "-c", code], check=False, env=env, capture_output=True, text=True, timeout=60)
    return int(result.stdout.strip().splitlines()[-1]) if result.returncode == 0 else -1


# ---- 3, 4: the launcher ---------------------------------------------------------------------------


@dataclass
class Where:
    """How a launch is started: locally under mpirun, or on the Slurm testbed under srun."""

    name: str
    ranks: int
    testbed: object = None

    def argv(self, launcher_args: list[str], driver: list[str]) -> list[str]:
        launcher = [PYTHON, str(START_RAY), *launcher_args, "--", *driver]
        if self.testbed is not None:
            return ["srun", f"-N{self.ranks}", "--ntasks-per-node=1", "--mpi=pmi2",
                    "--job-name=mpiray-bench", *launcher]
        return [str(MPIRUN), "-np", str(self.ranks), *launcher]

    def env(self) -> dict[str, str]:
        if self.testbed is not None:
            return self.testbed.env(clean_env(local=False))
        return clean_env()


def launch(where: Where, scratch: Path, driver: list[str], tag: str) -> tuple[Captured, str, Path, set[int]]:
    job_id = f"bench-{tag}-{secrets.token_hex(3)}"
    log_dir = scratch / "logs"
    before = descendant_pids()
    run = Captured(where.argv(["--log-dir", str(log_dir), "--job-id", job_id], driver), where.env())
    return run, job_id, log_dir / job_id, before


def time_launch(where: Where, scratch: Path) -> dict:
    """Start to the driver's first line; driver's last line to the job's exit; what is left after."""
    hello = scratch / "hello.py"
    cpu_before = children_cpu_s()
    run, job_id, job_dir, before = launch(where, scratch, [PYTHON, str(hello)], where.name)
    result = {"job_id": job_id, "argv": run.argv, "load_average": os.getloadavg()[0]}
    try:
        first = run.wait_for_line("BENCH-HELLO", STARTUP_TIMEOUT_S)
        code = run.wait(60)
        if first is None or code != 0:
            raise RuntimeError(
                f"{where.name}: exit code {code}, driver line {'seen' if first else 'not seen'}; "
                f"logs {job_dir}; stderr: {run.text('err')[-1500:]}"
            )
    finally:
        if run.ended is None:
            run.kill()
    logs = JobLogs.read(job_dir)
    left = leftovers(job_id, logs, before, run.started_wall)
    last = run.last_line("BENCH-HELLO")
    driver_exit = logs.when(0, "driver_exited")
    rank0_first = logs.first_time(0)
    result.update(
        seconds=first - run.started,
        exit_after_last_line_s=run.ended - last,
        exit_after_driver_exit_s=(run.ended_wall - driver_exit) if driver_exit else None,
        phases={  # seconds since the start, from rank 0's events (wall clock)
            "rank0_first_log_line": _since(rank0_first, run.started_wall),
            "head_ray_start": _since(logs.when(0, "node_starting"), run.started_wall),
            "head_registered": _since(logs.when(0, "head_alive"), run.started_wall),
            "ready_to_start_driver": _since(logs.when(0, "cluster_ready"), run.started_wall),
            "driver_started": _since(logs.when(0, "driver_started"), run.started_wall),
            "driver_exited": _since(driver_exit, run.started_wall),
        },
        stopped_pids=len(logs.stopped_pids()),
        left=describe(left),
        # Under srun the job's processes are slurmd's descendants, not ours.
        cpu_s=None if where.testbed is not None else children_cpu_s() - cpu_before,
    )
    if left:
        terminate(left, STOP_GRACE_S)
    return result


def _since(wall: float | None, start_wall: float) -> float | None:
    return round(wall - start_wall, 3) if wall is not None else None


# ---- 5, 7: an idle cluster under a 30 s driver ----------------------------------------------------


def idle_costs(scratch: Path, seconds: float) -> dict:
    """CPU of each rank process over the driver's run; memory of each rank's Ray node tree."""
    where = Where("n2", 2)
    run, job_id, job_dir, before = launch(where, scratch, [PYTHON, str(scratch / "idle.py"), str(seconds)], "idle")
    result: dict = {"job_id": job_id, "driver_seconds": seconds}
    try:
        start = run.wait_for_line("BENCH-START", STARTUP_TIMEOUT_S)
        if start is None:
            raise RuntimeError(f"idle driver did not start; logs {job_dir}; stderr: {run.text('err')[-1500:]}")
        ranks = rank_processes(run.proc.pid)
        helpers = [p for p in psutil.Process(run.proc.pid).children(recursive=True) if "hydra" in p.name()]
        helpers.append(psutil.Process(run.proc.pid))
        cpu_before = {p.pid: _cpu(p) for p in [*ranks.values(), *helpers]}
        memory_samples = []
        for fraction in (0.25, 0.5, 0.75):
            _sleep_until(start + fraction * seconds)
            memory_samples.append(node_memory(ranks, JobLogs.read(job_dir).driver_pid()))
        end = run.wait_for_line("BENCH-END", seconds + 120)
        if end is None:
            raise RuntimeError(f"idle driver did not end; logs {job_dir}")
        cpu_after = {p.pid: _cpu(p) for p in [*ranks.values(), *helpers]}
        span = end - start
        result["rank_cpu_pct"] = {
            str(rank): round(100 * (cpu_after[p.pid] - cpu_before[p.pid]) / span, 3) for rank, p in ranks.items()
        }
        result["mpi_helpers_cpu_pct"] = {
            f"{p.pid} {p.name()}": round(100 * (cpu_after[p.pid] - cpu_before[p.pid]) / span, 3) for p in helpers
        }
        result["memory"] = _median_memory(memory_samples)
        code = run.wait(120)
        if code != 0:
            raise RuntimeError(f"idle run exited {code}; logs {job_dir}")
    finally:
        if run.ended is None:
            run.kill()
    logs = JobLogs.read(job_dir)
    left = leftovers(job_id, logs, before, run.started_wall)
    result["left"] = describe(left)
    if left:
        terminate(left, STOP_GRACE_S)
    return result


def rank_processes(mpirun_pid: int) -> dict[int, psutil.Process]:
    """rank -> the start_ray.py process (hydra passes the rank in PMI_RANK)."""
    ranks = {}
    for proc in psutil.Process(mpirun_pid).children(recursive=True):
        try:
            if any(arg.endswith("start_ray.py") for arg in proc.cmdline()):
                ranks[int(proc.environ().get("PMI_RANK", len(ranks)))] = proc
        except psutil.Error:
            pass
    return dict(sorted(ranks.items()))


def _cpu(proc: psutil.Process) -> float:
    try:
        times = proc.cpu_times()
        return times.user + times.system  # this process's threads, not its children
    except psutil.Error:
        return float("nan")


def _sleep_until(when: float) -> None:
    time.sleep(max(0.0, when - time.monotonic()))


def node_memory(ranks: dict[int, psutil.Process], driver_pid: int | None) -> dict:
    """Per rank: the rank process, and the sum over its Ray node's process tree (driver excluded)."""
    out = {}
    driver_tree = set()
    if driver_pid:
        try:
            driver = psutil.Process(driver_pid)
            driver_tree = {driver_pid} | {p.pid for p in driver.children(recursive=True)}
        except psutil.Error:
            pass
    for rank, proc in ranks.items():
        tree = [p for p in proc.children(recursive=True) if p.pid not in driver_tree and alive(p)]
        rss = pss = 0
        names = {}
        for child in tree:
            try:
                info = child.memory_full_info()
            except psutil.Error:
                continue
            rss += info.rss
            pss += info.pss
            name = _short_name(child)
            names[name] = names.get(name, 0) + info.rss
        own = proc.memory_full_info()
        out[str(rank)] = {
            "rank_process_rss_mib": round(own.rss / 2**20, 1),
            "rank_process_pss_mib": round(own.pss / 2**20, 1),
            "node_tree_rss_mib": round(rss / 2**20, 1),
            "node_tree_pss_mib": round(pss / 2**20, 1),
            "node_processes": len(tree),
            "node_rss_mib_by_process": {k: round(v / 2**20, 1) for k, v in sorted(names.items())},
        }
    return out


def _short_name(proc: psutil.Process) -> str:
    try:
        cmd = proc.cmdline()
    except psutil.Error:
        return "?"
    for arg in cmd[:4]:
        base = os.path.basename(arg)
        # The launcher runs `ray start` through its starter (mpiray/raynode/starter.py; ray_node.py before).
        if base in ("ray", "ray_node.py", "mpiray.raynode.starter") and "start" in cmd:
            return "`ray start --block`"
        if base.endswith(".py") or base in ("raylet", "gcs_server"):
            return base
    if cmd and "default_worker" in " ".join(cmd):
        return "default_worker.py"
    return proc.name()


def _median_memory(samples: list[dict]) -> dict:
    """The sample with the median worker-node RSS (keeps one consistent snapshot)."""
    key = "1" if "1" in samples[0] else "0"
    ordered = sorted(samples, key=lambda s: s[key]["node_tree_rss_mib"])
    return ordered[len(ordered) // 2]


# ---- 6: RLlib -------------------------------------------------------------------------------------


def rllib_throughput(scratch: Path, seconds: float, launched: bool) -> dict:
    driver = scratch / "rllib_driver.py"
    if launched:
        run, job_id, job_dir, before = launch(Where("n2", 2), scratch, [PYTHON, str(driver), str(seconds)], "rllib")
    else:
        before, job_id, job_dir = descendant_pids(), None, None
        temp = Path(tempfile.mkdtemp(prefix="mb", dir="/tmp"))
        env = clean_env()
        env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
        run = Captured([PYTHON, str(driver), str(seconds), str(temp)], env)
    try:
        code = run.wait(seconds + STARTUP_TIMEOUT_S + 120)
    finally:
        if run.ended is None:
            run.kill()
    lines = [t for _, s, t in run.lines if s == "out" and t.startswith("BENCH-RLLIB ")]
    if code != 0 or not lines:
        raise RuntimeError(f"RLlib {'launched' if launched else 'standalone'}: exit {code}; "
                           f"stderr: {run.text('err')[-2000:]}")
    result = json.loads(lines[-1][len("BENCH-RLLIB "):])
    logs = JobLogs.read(job_dir) if job_dir else JobLogs()
    left = leftovers(job_id, logs, before, run.started_wall) if job_id else new_descendants(before)
    result["left"] = describe(left)
    if left:
        terminate(left, STOP_GRACE_S)
    if not launched:
        shutil.rmtree(temp, ignore_errors=True)
    return result


# ---- the run --------------------------------------------------------------------------------------


def median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def verdict(key: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    how, bound = TARGETS[key]
    ok = value <= bound if how == "le" else value >= bound
    return "PASS" if ok else "MISS"


def target_text(key: str) -> str:
    how, bound = TARGETS[key]
    return f"{'≤' if how == 'le' else '≥'} {bound:g}"


def slurm_testbed(enabled: bool, notes: list[str]):
    """(testbed, brought_up_here) or (None, False) with the reason in notes."""
    if not enabled:
        notes.append("Slurm: skipped (--no-slurm)")
        return None, False
    from slurm import testbed

    if testbed.is_up():
        return testbed.up(), False
    reason = testbed.unavailable_reason()
    if reason:
        notes.append(f"Slurm: skipped ({reason})")
        return None, False
    try:
        return testbed.up(), True
    except testbed.TestbedError as error:
        notes.append(f"Slurm: skipped, the testbed did not come up: {error}")
        return None, False


def run_all(args, scratch: Path) -> dict:
    report: dict = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "host": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)),
        "load_average_start": [round(x, 2) for x in os.getloadavg()],
        "ray_version": version("ray"),
        "python": platform.python_version(),
        "mpi": _mpi_version(),
        "repeats": args.repeats,
        "quick": args.quick,
        "notes": [],
        "errors": [],
    }
    for name, text in (("hello.py", HELLO_DRIVER), ("idle.py", IDLE_DRIVER), ("rllib_driver.py", RLLIB_DRIVER)):
        (scratch / name).write_text(text)
    bed, brought_up = slurm_testbed(args.slurm, report["notes"])
    wheres = [Where("n1", 1), Where("n2", 2), Where("n4", 4)]
    if bed is not None:
        wheres.append(Where("slurm3", 3, bed))
    measures = {"reference": [], "reference_lean": [], "baseline": [], **{w.name: [] for w in wheres}}
    try:
        # Interleaved: repeat r of every startup measure runs within the same few minutes.
        for repeat in range(args.repeats):
            for name, runs in measures.items():
                log(f"repeat {repeat + 1}/{args.repeats}: {name}")
                try:
                    if name == "reference":
                        runs.append(by_hand(scratch, 0.0))
                    elif name == "reference_lean":
                        runs.append(by_hand(scratch, 0.0, lean=True))
                    elif name == "baseline":
                        runs.append(by_hand(scratch, BASELINE_SLEEP_S))
                    else:
                        runs.append(time_launch(next(w for w in wheres if w.name == name), scratch))
                    log(f"  {runs[-1]['seconds']:.2f} s")
                except Exception as error:  # noqa: BLE001  (one failed measure must not stop the others)
                    report["errors"].append(f"{name} (repeat {repeat + 1}): {error}")
                    log(f"  ERROR: {error}")
        log(f"idle cluster for {args.idle_seconds:g} s: CPU of the ranks, memory of the nodes")
        try:
            report["idle"] = idle_costs(scratch, args.idle_seconds)
        except Exception as error:  # noqa: BLE001
            report["errors"].append(f"idle: {error}")
            log(f"  ERROR: {error}")
        report["rllib"] = {"launched": [], "standalone": []}
        if args.quick:
            report["notes"].append("RLlib throughput: skipped (--quick)")
        else:
            for repeat in range(args.rllib_repeats):
                for launched in (True, False):
                    which = "launched" if launched else "standalone"
                    log(f"repeat {repeat + 1}/{args.rllib_repeats}: RLlib {which}")
                    try:
                        report["rllib"][which].append(rllib_throughput(scratch, args.rllib_seconds, launched))
                        log(f"  {report['rllib'][which][-1]['steps_per_s']:.0f} env steps/s")
                    except Exception as error:  # noqa: BLE001
                        report["errors"].append(f"rllib {which} (repeat {repeat + 1}): {error}")
                        log(f"  ERROR: {error}")
    finally:
        if brought_up:
            from slurm import testbed

            testbed.down()
            report["notes"].append("Slurm: the testbed was brought up for this run and down again")
    report["runs"] = measures
    report["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    report["summary"] = summarize(report, measures)
    return report


def summarize(report: dict, measures: dict) -> dict:
    seconds = {name: median([r["seconds"] for r in runs]) for name, runs in measures.items()}
    reference = seconds["reference"]
    summary = {"median_s": seconds, "ratio": {}, "exit_s": {}, "exit_s_max": {}, "left": 0}
    for name, value in seconds.items():
        if value is not None and reference:
            summary["ratio"][name] = value / reference
    for name, runs in measures.items():
        if name in BY_HAND:
            summary["left"] += sum(len(r["left"]) for r in runs)
            continue
        summary["exit_s"][name] = median([r["exit_after_last_line_s"] for r in runs])
        summary["exit_s_max"][name] = max((r["exit_after_last_line_s"] for r in runs), default=None)
        summary["left"] += sum(len(r["left"]) for r in runs)
    idle = report.get("idle")
    if idle:
        summary["left"] += len(idle["left"])
        summary["rank_cpu_pct_max"] = max(idle["rank_cpu_pct"].values())
    rllib = report.get("rllib", {})
    for which in ("launched", "standalone"):
        summary["left"] += sum(len(r["left"]) for r in rllib.get(which, []))
    launched = median([r["steps_per_s"] for r in rllib.get("launched", [])])
    standalone = median([r["steps_per_s"] for r in rllib.get("standalone", [])])
    summary["rllib_steps_per_s"] = {"launched": launched, "standalone": standalone}
    summary["rllib_ratio"] = launched / standalone if launched and standalone else None
    return summary


def markdown(report: dict) -> str:
    s = report["summary"]
    med, ratio = s["median_s"], s["ratio"]
    rows = []

    def row(measure, shown, rel="", key=None, value=None):
        target = target_text(key) if key else ""
        result = verdict(key, value) if key else ""
        rows.append(f"| {measure} | {shown} | {rel} | {target} | {result} |")

    def sec(x):
        return "n/a" if x is None else f"{x:.2f} s"

    def rel(name):
        return f"{ratio[name]:.2f}×" if name in ratio else "n/a"

    row("1. reference: `ray start --head`, then `ray start --address` (by hand, no sleep)", sec(med["reference"]), "1.00×")
    row("1b. the same with the launcher's lean head (`--no-monitor`, no dashboard)", sec(med["reference_lean"]),
        rel("reference_lean"))
    row("2. baseline: head, `sleep 10`, worker", sec(med["baseline"]), rel("baseline"))
    labels = {"n1": "mpirun -np 1", "n2": "mpirun -np 2",
              "n4": "mpirun -np 4 (2-core host)" if os.cpu_count() == 2 else "mpirun -np 4",
              "slurm3": "srun -N3 (Slurm testbed, 3 hosts)"}
    keys = {"n2": "ratio_n2", "n4": "ratio_n4", "slurm3": "ratio_slurm3"}
    for name in ("n1", "n2", "n4", "slurm3"):
        if name in med:
            row(f"3. launcher start → driver's first line, {labels[name]}", sec(med[name]), rel(name),
                keys.get(name), ratio.get(name))
    for name in ("n1", "n2", "n4", "slurm3"):
        if name in s["exit_s"]:
            worst = s["exit_s_max"][name]
            shown = sec(s["exit_s"][name]) + (f" (max {worst:.2f} s)" if worst is not None else "")
            row(f"4. driver's last line → job exit, {labels[name]}", shown, "", "exit_s", s["exit_s"][name])
    row("4. processes left after the jobs (all runs)", str(s["left"]), "", "left", s["left"])
    idle = report.get("idle")
    if idle:
        cpus = ", ".join(f"rank {r}: {v:.2f}%" for r, v in idle["rank_cpu_pct"].items())
        row(f"5. CPU of each rank process during a {idle['driver_seconds']:g} s driver (% of a core; {cpus})",
            f"{s['rank_cpu_pct_max']:.2f}% (max)", "", "rank_cpu_pct", s["rank_cpu_pct_max"])
    else:
        row("5. CPU of the rank processes", "not measured", "")
    rl = s["rllib_steps_per_s"]
    if rl["launched"] and rl["standalone"]:
        row("6. RLlib PPO CartPole env steps/s: `mpirun -np 2 start_ray.py` vs `ray.init(num_cpus=2)`",
            f"{rl['launched']:.0f} vs {rl['standalone']:.0f}", f"{s['rllib_ratio']:.2f}×", "rllib_ratio", s["rllib_ratio"])
    else:
        row("6. RLlib env steps/s", "not measured", "")
    for rank, mem in (idle or {}).get("memory", {}).items():
        what = "idle Ray worker node" if rank != "0" else "Ray head node"
        parts = ", ".join(f"{name} {mib:.0f}" for name, mib in mem["node_rss_mib_by_process"].items())
        row(f"7. memory of rank {rank}'s {what}: process tree ({mem['node_processes']} processes; RSS MiB: {parts})",
            f"RSS {mem['node_tree_rss_mib']:.0f} MiB, PSS {mem['node_tree_pss_mib']:.0f} MiB", "")
        row(f"7. memory of the rank {rank} launcher process itself",
            f"RSS {mem['rank_process_rss_mib']:.0f} MiB, PSS {mem['rank_process_pss_mib']:.0f} MiB", "")
    head = (
        f"# Launcher benchmark\n\n"
        f"{report['date']} on {report['host']}: {report['cpu_count']} CPUs, Ray {report['ray_version']}, "
        f"Python {report['python']}, {report['mpi']}; median of {report['repeats']} repeat(s)"
        f"{' (--quick)' if report['quick'] else ''}; load average {report['load_average_start'][0]:.2f} at the "
        f"start, {report['load_average_end'][0]:.2f} at the end.\n\n"
        "Ratios are to the reference measured in the same run (lower is better for times). The reference "
        "and the baseline are the plain commands users type (Ray's defaults: autoscaler monitor and API "
        "server on the head), with only a private temp dir, port block and 1 CPU per node; row 1b adds the "
        "launcher's lean head flags, to show how much of the gain is orchestration. Job exit is timed from the driver's "
        "last stdout line as this benchmark "
        "received it to the exit of mpirun (srun).\n\n"
        "| measure | median | ratio to reference | target | result |\n|---|---|---|---|---|\n"
    )
    body = "\n".join(rows) + "\n"
    phases = _phase_medians(report["runs"])
    if phases:
        body += "\nWhere the launcher's time goes (median seconds since the start, from rank 0's log):\n\n"
        body += ("| launch | rank 0 first log line | head's `ray start` | head registered | ready to start driver "
                 "| driver started | driver's first line |\n|---|---|---|---|---|---|---|\n")
        for name, p in phases.items():
            body += f"| {labels[name]} | " + " | ".join(
                "n/a" if p[k] is None else f"{p[k]:.2f}" for k in
                ("rank0_first_log_line", "head_ray_start", "head_registered", "ready_to_start_driver",
                 "driver_started", "first_line")
            ) + " |\n"
        cpu = {name: median([r.get("cpu_s") for r in runs]) for name, runs in report["runs"].items()}
        shown = ", ".join(f"{labels.get(n, n)} {v:.1f}" for n, v in cpu.items() if v is not None)
        if shown:
            body += (f"\nCPU seconds used by all the processes of a run, start to stop (median): {shown}; "
                     f"this host has {report['cpu_count']} CPUs, so a run needs at least that / "
                     f"{report['cpu_count']} seconds of wall time.\n")
        by_hand = report["runs"].get("reference", [])
        if by_hand:
            head_s = median([r.get("head_s") for r in by_hand])
            worker_s = median([r.get("worker_s") for r in by_hand])
            body += (f"\nBy hand (reference, median): `ray start --head` took {head_s:.2f} s, then "
                     f"`ray start --address` {worker_s:.2f} s.\n")
    extra = [*report["notes"], *(f"ERROR: {e}" for e in report["errors"])]
    if extra:
        body += "\n" + "\n".join(f"- {line}" for line in extra) + "\n"
    return head + body


def _phase_medians(runs: dict) -> dict:
    out = {}
    for name, results in runs.items():
        if name in BY_HAND or not results:
            continue
        phases = {k: median([r["phases"][k] for r in results]) for k in results[0]["phases"]}
        phases["first_line"] = median([r["seconds"] for r in results])
        out[name] = phases
    return out


def _mpi_version() -> str:
    try:
        out = subprocess.run([str(BIN / "mpichversion")], check=False, capture_output=True, text=True, timeout=10).stdout
        return "MPICH " + out.split("Version:")[1].split()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "MPI unknown"


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="repeats of each timing; the median is reported (default 3)")
    parser.add_argument("--quick", action="store_true", help="1 repeat, no RLlib throughput")
    parser.add_argument("--no-slurm", dest="slurm", action="store_false", help="skip the Slurm testbed")
    parser.add_argument("--out-dir", type=Path, default=HERE, help="where the reports go (default: %(default)s)")
    parser.add_argument("--idle-seconds", type=float, default=30.0, help="the idle driver's run (5, 7; default 30)")
    parser.add_argument("--rllib-seconds", type=float, default=30.0,
                        help="measured training time per RLlib run, after imports and a warm-up iteration (default 30)")
    parser.add_argument("--rllib-repeats", type=int, default=1,
                        help="pairs of RLlib runs (launched, standalone); each takes ~1-2 min (default 1)")
    parser.add_argument("--keep-logs", action="store_true", help="keep the launcher's logs (else removed when all went well)")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats = 1
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    become_subreaper()
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupt)
    scratch = Path(tempfile.mkdtemp(prefix="mpiray-bench-"))
    _registry.append(scratch / "registry")
    before = descendant_pids()
    report = None
    try:
        report = run_all(args, scratch)
    except (KeyboardInterrupt, Interrupted):
        log("interrupted: stopping what this benchmark started")
        return 130
    finally:
        # A job still running when interrupted: its group's SIGTERM lets it stop its own Ray nodes first.
        for popen in list(_tracked.values()):
            end_group(popen, STOP_GRACE_S + 20)
        left = new_descendants(before)
        if left:
            log(f"stopping {len(left)} leftover processes: {describe(left)}")
            terminate(left, STOP_GRACE_S)
        if report is not None and not report["errors"] and not args.keep_logs:
            shutil.rmtree(scratch, ignore_errors=True)
        else:
            log(f"logs kept in {scratch}")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    text = markdown(report)
    (args.out_dir / "launcher_report.md").write_text(text)
    (args.out_dir / "launcher_report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(text)
    return 1 if report["errors"] else 0


def _interrupt(signum, frame):
    raise Interrupted(signum)


if __name__ == "__main__":
    sys.exit(main())
