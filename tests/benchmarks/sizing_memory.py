#!/usr/bin/env python3
"""Memory of an RLlib training's processes: the RSS, USS and PSS of each Ray process, by its title.

    .venv/bin/bash tests/benchmarks/run sizing_memory [--timeout 600] [--learners 0,1] [--out tests/benchmarks]

Runs `python -m train --stop-iters 2 --num-env-runners 2` (PPO on CartPole, torch on the CPU) on a local
Ray (RAY_ADDRESS unset), once per --learners count (0: the local learner; N: --num-learners N), one run at a
time, each in a session of its own (start_new_session=True) with --timeout seconds. Every second it samples
with psutil the child's descendants and the processes of its session: the driver, gcs_server, raylet, the
dashboard and runtime env agents, the Tune trainable (`ray::PPO`, which holds the local learner), the env
runners (`ray::SingleAgentEnvRunner`), remote learners and idle workers, each known by its process title.
Per role: how many processes had it, and the largest RSS, USS, PSS, threads and open files of one of them
over the samples; for all of them: the largest summed RSS, PSS, processes, threads and open files, and the
machine's used memory and /dev/shm above what they were before the start. On the timeout the child's
process group goes (os.killpg by the child's PID, in tests/support/process_control.py's end_group); nothing is
found by name. The results go to a temporary directory, removed afterwards. Prints a table per run and
writes sizing_memory_report.md in docs/reports/.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from harness import REPORTS, write_report
from process_control import end_group

ROOT = Path(__file__).resolve().parents[2]

PYTHON = sys.executable
MIB = 1024 * 1024
RUNNERS = 2
# Ray's own processes, known by a part of their command line (the actors by their process title instead).
HELPERS = (("dashboard/agent.py", "dashboard agent"), ("runtime_env/agent/main.py", "runtime env agent"),
           ("log_monitor.py", "log monitor"), ("dashboard/dashboard.py", "dashboard"), ("autoscaler/_private/monitor.py",
                                                                                        "autoscaler monitor"))


# What the Ray titles are, in this training.
WHAT = {"`ray::PPO`": "the Tune trainable: the algorithm, and the local learner when there is no remote one",
        "`ray::SingleAgentEnvRunner`": "an env runner",
        "`ray::_WrappedExecutable`": "a remote learner (--num-learners)",
        "`ray::IDLE`": "a worker Ray started that no task took",
        "`ray::DashboardAgent`": "the node's dashboard agent (metrics)", "`ray::RuntimeEnvAgent`": "the node's runtime "
        "env agent", "driver (`python -m train`)": "the trainer's driver: Tune's loop", "`raylet`": "the node's raylet "
        "(scheduler, object store)", "`gcs_server`": "the head's GCS", "dashboard": "the head's dashboard process",
        "log monitor": "the node's log monitor", "autoscaler monitor": "the head's autoscaler monitor"}


def role(proc: psutil.Process, driver: int) -> str | None:
    """A process's role: its Ray title without the method (`ray::PPO.train()` -> `ray::PPO`), or the binary;
    None while it has no command line (starting, or exiting)."""
    cmdline = [part for part in proc.cmdline() if part.strip()]
    if not cmdline:
        return None
    first = cmdline[0]
    if proc.pid == driver:
        return "driver (`python -m train`)"
    if first.startswith("ray::"):
        return "`" + first.split()[0].split(".")[0].split("(")[0] + "`"
    base = os.path.basename(first)
    if base in ("raylet", "gcs_server"):
        return f"`{base}`"
    joined = " ".join(cmdline)
    for part, name in HELPERS:
        if part in joined:
            return name
    return f"other: `{base}`"


def ours(driver: int) -> list[psutil.Process]:
    """The child and what it started: its descendants, and every process left in its session."""
    found: dict[int, psutil.Process] = {}
    try:
        top = psutil.Process(driver)
        for proc in [top, *top.children(recursive=True)]:
            found[proc.pid] = proc
    except psutil.Error:
        pass
    for proc in psutil.process_iter():
        try:
            if proc.pid not in found and os.getsid(proc.pid) == driver:
                found[proc.pid] = proc
        except (OSError, psutil.Error):
            continue
    return list(found.values())


def shm_used() -> int:
    try:
        return psutil.disk_usage("/dev/shm").used
    except OSError:
        return 0


def sample(driver: int, peaks: dict, totals: dict, uss: bool) -> None:
    """peaks: per PID, its role (the last Ray title it had: a worker takes an actor's title once it holds one)
    and its largest RSS, USS, PSS, threads, open files; totals: the largest sums, the machine's used memory."""
    pss_sum = rss_sum = threads_sum = files_sum = counted = 0
    for proc in ours(driver):
        try:
            name = role(proc, driver)
            if uss:
                full = proc.memory_full_info()
                rss, one_uss, pss = full.rss, full.uss, full.pss
            else:
                rss, one_uss, pss = proc.memory_info().rss, 0, 0
            threads, files = proc.num_threads(), proc.num_fds()
        except psutil.Error:
            continue
        if name is None or rss == 0:  # starting or exiting
            continue
        counted += 1
        peak = peaks.setdefault(proc.pid, {"role": name, "rss": 0, "uss": 0, "pss": 0, "threads": 0, "files": 0})
        if name != peak["role"] and (name.startswith("`ray::") or not peak["role"].startswith("`ray::")):
            peak["role"] = name
        for key, value in (("rss", rss), ("uss", one_uss), ("pss", pss), ("threads", threads), ("files", files)):
            peak[key] = max(peak[key], value)
        rss_sum, pss_sum, threads_sum, files_sum = rss_sum + rss, pss_sum + pss, threads_sum + threads, files_sum + files
    totals["rss_sum"] = max(totals.get("rss_sum", 0), rss_sum)
    totals["pss_sum"] = max(totals.get("pss_sum", 0), pss_sum)
    totals["threads_sum"] = max(totals.get("threads_sum", 0), threads_sum)
    totals["files_sum"] = max(totals.get("files_sum", 0), files_sum)
    totals["processes"] = max(totals.get("processes", 0), counted)
    totals["used"] = max(totals.get("used", 0), psutil.virtual_memory().used)
    totals["shm"] = max(totals.get("shm", 0), shm_used())
    totals["samples"] = totals.get("samples", 0) + 1


def by_role(peaks: dict) -> dict:
    """Per role: how many processes had it, and the largest RSS, USS, PSS of one of them."""
    roles: dict = {}
    for peak in peaks.values():
        row = roles.setdefault(peak["role"], {"count": 0, "rss": 0, "uss": 0, "pss": 0, "threads": 0, "files": 0})
        row["count"] += 1
        for key in ("rss", "uss", "pss", "threads", "files"):
            row[key] = max(row[key], peak[key])
    return roles


def measure(argv: list[str], timeout: float, interval: float, uss: bool) -> tuple[dict, dict, int | None, float]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    peaks: dict = {}
    totals: dict = {"used_before": psutil.virtual_memory().used, "shm_before": shm_used()}
    started = time.monotonic()
    with open(Path(tempfile.gettempdir()) / f"sizing-memory-{os.getpid()}.log", "wb") as log:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        exit_code: int | None = None
        try:
            while time.monotonic() - started < timeout:
                tick = time.monotonic()
                sample(proc.pid, peaks, totals, uss)
                totals["sample_s"] = max(totals.get("sample_s", 0.0), time.monotonic() - tick)
                if proc.poll() is not None:
                    exit_code = proc.returncode
                    break
                time.sleep(max(0.0, interval - (time.monotonic() - tick)))
        finally:
            if proc.poll() is None:  # the timeout, or an exception: end our child's process group, by its PID
                end_group(proc, grace=20)
                # the private dir of the local Ray it started (train/cluster.py), which a SIGKILL leaves
                for private in Path(env.get("TMPDIR") or tempfile.gettempdir()).glob(f"mpiray-{os.getuid()}-train{proc.pid}-*"):
                    shutil.rmtree(private, ignore_errors=True)
    if exit_code == 0:
        Path(log.name).unlink()
    else:
        print(f"the training's output: {log.name}", file=sys.stderr)
    return peaks, totals, exit_code, time.monotonic() - started


def machine() -> str:
    import torch

    gpus = torch.cuda.device_count()
    memory = psutil.virtual_memory().total / 1024 ** 3
    return f"{os.cpu_count()} cores, {memory:.0f} GiB, {platform.machine()}, {f'{gpus} GPUs' if gpus else 'no GPU'}"


def table(argv: list[str], peaks: dict, totals: dict, exit_code: int | None, seconds: float, uss: bool) -> list[str]:
    shown = " ".join(["python", *argv[1:]])
    lines = [f"## `{shown}`", "", f"{totals.get('samples', 0)} samples, one a second; exit {exit_code} after "
             f"{seconds:.0f} s.", "",
             "| role | what it is | processes | RSS (MiB) | USS (MiB) | PSS (MiB) | threads | open files |",
             "|---|---|---|---|---|---|---|---|"]
    for name, peak in sorted(by_role(peaks).items(), key=lambda item: -item[1]["rss"]):
        memory = f"{peak['uss'] / MIB:.0f} | {peak['pss'] / MIB:.0f}" if uss else "- | -"
        lines.append(f"| {name} | {WHAT.get(name, '')} | {peak['count']} | {peak['rss'] / MIB:.0f} | {memory} | "
                     f"{peak['threads']} | {peak['files']} |")
    used = (totals.get("used", 0) - totals["used_before"]) / MIB
    shm = (totals.get("shm", 0) - totals["shm_before"]) / MIB
    lines += ["", "| all of them, at their peak | |", "|---|---|",
              f"| processes | {totals.get('processes', 0)} |",
              f"| threads (what RLIMIT_NPROC counts) | {totals.get('threads_sum', 0)} |",
              f"| open files (RLIMIT_NOFILE is per process; the largest is in the table above) | "
              f"{totals.get('files_sum', 0)} |",
              f"| the summed RSS, MiB (counts shared pages many times) | {totals.get('rss_sum', 0) / MIB:.0f} |",
              *([f"| the summed PSS, MiB | {totals.get('pss_sum', 0) / MIB:.0f} |"] if uss else []),
              f"| the machine's used memory above the start, MiB | {used:.0f} |",
              f"| /dev/shm used above the start, MiB (the object store's pages) | {shm:.0f} |",
              "", f"One sample of all processes took at most {totals.get('sample_s', 0.0):.2f} s.", ""]
    return lines


def markdown(tables: list[str]) -> str:
    import ray
    import torch

    lines = [f"# Memory of an RLlib training's processes ({time.strftime('%Y-%m-%d %H:%M %z')}, this project's "
             f"machine: {machine()}, `tests/benchmarks/sizing_memory.py`)", "",
             f"PPO on CartPole, torch on the CPU, on a local Ray (Ray {ray.__version__}, torch {torch.__version__}), "
             "one run at a time. The processes column: how many had that role (a worker has the last Ray title it took); "
             "each other column: the largest of one of them, its maximum over the samples (memory in MiB). RSS counts the shared "
             "libraries and shared memory each process maps; USS is what that process alone holds; "
             "PSS shares the shared pages out, so PSS adds up. `--num-cpus` makes the local Ray offer the CPUs the "
             "run asks for, more than the machine has: the processes are the same, only slower. The machine's used "
             "memory counts whatever else ran on it too; the sums over the processes do not.", "", *tables]
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds each training may run (default: 600)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between samples (default: 1)")
    parser.add_argument("--learners", default="0,1", help="remote learner counts, one run each (default: 0,1; "
                                                          "0: the local learner, in ray::PPO)")
    parser.add_argument("--no-uss", dest="uss", action="store_false", help="RSS alone (no /proc/PID/smaps reads)")
    parser.add_argument("--out", type=Path, default=REPORTS)
    args = parser.parse_args()
    tables: list[str] = []
    failed = False
    for learners in (int(n) for n in args.learners.split(",") if n):
        # the main process (1 CPU), each remote learner (1 CPU), each env runner (1 CPU)
        argv = [PYTHON, "-m", "train", "--stop-iters", "2", "--num-env-runners", str(RUNNERS),
                "--num-cpus", str(1 + learners + RUNNERS)] + (["--num-learners", str(learners)] if learners else [])
        storage = Path(tempfile.mkdtemp(prefix="sizing-results-"))
        try:
            peaks, totals, exit_code, seconds = measure(argv + ["--storage-path", str(storage), "--name", "sizing"],
                                                        args.timeout, args.interval, args.uss)
        finally:
            shutil.rmtree(storage, ignore_errors=True)
        failed = failed or exit_code != 0
        tables += table(argv, peaks, totals, exit_code, seconds, args.uss)
        print("\n".join(tables), flush=True)
    text = markdown(tables)
    print(text)
    write_report(args.out, "sizing_memory", text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
