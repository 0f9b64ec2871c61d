"""The launcher benchmark's start-up and exit timings (bench_launcher.py measures 1-4): the reference and the
baseline by hand (`ray start --head`, then `ray start --address`, with and without a sleep), and the launcher's
runs under mpirun or srun: start to the driver's first line, its last line to the job's exit, what is left."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from mpiray.host import network, portblocks

from harness import (
    BIN,
    PYTHON,
    ROOT,
    STOP_GRACE_S,
    TRACKED,
    Captured,
    JobLogs,
    children_cpu_s,
    clean_env,
    descendant_pids,
    leftovers,
    new_descendants,
    reap_orphans,
)
from process_control import describe, end_group, terminate

MPIRUN = BIN / "mpirun"
RAY = BIN / "ray"
START_RAY = ROOT / "start_ray.py"
BASELINE_SLEEP_S = 10.0
STARTUP_TIMEOUT_S = 240.0


# What the drivers print; the markers keep them apart from the launcher's own output.
HELLO_DRIVER = 'print("BENCH-HELLO", flush=True)\n'
# Measures that are not launcher runs: by hand with as many nodes as each launcher run (n1, n2, n4), the lean
# head's, and the baseline's sleep.
BY_HAND = ("by_hand_n1", "by_hand_n2", "by_hand_n4", "reference_lean", "baseline")


def by_hand(scratch: Path, sleep_s: float, lean: bool = False, nodes: int = 2) -> dict:
    """`ray start --head`, [sleep], then `ray start --address` once per other node, one after the other, as a user
    types them on one host: seconds from the first to the last one's return, and a check that all nodes are ALIVE.

    As users type them (Ray's default autoscaler monitor and API server on the head), with only what
    isolation needs (1 CPU each, as the launcher gives its ranks on this host, a private temp dir and
    port block per node); lean=True adds the launcher's own savings (--no-monitor, no dashboard), so
    that only the orchestration differs. --block is left out, as users do by hand. nodes: as many as the
    launcher run it is the reference of (bench_launcher: like for like).
    """
    before = descendant_pids()
    node_ip = network.head_address(None)
    base = portblocks.free_block(f"bench-{secrets.token_hex(4)}", nodes).base
    ports = [portblocks.node_ports(base + i * portblocks.UNIT) for i in range(nodes)]
    root = Path(tempfile.mkdtemp(prefix="mb", dir="/tmp"))  # short: Ray's socket paths <= 107 bytes
    env = clean_env()
    env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    gcs_address = f"{node_ip}:{ports[0].gcs}"
    head = [RAY, "start", "--head", f"--port={ports[0].gcs}", *ray_flags(node_ip, root / "h", ports[0])]
    if lean:
        head += ["--no-monitor", "--include-dashboard=false"]
    workers = [[RAY, "start", f"--address={gcs_address}", *ray_flags(node_ip, root / f"w{i}", ports[i])]
               for i in range(1, nodes)]
    result = {"sleep_s": sleep_s, "nodes": nodes, "head_argv": [str(a) for a in head],
              "worker_argv": [str(a) for a in workers[0]] if workers else [], "load_average": os.getloadavg()[0]}
    cpu_before = children_cpu_s()
    try:
        started = time.monotonic()
        run_ray_start(head, env, scratch / "by-hand-head.log")
        result["head_s"] = time.monotonic() - started
        if sleep_s:
            time.sleep(sleep_s)
        worker_started = time.monotonic()
        for worker in workers:
            run_ray_start(worker, env, scratch / "by-hand-worker.log")
        done = time.monotonic()
        result.update(seconds=done - started, worker_s=done - worker_started)
        result["alive_nodes"] = alive_nodes(gcs_address, env)  # untimed check that all joined
    finally:
        result["stop"] = stop_daemonized_ray(new_descendants(before))
        left = new_descendants(before)
        result["left"] = describe(left)
        if left:
            terminate(left, grace=0)
        reap_orphans()
        result["cpu_s"] = children_cpu_s() - cpu_before
        shutil.rmtree(root, ignore_errors=True)
    if result["alive_nodes"] != nodes:
        raise RuntimeError(f"by hand: {result['alive_nodes']} nodes alive after the `ray start`s, not {nodes}")
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


def ray_flags(node_ip: str, temp_dir: Path, ports: portblocks.NodePorts) -> list[str]:
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
        TRACKED[proc.pid] = proc
        try:
            code = proc.wait(timeout=STARTUP_TIMEOUT_S)
        finally:
            if proc.poll() is None:  # timed out or interrupted: with what it started so far in its session
                end_group(proc, STOP_GRACE_S)
            TRACKED.pop(proc.pid, None)
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


@dataclass
class Where:
    """How a launch is started: locally under mpirun, or on the Slurm testbed under srun."""

    name: str
    ranks: int
    testbed: object = None
    options: tuple[str, ...] = ()  # the launcher's own, beside the benchmark's
    start_ray: Path = START_RAY  # another checkout's (bench_before_after.py: an earlier commit's)

    def argv(self, launcher_args: list[str], driver: list[str]) -> list[str]:
        launcher = [PYTHON, str(self.start_ray), *launcher_args, *self.options, "--", *driver]
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
