"""`mpiray dashboard JOB_ID` (mpiray/elastic/dashboard.py): the tunnel to a running cluster's dashboard, read
from the registry, and a clear answer for a cluster without one."""

from __future__ import annotations

import os
import time

from mpiray.elastic import dashboard
from mpiray.elastic.registry import Entry, Registry


def entry(**changes) -> Entry:
    fields = dict(job_id="4711", gcs_address="10.0.0.7:25200", head_ip="10.0.0.7", host="x1000c0s1b0n0", pid=4242,
                  uid=os.getuid(), ray="2.60.0", python="3.11.7", log_dir="/logs/4711", started=time.time() - 5,
                  heartbeat=time.time(), dashboard_port=25299)
    return Entry(**{**fields, **changes})


def test_the_tunnel_goes_through_the_login_node_to_the_heads_loopback_port(tmp_path, monkeypatch, capsys):
    registry = Registry(tmp_path / "clusters")
    registry.publish(entry(), "s3cret")
    monkeypatch.setattr(dashboard.socket, "gethostname", lambda: "login1")
    monkeypatch.setattr(dashboard.getpass, "getuser", lambda: "ana")
    assert dashboard.main(["4711", "--registry", str(registry.root)]) == 0
    out = capsys.readouterr().out
    assert "ssh -N -L 8265:127.0.0.1:25299 x1000c0s1b0n0" in out
    assert "ssh -N -J ana@login1 -L 8265:127.0.0.1:25299 ana@x1000c0s1b0n0" in out
    assert "http://localhost:8265" in out
    assert f"cat {registry.token_path('4711')}" in out and "s3cret" not in out  # where the token is, never the token


def test_with_token_auth_the_tunnel_goes_to_the_heads_address_where_the_dashboard_listens():
    text = dashboard.tunnel(entry(dashboard_host="10.0.0.7"), None, "login1", "ana")
    assert "ssh -N -L 8265:10.0.0.7:25299 x1000c0s1b0n0" in text and "on 10.0.0.7:25299 of x1000c0s1b0n0" in text


def test_a_cluster_without_a_token_says_that_everyone_on_its_host_can_use_it():
    text = dashboard.tunnel(entry(), None, "login1", "ana", local_port=9000)
    assert "-L 9000:127.0.0.1:25299" in text and "--no-auth" in text and "cat " not in text


def test_a_cluster_without_a_dashboard_or_without_an_entry_is_a_one_line_error(tmp_path, capsys):
    registry = Registry(tmp_path / "clusters")
    registry.publish(entry(dashboard_port=None), "t")
    assert dashboard.main(["4711", "--registry", str(registry.root)]) == 2
    assert capsys.readouterr().err.strip() == ("mpiray dashboard: cluster 4711 runs no dashboard: start it with "
                                               "--dashboard (or MPIRAY_DASHBOARD=1)")
    assert dashboard.main(["9999", "--registry", str(registry.root)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
