"""`mpiray submit` / `mpiray jobs` (mpiray/elastic/submit.py) before any request: the way in read from the registry,
a clear one-line error where there is none, and the listing's table. The real submissions: tests/real/local/test_submit.py."""

from __future__ import annotations

import json
import os
import time
from types import SimpleNamespace

import pytest

from mpiray.elastic import info, submit
from mpiray.elastic.registry import Entry, Registry
from mpiray.rank.messages import Report


def entry(**changes) -> Entry:
    fields = dict(job_id="4711", gcs_address="10.0.0.7:25200", head_ip="10.0.0.7", host="x1000c0s1b0n0", pid=4242,
                  uid=os.getuid(), ray="2.60.0", python="3.11.7", log_dir="/logs/4711", started=time.time() - 5,
                  heartbeat=time.time(), dashboard_port=25299, dashboard_host="10.0.0.7", client_port=25298)
    return Entry(**{**fields, **changes})


@pytest.mark.parametrize("changes, said", [
    ({"dashboard_port": None}, "mpiray submit: cluster 4711 serves no Jobs API: Ray's dashboard serves it, so start "
                               "the cluster with --dashboard (or MPIRAY_DASHBOARD=1)"),
    ({"dashboard_host": "127.0.0.1", "auth": False},
     "mpiray submit: cluster 4711 runs --no-auth, so its Jobs API listens on 127.0.0.1 of x1000c0s1b0n0 alone: "
     "open the tunnel `mpiray dashboard 4711` prints and pass --address http://localhost:8265"),
    # token auth on, but the Ray that runs the head (an image's) serves its dashboard to anyone: the real reason
    ({"dashboard_host": "127.0.0.1", "ray": "2.52.1"},
     "mpiray submit: cluster 4711 runs Ray 2.52.1, whose dashboard does not ask for the cluster's token, so its "
     "Jobs API listens on 127.0.0.1 of x1000c0s1b0n0 alone: open the tunnel `mpiray dashboard 4711` prints and "
     "pass --address http://localhost:8265"),
])
def test_a_cluster_without_a_jobs_api_reachable_from_here_is_a_one_line_error(tmp_path, capsys, changes, said):
    registry = Registry(tmp_path / "clusters")
    registry.publish(entry(**changes), "s3cret")
    assert submit.main(["4711", "--registry", str(registry.root), "--", "python", "x.py"]) == 2
    assert capsys.readouterr().err.strip() == said


def test_on_takes_rays_label_selectors_and_refuses_a_pair_that_is_none_in_one_line(tmp_path, capsys):
    assert submit.on_labels(["mpiray.io/role=rollout", "zone=!in(a,b)"]) == {"mpiray.io/role": "rollout",
                                                                           "zone": "!in(a,b)"}
    registry = Registry(tmp_path / "clusters")
    registry.publish(entry(), "s3cret")
    assert submit.main(["4711", "--registry", str(registry.root), "--on", "rollout", "--", "python", "x.py"]) == 2
    assert capsys.readouterr().err.strip() == ("mpiray submit: --on 'rollout' is not KEY=VALUE, e.g. --on "
                                               "mpiray.io/role=rollout")


def test_no_such_cluster_and_a_missing_command_are_said_in_one_line(tmp_path, capsys):
    registry = Registry(tmp_path / "clusters")
    registry.publish(entry(), "s3cret")
    assert submit.jobs_main(["9999", "--registry", str(registry.root)]) == 2
    assert capsys.readouterr().err.startswith("mpiray jobs: no running cluster '9999'")
    with pytest.raises(SystemExit) as usage:
        submit.main(["4711", "--registry", str(registry.root)])
    assert usage.value.code == 2 and "give the driver command after '--'" in capsys.readouterr().err


def test_the_listing_shows_rays_status_words_oldest_first():
    details = [SimpleNamespace(submission_id="mpiray-4711-b", job_id=None, status=SimpleNamespace(value="RUNNING"),
                               start_time=2_000_000, entrypoint="sleep 600"),
               SimpleNamespace(submission_id="mpiray-4711-a", job_id=None, status=SimpleNamespace(value="SUCCEEDED"),
                               start_time=1_000_000, entrypoint="python train.py")]
    lines = submit.table(details).splitlines()
    assert lines[0].split() == ["SUBMISSION", "STATUS", "STARTED", "ENTRYPOINT"]
    assert [line.split()[:2] for line in lines[1:]] == [["mpiray-4711-a", "SUCCEEDED"], ["mpiray-4711-b", "RUNNING"]]
    assert lines[1].endswith("python train.py")


def test_cluster_info_names_the_way_in_and_no_secret(tmp_path):
    nodes = [Report(rank=0, host="n1", log="l0", node_ip="10.0.0.7", node_id="aa", resources={"CPU": 4.0}),
             Report(rank=1, host="n2", log="l1", node_ip="10.0.0.8", node_id="bb", resources={"CPU": 4.0, "GPU": 1.0},
                    labels={"mpiray.io/role": "rollout"})]
    built = info.build(entry(), nodes, tmp_path / "4711.token")
    assert tuple(built) == info.INFO_KEYS
    assert built["jobs_url"] == "http://10.0.0.7:25299" and built["ray_client"] == "ray://10.0.0.7:25298"
    assert built["tunnel"] == "ssh -N -L 8265:10.0.0.7:25299 x1000c0s1b0n0"
    assert [(n["ip"], n["gpus"]) for n in built["nodes"]] == [("10.0.0.7", 0), ("10.0.0.8", 1.0)]
    assert [n["labels"] for n in built["nodes"]] == [{}, {"mpiray.io/role": "rollout"}]  # Ray selects by them
    assert built["token_path"] == str(tmp_path / "4711.token") and "s3cret" not in str(built)
    without = info.build(entry(dashboard_port=None, client_port=None), nodes, None)
    assert without["jobs_url"] is None and without["tunnel"] is None and without["submit"] is None
    path = info.write(tmp_path, built)
    assert path.name == "cluster_info.json" and oct(path.stat().st_mode & 0o777) == "0o600"


def test_prometheus_targets_list_every_node_that_exports_metrics_and_nothing_else(tmp_path):
    nodes = [Report(rank=0, host="n1", log="l0", node_ip="10.0.0.7", node_id="aa", metrics_port=24405),
             Report(rank=1, host="n2", log="l1", node_ip="10.0.0.8", node_id="bb", metrics_port=0),  # --no-metrics
             Report(rank=2, host="n3", log="l2", error="failed", metrics_port=24505)]  # no node: nothing to scrape
    groups = info.targets("4711", "4712", nodes)
    assert groups == [{"targets": ["10.0.0.7:24405"], "labels": {"mpiray_cluster": "4711", "mpiray_job": "4712",
                                                                  "mpiray_rank": "0", "host": "n1", "ray_node_id": "aa"}}]
    path = info.write_targets(tmp_path, "4712", groups)
    assert path == tmp_path / "prometheus" / "4712.json" and json.loads(path.read_text()) == groups
    assert oct(path.stat().st_mode & 0o777) == "0o644"  # Prometheus often runs as a user of its own
