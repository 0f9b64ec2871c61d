"""The registry of running clusters (mpiray/elastic/registry.py): private to its user, atomic, stale
entries found and removed. (A real second user's attack on it: tests/real/local/test_shared_node.py.)"""

from __future__ import annotations

import json
import os
import stat
import time

import pytest

from mpiray.elastic.registry import STALE_AFTER_S, Entry, Join, NoSuchCluster, Registry, publish
from mpiray.errors import ConfigError
from mpiray.logs.events import RankLog, read_events


def entry(job_id: str = "1234", **changes) -> Entry:
    fields = dict(job_id=job_id, gcs_address="10.0.0.1:25200", head_ip="10.0.0.1", host="n1", pid=4242,
                  uid=os.getuid(), ray="2.60.0", python="3.11.7", log_dir="/logs/1234", started=time.time() - 5,
                  heartbeat=time.time())
    return Entry(**{**fields, **changes})


def test_a_published_cluster_is_read_back_with_its_token_and_nothing_secret_in_the_entry(tmp_path):
    registry = Registry(tmp_path / "clusters")
    registry.publish(entry(), "s3cret")
    assert registry.read("1234").gcs_address == "10.0.0.1:25200"
    assert registry.token("1234") == "s3cret"
    assert "s3cret" not in registry.entry_path("1234").read_text()
    for path in (registry.root, registry.entry_path("1234"), registry.token_path("1234")):
        assert stat.S_IMODE(os.stat(path).st_mode) & 0o077 == 0, path
    assert [e.job_id for e in registry.running()] == ["1234"]
    assert not [p for p in registry.root.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_a_missing_gone_or_foreign_cluster_is_a_clear_error_at_once(tmp_path):
    registry = Registry(tmp_path / "clusters")
    registry.publish(entry("1"), None)
    with pytest.raises(NoSuchCluster, match=r"no running cluster '2' in .* \(running: 1\)"):
        registry.read("2")
    registry.publish(entry("old", heartbeat=time.time() - STALE_AFTER_S - 1), "t")
    with pytest.raises(NoSuchCluster, match="cluster 'old' is gone: no heartbeat for"):
        registry.read("old")
    assert not registry.entry_path("old").exists() and not registry.token_path("old").exists()  # cleaned
    registry.publish(entry("ended", ends_at=time.time() - STALE_AFTER_S - 1), "t")
    assert [e.job_id for e in registry.running()] == ["1"]  # the walltime passed: removed on the way
    registry.publish(entry("theirs", uid=os.getuid() + 1), "t")
    with pytest.raises(NoSuchCluster, match="belongs to uid"):
        registry.read("theirs")
    assert registry.token("1") is None  # a cluster started with --no-auth


def test_a_registry_that_is_not_the_users_own_is_refused(tmp_path):
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    with pytest.raises(ConfigError, match="is not a directory of yours"):
        Registry(link).publish(entry(), "t")
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o777)
    os.chmod(loose, 0o777)
    Registry(loose).publish(entry(), "t")
    assert stat.S_IMODE(os.stat(loose).st_mode) == 0o700  # ours: made private again


def join(job_id: str, heartbeat: float | None = None, provider_node: str | None = None) -> Join:
    now = time.time()
    return Join(job_id, "n2", 4242, 2, 4.0, 0.0, ["abc", "def"], now - 30, now if heartbeat is None else heartbeat,
                provider_node)


# The JSON keys of a joined job's record: `mpiray list --json` prints them, the elastic provider reads
# provider_node from the file itself (elastic/provider.py), a joining job of another mpiray writes them.
JOIN_KEYS = {"job_id", "host", "pid", "nodes", "cpus", "gpus", "node_ids", "started", "heartbeat", "provider_node"}


def test_joined_jobs_are_kept_beside_their_cluster_and_go_with_it(tmp_path):
    registry = Registry(tmp_path / "clusters")
    registry.publish(entry(), "t")
    joined = join("77", provider_node="elastic-1234-3")
    registry.add_join("1234", joined)
    assert registry.joins("1234") == [joined]
    (path,) = (registry.root / "1234.joins").glob("*.json")
    assert set(json.loads(path.read_text())) == JOIN_KEYS
    assert json.loads(path.read_text())["provider_node"] == "elastic-1234-3"
    registry.remove_join("1234", "77")
    assert registry.joins("1234") == []
    registry.add_join("1234", join("78"))
    registry.remove("1234")
    assert not list(registry.root.iterdir())


def test_a_joined_jobs_record_is_fresh_while_its_job_renews_it_and_a_torn_one_is_skipped(tmp_path):
    registry = Registry(tmp_path / "clusters")
    registry.publish(entry(), "t")
    registry.add_join("1234", join("77"))
    registry.add_join("1234", join("79", heartbeat=time.time() - STALE_AFTER_S - 1))
    (registry.root / "1234.joins" / "80.json").write_text('{"job_id": "80"}')  # of an older mpiray, or torn
    assert [(j.job_id, j.fresh()) for j in registry.joins("1234")] == [("77", True), ("79", False)]


# The JSON keys other jobs (--join), `mpiray attach` and `mpiray list` read: a change breaks their reading.
ENTRY_KEYS = {"job_id", "gcs_address", "head_ip", "host", "pid", "uid", "ray", "python", "log_dir", "started",
              "heartbeat", "ends_at", "scheduler", "nodes", "cpus", "gpus", "autoscale", "dashboard_port", "dashboard_host",
              "client_port", "auth", "run"}


def test_a_running_cluster_is_published_beats_and_is_withdrawn_and_says_so(tmp_path):
    log = RankLog(0, "n1")
    log.open(tmp_path / "logs")
    registry = Registry(tmp_path / "clusters")
    published = publish(registry, entry(heartbeat=0.0), "s3cret", log)
    assert published is not None and registry.token("1234") == "s3cret"
    assert set(json.loads(registry.entry_path("1234").read_text())) == ENTRY_KEYS
    published.beat()
    assert time.time() - registry.read("1234").heartbeat < 5
    published.withdraw()
    assert registry.running() == []
    log.close()
    assert [(r["event"], r["fields"]["job_id"]) for r in read_events(log.events_path) if r["event"] == "published"] \
        == [("published", "1234")]


def test_a_registry_that_cannot_be_written_costs_only_the_entry(tmp_path):
    log = RankLog(0, "n1")
    log.open(tmp_path / "logs")
    (tmp_path / "a-file").write_text("")
    assert publish(Registry(tmp_path / "a-file" / "clusters"), entry(), None, log) is None
    log.close()
    (failed,) = [r["fields"] for r in read_events(log.events_path) if r["event"] == "registry_failed"]
    assert failed["root"] == str(tmp_path / "a-file" / "clusters")


def test_mpiray_list_adds_the_nodes_of_the_jobs_that_joined_and_still_run(tmp_path, capsys):
    from mpiray.elastic import listing

    registry = Registry(tmp_path / "clusters")
    registry.publish(entry(), "t")
    registry.add_join("1234", join("77"))
    registry.add_join("1234", join("79", heartbeat=time.time() - STALE_AFTER_S - 1))  # SIGKILLed: not counted
    assert listing.main(["--registry", str(registry.root), "--json"]) == 0
    (cluster,) = json.loads(capsys.readouterr().out)
    assert [j["job_id"] for j in cluster["joins"]] == ["77"]
    assert (cluster["total_nodes"], cluster["total_cpus"]) == (cluster["nodes"] + 2, cluster["cpus"] + 4.0)
    assert listing.main(["--registry", str(registry.root)]) == 0
    assert "77 (2 nodes)" in capsys.readouterr().out
