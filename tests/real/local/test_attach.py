"""`mpiray attach` from a host that runs none of the cluster's raylets, as a login node: its driver connects
through Ray Client with the cluster's token; on a host of the cluster, through the host's raylet. A
separate PID namespace is such a host: Ray looks for a raylet in the process table, and finds none there.
And a planned join of a running cluster (`--dry-run --join`), which checks it and changes nothing of it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mpiray.elastic.registry import Registry
from mpiray.logs.report.jobdir import read_job
from mpiray.raynode.raycompat import ray_version

from helpers import (
    BIN,
    JOB_TIMEOUT_S,
    PYTHON,
    ROOT,
    client_server_logs,
    driver_report,
    launcher_argv,
    waiting_cluster,
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                                reason="a login host is a PID namespace of its own: needs root and unshare")
# What a user's driver does: a plain ray.init(), then the cluster's nodes and a task.
USER_DRIVER = ("import json, ray\nray.init()\n"
               "print('ATTACHED', json.dumps({'nodes': sum(n['Alive'] for n in ray.nodes()), "
               "'task': ray.get(ray.remote(lambda: 42).remote())}), flush=True)\n")
# Its own process table: no raylet in it. unshare killed (a test's timeout) kills its child, the namespace's init,
# and with it everything in the namespace.
LOGIN_HOST = ["unshare", "--pid", "--kill-child", "--mount-proc", "--"]
# 5 of 100 such drivers failed by hand (docs/reports/client_connect_report.md): 20 all connect 36% of the time.
DRIVERS_AT_ONCE, ROUNDS = 4, 5


@pytest.fixture
def cluster(tmp_path, private_registry):
    """A 2-node cluster whose driver waits: (job id, its registry entry)."""
    with waiting_cluster(tmp_path, private_registry, tag="attach") as running:
        yield running


def attach(job_id: str, where: list[str] = (), env=None) -> subprocess.CompletedProcess:
    return subprocess.run([*where, str(BIN / "mpiray"), "attach", job_id, "--", PYTHON, "-c", USER_DRIVER],
                          capture_output=True, text=True, timeout=180, env={**os.environ, **(env or {})})


def test_attach_from_a_host_without_a_raylet_connects_through_ray_client(cluster):
    job_id, entry = cluster
    login = attach(job_id, LOGIN_HOST)
    assert login.returncode == 0, login.stderr[-3000:] + client_server_logs(Path(entry.log_dir))
    assert driver_report(login.stdout, "ATTACHED") == {"nodes": 2, "task": 42}
    assert f"ray://{entry.head_ip}:{entry.client_port}" in login.stderr and "Ray Client" in login.stderr
    on_the_cluster = attach(job_id)  # a host of the cluster: through its raylet, as before
    assert on_the_cluster.returncode == 0, on_the_cluster.stderr[-3000:]
    assert driver_report(on_the_cluster.stdout, "ATTACHED") == {"nodes": 2, "task": 42}
    assert f"({entry.gcs_address}, through this host's raylet)" in on_the_cluster.stderr


@pytest.mark.serial  # 1 of 12 failed with another job's tests beside it (Ray Client's proxy: UNAUTHENTICATED)
def test_drivers_attach_at_once_from_a_host_without_a_raylet(cluster):
    """The head's Ray Client proxy forks a server for each driver, from a process whose gRPC threads are busy
    with the other drivers; with gRPC's fork handlers armed, such a server died now and then before it ran
    (ray-project/ray#63202), and its driver's ray.init() failed "Starting Ray client server failed"."""
    job_id, entry = cluster
    for round_ in range(1, ROUNDS + 1):
        drivers = [subprocess.Popen([*LOGIN_HOST, str(BIN / "mpiray"), "attach", job_id, "--", PYTHON, "-c", USER_DRIVER],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                   for _ in range(DRIVERS_AT_ONCE)]
        try:
            results = [(driver.communicate(timeout=180), driver.returncode) for driver in drivers]
        finally:
            for driver in drivers:
                if driver.poll() is None:
                    driver.kill()
                    driver.wait(30)
        failed = [err for (out, err), code in results if code != 0]
        assert not failed, f"round {round_}: {len(failed)} of {DRIVERS_AT_ONCE} drivers failed: " + failed[0][-3000:] + \
            client_server_logs(Path(entry.log_dir))
        assert [driver_report(out, "ATTACHED") for (out, err), code in results] == [{"nodes": 2, "task": 42}] * DRIVERS_AT_ONCE


def test_ray_clients_port_refuses_a_driver_without_the_clusters_token(cluster, tmp_path):
    """The client port listens on the head's address, where every user of the network reaches it: a driver with no
    token and one with a wrong token, at once (each is refused only at Ray Client's 30 s connection timeout)."""
    job_id, entry = cluster
    wrong = tmp_path / "wrong_token"
    wrong.write_text("0" * 64)
    wrong.chmod(0o600)
    tokens = {"none": {"RAY_AUTH_MODE": "disabled"},
              "wrong": {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(wrong)}}
    drivers = {name: subprocess.Popen([*LOGIN_HOST, PYTHON, "-c", USER_DRIVER], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True,
                                      env={**os.environ, "RAY_ADDRESS": f"ray://{entry.head_ip}:{entry.client_port}",
                                           **token})
               for name, token in tokens.items()}
    try:
        results = {name: (driver.communicate(timeout=180), driver.returncode) for name, driver in drivers.items()}
    finally:
        for driver in drivers.values():
            if driver.poll() is None:
                driver.kill()
                driver.wait(30)
    for name, ((out, err), code) in results.items():
        assert code != 0 and "ATTACHED" not in out, name
        assert "ray client connection timeout" in err, (name, err[-3000:])


def test_attach_refuses_a_cluster_that_has_no_ray_client_from_a_host_without_a_raylet(tmp_path, private_registry):
    """A head without grpcio (ray without [default]) serves no Ray Client: said at once, not after a minute."""
    registry = Registry(private_registry)
    now = time.time()
    entry = {"job_id": "noclient", "gcs_address": "127.0.0.1:1", "head_ip": "127.0.0.1", "host": "h", "pid": 1,
             "uid": os.getuid(), "ray": ray_version(),
             "python": sys.version.split()[0], "log_dir": str(tmp_path), "started": now, "heartbeat": now}
    (Path(private_registry) / "noclient.json").write_text(json.dumps(entry))
    started = time.monotonic()
    result = attach("noclient", LOGIN_HOST)
    assert result.returncode == 2 and time.monotonic() - started < 30
    assert "serves no Ray Client" in result.stderr, result.stderr
    registry.remove("noclient")


def test_a_dry_run_join_checks_the_running_cluster_and_changes_nothing_of_it(cluster, tmp_path, private_registry):
    """What `--join JOB` would do, planned: the cluster is read from the registry and its GCS must answer; the
    job's own nodes are only planned, no join is recorded, and the cluster's report counts no joined job."""
    job_id, entry = cluster
    argv = launcher_argv(2, ["--log-dir", str(tmp_path / "logs"), "--job-id", "planned", "--dry-run",
                             "--join", job_id])
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
    assert result.returncode == 0, result.stderr[-3000:]
    assert Registry(private_registry).joins(job_id) == []  # `mpiray list` shows no join
    joined = [json.loads(line) for path in sorted(Path(entry.log_dir).glob("join-planned-rank-*.jsonl"))
              for line in path.read_text().splitlines()]
    planned = [r["fields"] for r in joined if r["event"] == "dry_run_node"]
    assert [p["role"] for p in planned] == ["worker", "worker"]  # both ranks' nodes: workers of that cluster
    assert all(entry.gcs_address in p["command"] for p in planned)
    report = read_job(Path(entry.log_dir))
    assert report.joined_jobs == [] and report.planned_joins == ["planned"]
    gone = subprocess.run(launcher_argv(1, ["--log-dir", str(tmp_path / "logs"), "--dry-run", "--join", "424242"]),
                          cwd=ROOT, capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
    assert gone.returncode == 2 and "no running cluster '424242'" in gone.stderr, gone.stderr[-3000:]
