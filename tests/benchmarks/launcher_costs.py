"""The launcher benchmark's costs (bench_launcher.py measures 5-7): the CPU of the rank processes while a driver
idles, the memory of each rank's Ray node and of the launcher itself, and RLlib's env steps/s through the launcher
against a standalone ray.init()."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import psutil

from harness import PYTHON, STOP_GRACE_S, Captured, JobLogs, clean_env, descendant_pids, leftovers, new_descendants
from launcher_timing import STARTUP_TIMEOUT_S, Where, launch
from process_control import alive, describe, terminate

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
