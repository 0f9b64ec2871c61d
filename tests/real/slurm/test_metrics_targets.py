"""Prometheus finds every Ray node of a cluster through the file-based service discovery that mpiray writes
(LOG_DIR/JOB/prometheus/*.json, mpiray/elastic/info.py), as nodes come and go: Debian's own Prometheus scrapes a
3-host cluster on the Slurm testbed, then a job that joins it and leaves."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from mpiray.elastic.registry import Registry

from helpers import JOB_TIMEOUT_S, PYTHON, ROOT, driver_report
from slurm import fixture
from slurm.fixture import start

pytestmark = pytest.mark.skipif(shutil.which("prometheus") is None,
                                reason="Debian's prometheus is not installed (tests/slurm/install.sh installs it)")
DRIVER = ROOT / "tests" / "slurm" / "elastic_driver.py"
SCRAPE_S = 1  # Prometheus's scrape and file_sd refresh interval here


def finish(proc: subprocess.Popen, timeout: float = JOB_TIMEOUT_S) -> int:
    return fixture.finish(proc, timeout)


def wait_for(check, what: str, timeout: float = JOB_TIMEOUT_S):
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        time.sleep(0.5)
    return result


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def up_targets(port: int) -> list[dict]:
    """Prometheus's active targets whose last scrape succeeded (none while it is not listening yet)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/targets?state=active", timeout=10) as answer:
            active = json.load(answer)["data"]["activeTargets"]
    except urllib.error.URLError:
        return []
    return [target for target in active if target["health"] == "up"]


@pytest.fixture
def prometheus(tmp_path):
    """start(job_dir): Debian's Prometheus, scraping whatever JOB_DIR/prometheus/*.json lists (a pattern only in
    the last path element, Prometheus's rule); its API port."""
    servers = []

    def start(job_dir: Path) -> int:
        port, config = free_port(), tmp_path / "prometheus.yml"
        config.write_text(json.dumps({  # YAML is a superset of JSON
            "global": {"scrape_interval": f"{SCRAPE_S}s", "scrape_timeout": f"{SCRAPE_S}s"},
            "scrape_configs": [{"job_name": "ray", "file_sd_configs": [
                {"files": [str(job_dir / "prometheus" / "*.json")], "refresh_interval": f"{SCRAPE_S}s"}]}],
        }))
        with open(tmp_path / "prometheus.out", "w") as out:
            servers.append(subprocess.Popen(
                ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{port}"], stdout=out, stderr=subprocess.STDOUT))
        return port

    yield start
    for server in servers:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=30)


def test_prometheus_scrapes_every_node_as_nodes_join_and_leave(slurm_testbed, jobs, tmp_path, private_registry,
                                                               prometheus):
    bed, registry = slurm_testbed, Registry(private_registry)
    marker, joined_marker = tmp_path / "go", tmp_path / "joined-go"
    head = start(bed, jobs.srun(tmp_path, 3, "--", PYTHON, str(DRIVER), "wait-nodes", "3", str(marker), cpus=1),
                 tmp_path / "head.out")
    joiner = None
    try:
        cluster = wait_for(lambda: [e.job_id for e in registry.running()], "the cluster in the registry")[0]
        jobs.ids.append(cluster)
        targets_dir = tmp_path / "logs" / cluster / "prometheus"
        port = prometheus(tmp_path / "logs" / cluster)
        up = wait_for(lambda: len(found := up_targets(port)) == 3 and found, "3 targets up")
        assert sorted(target["labels"]["instance"].split(":")[0] for target in up) == bed.node_ips
        assert {target["labels"]["mpiray_cluster"] for target in up} == {cluster}

        joiner = start(bed, jobs.srun(tmp_path, 1, "--join", cluster, "--", PYTHON, str(DRIVER), "wait-nodes", "4",
                                      str(joined_marker), cpus=1), tmp_path / "join.out")
        wait_for(lambda: len(up_targets(port)) == 4, "the joined job's node up too")
        (mine,) = [path for path in targets_dir.iterdir() if path.name != f"{cluster}.json"]
        joined_marker.touch()  # the joined job's driver ends: its node leaves, and so does its file
        assert finish(joiner) == 0, (tmp_path / "join.out").read_text()[-3000:]
        assert not mine.exists()
        wait_for(lambda: len(up_targets(port)) == 3, "the joined job's node off the list")

        marker.touch()
        assert finish(head) == 0, (tmp_path / "head.out").read_text()[-3000:]
        assert driver_report((tmp_path / "head.out").read_text(), "ELASTIC")["ready"] == 3
        assert list(targets_dir.iterdir()) == []  # the cluster's own file goes with it
    finally:
        marker.touch()
        joined_marker.touch()
        for proc in (head, joiner):
            if proc is not None:
                finish(proc, timeout=60)
