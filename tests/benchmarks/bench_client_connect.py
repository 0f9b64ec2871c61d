#!/usr/bin/env python3
"""Ray Client drivers (ray://, what `mpiray attach` uses from a login node) that connect, or not.

    .venv/bin/bash tests/benchmarks/run bench_client_connect [--rounds 25] [--at-once 4] [--out tests/benchmarks]

The head's Ray Client proxy forks one server per driver. Each configuration starts one 2-CPU node and runs
ROUNDS rounds of AT_ONCE drivers at once (`ray.init("ray://...")`, one task), as several users' or scripts'
drivers do, then stops the node:
- the reference: `ray start --head --block` by hand, Ray's defaults, a private temp dir;
- mpiray: `python start_ray.py -- <a driver that waits>` and its registry's client port and token.
Measured: the drivers whose ray.init() failed (Ray's "Starting Ray client server failed": the proxy's child
died before it ran, ray-project/ray#63202), and the connect time of those that connected. Prints a table,
writes client_connect_report.md and client_connect_report.json in docs/reports/.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mpiray.elastic.registry import Registry

from harness import REPORTS, write_report
from process_control import end_group

ROOT = Path(__file__).resolve().parents[2]

PYTHON = sys.executable
RAY = str(Path(PYTHON).parent / "ray")
WAITING_DRIVER = ROOT / "tests" / "slurm" / "elastic_driver.py"
DRIVER = ("import time; started = time.monotonic(); import ray; ray.init(); "
          "print('CONNECTED', time.monotonic() - started, flush=True); ray.get(ray.remote(lambda: 1).remote())")
DRIVER_TIMEOUT_S, UP_TIMEOUT_S = 180, 120
CLIENT_SERVER_DIED = "Starting Ray client server failed"

REFERENCE_STOP_GRACE_S = 10.0  # the by-hand head's: then SIGKILL to its group


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def drive(address: str, env: dict, rounds: int, at_once: int) -> dict:
    """rounds of at_once drivers at once against address: failures (by cause) and connect seconds."""
    connect_s, failed, died = [], 0, 0
    for _ in range(rounds):
        drivers = [subprocess.Popen([PYTHON, "-c", DRIVER], env={**env, "RAY_ADDRESS": address},
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                   for _ in range(at_once)]
        for driver in drivers:
            try:
                out, err = driver.communicate(timeout=DRIVER_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                driver.kill()
                out, err = driver.communicate(timeout=30)
            if driver.returncode == 0 and "CONNECTED" in out:
                connect_s.append(float(out.split("CONNECTED", 1)[1].split()[0]))
            else:
                failed += 1
                died += CLIENT_SERVER_DIED in err
    return {"drivers": rounds * at_once, "failed": failed, "client_server_died": died,
            "connect_s": round(statistics.median(connect_s), 2) if connect_s else None}


def by_hand(rounds: int, at_once: int, scratch: Path) -> dict:
    temp = Path(tempfile.mkdtemp(prefix="bc", dir="/tmp"))  # short: Ray's socket paths <= 107 bytes
    port, client_port = free_port(), free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    with open(scratch / "by-hand-head.log", "ab") as out:
        head = subprocess.Popen([RAY, "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
                                 f"--ray-client-server-port={client_port}", f"--temp-dir={temp}",
                                 "--include-dashboard=false", "--disable-usage-stats"],
                                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + UP_TIMEOUT_S
        while subprocess.run([RAY, "status", f"--address=127.0.0.1:{port}"], env=env, capture_output=True,
                             timeout=60).returncode != 0:
            if time.monotonic() > deadline or head.poll() is not None:
                raise RuntimeError(f"the head by hand did not come up: read {scratch / 'by-hand-head.log'}")
            time.sleep(0.5)
        return drive(f"ray://127.0.0.1:{client_port}", env, rounds, at_once)
    finally:
        # SIGTERM: `ray start --block` stops its node, or (it may take 30 s here) the group's SIGKILL does: its stop
        # is not measured
        end_group(head, grace=REFERENCE_STOP_GRACE_S)
        subprocess.run(["rm", "-rf", str(temp)], timeout=60)


def with_mpiray(rounds: int, at_once: int, scratch: Path) -> dict:
    job_id, marker, registry_dir = f"bench-client-{os.getpid()}", scratch / "go", scratch / "registry"
    marker.unlink(missing_ok=True)
    env = {**os.environ, "MPIRAY_REGISTRY": str(registry_dir)}  # not the user's ~/.mpiray
    env.pop("RAY_ADDRESS", None)
    with open(scratch / "mpiray.log", "ab") as out:
        job = subprocess.Popen([PYTHON, str(ROOT / "start_ray.py"), "--num-cpus", "2", "--job-id", job_id,
                                "--log-dir", str(scratch / "logs"), "--",
                                PYTHON, str(WAITING_DRIVER), "wait-nodes", "1", str(marker)],
                               cwd=scratch, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        registry, deadline = Registry(registry_dir), time.monotonic() + UP_TIMEOUT_S
        while not [entry for entry in registry.running() if entry.job_id == job_id]:
            if time.monotonic() > deadline or job.poll() is not None:
                raise RuntimeError(f"mpiray's cluster did not come up: read {scratch / 'mpiray.log'}")
            time.sleep(0.3)
        entry = registry.read(job_id)
        token = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(registry.token_path(job_id))}
        return drive(f"ray://{entry.head_ip}:{entry.client_port}", {**env, **token}, rounds, at_once)
    finally:
        marker.touch()
        try:
            job.wait(UP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            end_group(job, grace=30)


def failures_differ(ref: dict, ours: dict) -> tuple[float, str]:
    """Fisher's exact test (two-sided) of the two failure counts: its p-value, and what it lets the report say."""
    from scipy.stats import fisher_exact  # SciPy comes with Ray's RLlib extra

    table = [[ref["failed"], ref["drivers"] - ref["failed"]], [ours["failed"], ours["drivers"] - ours["failed"]]]
    p = float(fisher_exact(table, alternative="two-sided").pvalue)
    said = "the failure counts differ (p < 0.05)" if p < ALPHA else "no difference in failures is shown (p >= 0.05)"
    return p, said


ALPHA = 0.05


def markdown(rows: dict[str, dict], rounds: int, at_once: int) -> str:
    ref, ours = rows["by_hand"], rows["mpiray"]
    ratio = f"{ours['connect_s'] / ref['connect_s']:.2f}x" if ref["connect_s"] and ours["connect_s"] else "-"
    p, said = failures_differ(ref, ours)
    return "\n".join([
        "# Ray Client drivers that connect", "",
        f"{rounds} rounds of {at_once} drivers at once per configuration, one configuration after the other (not "
        f"interleaved). Fisher's exact test of the failures, two-sided: p = {p:.3g}, so {said}.", "",
        "| measure | by hand (`ray start --head`) | mpiray | ratio |", "|---|---|---|---|",
        f"| drivers whose ray.init() failed | {ref['failed']} of {ref['drivers']} | {ours['failed']} of {ours['drivers']} | - |",
        f"| of those, \"{CLIENT_SERVER_DIED}\" | {ref['client_server_died']} | {ours['client_server_died']} | - |",
        f"| connect time of the others (median), s | {ref['connect_s']} | {ours['connect_s']} | {ratio} |",
    ]) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--at-once", type=int, default=4)
    parser.add_argument("--out", type=Path, default=REPORTS)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-client-"))
    rows = {}
    for name, run in (("by_hand", by_hand), ("mpiray", with_mpiray)):
        rows[name] = run(args.rounds, args.at_once, scratch)
        print(name, rows[name], flush=True)
    text = markdown(rows, args.rounds, args.at_once)
    print(text)
    write_report(args.out, "client_connect", text, rows, indent=1)
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
