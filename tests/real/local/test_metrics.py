"""A clean launched run: no ERROR or E-level line from Ray, and every node's metrics endpoint answers.

Given an agent port that nothing serves (a --minimal agent, without ray[default]), raylet and the GCS log
"Failed to establish connection to the metrics exporter agent" when their retries run out, 30 s after
they start: the driver stays 35 s, and Ray's own logs of every node are read too.
"""

from __future__ import annotations

import sys

import pytest

from mpiray.raynode import commands

from helpers import ROOT, error_lines, launch, tagged_lines


@pytest.fixture(scope="module")
def job_of_35_s(tmp_path_factory):
    """A 2-rank job whose driver stays 35 s and asks every node's metrics endpoint meanwhile."""
    tmp_path = tmp_path_factory.mktemp("metrics")
    run = launch(tmp_path, 2, driver=[sys.executable, str(ROOT / "tests/drivers/metrics_probe.py"), "35"],
                 tag="metrics", timeout=180)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.seconds > 35
    (metrics,) = tagged_lines(run.stdout, "METRICS")
    return run, metrics


def test_a_35_s_job_prints_no_error_line(job_of_35_s):
    run, _ = job_of_35_s
    found = error_lines(run.stdout + "\n" + run.stderr + "\n" + (run.job_dir / "driver.log").read_text())
    assert not found, "ERROR/E lines in a clean run:\n" + "\n".join(found)
    # What raylet and the GCS log themselves, whether or not the log monitor forwarded it in time.
    ray_logs = sorted(run.job_dir.glob("ray-rank-*/raylet.out")) + sorted(run.job_dir.glob("ray-rank-*/gcs_server.out"))
    assert len(ray_logs) == 3
    found = [f"{log.parent.name}/{log.name}: {line}" for log in ray_logs for line in error_lines(log.read_text())]
    assert not found, "E lines in Ray's logs:\n" + "\n".join(found)


def test_every_node_exports_metrics_on_a_port_of_its_block(job_of_35_s):
    run, nodes = job_of_35_s
    assert len(nodes) == 2
    problem = commands.metrics_agent_problem()
    if problem:  # Ray without ray[default]: no agent serves metrics, and Ray is told so (no port to dial)
        assert all(not node["port"] or node["port"] < 0 for node in nodes), nodes
        assert not any("--metrics-export-port" in run.event(rank, "node_starting")["command"] for rank in (0, 1))
        pytest.skip(f"Ray's metrics agents cannot serve here: {problem}")
    for rank, node in enumerate(nodes):
        block = run.event(rank, "ports_planned")
        assert block["first"] <= node["port"] <= block["last"], (node, block)
        assert node.get("status") == 200, node
        assert node["content_type"].startswith("text/plain") and node["types"] > 0 and node["ray_samples"] > 0, node
