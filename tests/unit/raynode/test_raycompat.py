"""What an older Ray lacks, and how mpiray gets by: against stand-ins for Ray's GCS client (no cluster)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mpiray.raynode import raycompat
from mpiray.raynode.gcs import Gcs

pytestmark = pytest.mark.smoke_ray  # fast, and what they check differs from one Ray release to the next

@pytest.fixture(autouse=True)
def fresh_state(monkeypatch):
    """Each test starts as a new process would: nothing found lacking, no notes."""
    monkeypatch.setattr(raycompat, "_lacking", set())
    monkeypatch.setattr(raycompat, "_notes", [])


def record(name: str, temp_dir: str | None = None, state: int = raycompat.ALIVE):
    fields = dict(state=state, node_manager_address="10.0.0.2", node_name=name, resources_total={"CPU": 2.0})
    if temp_dir is not None:  # Ray 2.55+ records it
        fields["temp_dir"] = temp_dir
    return SimpleNamespace(**fields)


class NodeId(bytes):
    def hex(self) -> str:
        return "ab" * 4


class NewClient:
    """Ray 2.54+: asks the GCS for the node called name."""

    def __init__(self, records):
        self.records, self.calls = records, []

    def get_all_node_info(self, timeout=None, node_selectors=None, state_filter=None):
        self.calls.append(node_selectors)
        names = {s.node_name for s in node_selectors or []}
        return {NodeId(b"%d" % i): r for i, r in enumerate(self.records) if not names or r.node_name in names}


class OldClient:
    """Ray 2.52-2.53: the whole table only."""

    def __init__(self, records):
        self.records, self.calls = records, 0

    def get_all_node_info(self, timeout=None, state_filter=None):
        self.calls += 1
        return {NodeId(b"%d" % i): r for i, r in enumerate(self.records)}


def test_a_new_client_is_asked_for_the_one_node_and_polled_fast():
    client = NewClient([record("h-rank0", "/t/r0/ray"), record("h-rank1", "/t/r1/ray")])
    (node,) = raycompat.alive_nodes(client, 1.0, "h-rank1")
    assert node == {"node_id": "abababab", "ip": "10.0.0.2", "name": "h-rank1", "temp_dir": "/t/r1/ray",
                    "resources": {"CPU": 2.0}}
    assert [s.node_name for s in client.calls[0]] == ["h-rank1"]
    assert raycompat.watch_interval(0.1) == 0.1
    assert raycompat.take_notes() == []


def test_an_old_client_reads_the_table_filters_it_here_says_so_once_and_is_polled_slower():
    client = OldClient([record("h-rank0"), record("h-rank1"), record("h-rank2", state=1)])
    for _ in range(3):
        assert [n["name"] for n in raycompat.alive_nodes(client, 1.0, "h-rank1")] == ["h-rank1"]
    assert raycompat.alive_nodes(client, 1.0, "h-rank2") == []  # DEAD
    assert client.calls == 4  # the keyword is tried once, then never again
    ((key, note),) = raycompat.take_notes()
    assert key == raycompat.NODE_SELECTORS and "cannot ask for one node" in note
    assert raycompat.take_notes() == []
    assert raycompat.watch_interval(0.1) == raycompat.SLOW_WATCH_INTERVAL


def test_another_type_error_is_not_taken_for_an_old_client():
    class Broken:
        def get_all_node_info(self, timeout=None, node_selectors=None):
            raise TypeError("an unrelated bug")

    with pytest.raises(TypeError, match="unrelated"):
        raycompat.alive_nodes(Broken(), 1.0, "h-rank1")
    assert raycompat.take_notes() == []


def test_a_node_is_found_by_name_alone_where_the_gcs_records_no_temp_dir(monkeypatch):
    gcs = Gcs("127.0.0.1:1")
    gcs._client = OldClient([record("h-rank0"), record("h-rank1")])
    assert gcs.find("h-rank1", "/t/r1/ray").temp_dir == ""
    gcs._client = NewClient([record("h-rank1", "/t/other/ray")])
    assert gcs.find("h-rank1", "/t/r1/ray") is None  # recorded, and not ours


def test_a_worker_on_a_ray_without_per_node_temp_dirs_is_pointed_at_its_own(monkeypatch):
    import ray._private.utils as utils
    from ray._private.ray_constants import KV_NAMESPACE_SESSION

    asked = []

    def head_kv(gcs_client, key, namespace, num_retries=20):
        asked.append(key)
        return b"/t/r0/ray" if key == "temp_dir" else b"session_2026"

    monkeypatch.setattr(utils, "internal_kv_get_with_retry", head_kv)  # restored after the test
    monkeypatch.setattr(raycompat, "per_node_temp_dirs", lambda: False)
    args = ["start", "--address=10.0.0.1:6379", "--temp-dir=/t/r1/ray", "--block"]
    assert raycompat.keep_worker_temp_dir(args, "/t/r1/ray") == ["start", "--address=10.0.0.1:6379", "--block"]
    read = utils.internal_kv_get_with_retry
    assert read(None, "temp_dir", KV_NAMESPACE_SESSION, num_retries=3) == b"/t/r1/ray"
    assert read(None, "session_name", KV_NAMESPACE_SESSION) == b"session_2026"
    assert asked == ["session_name"]  # the head's temp dir is never asked for
    ((key, note),) = raycompat.take_notes()
    assert key == raycompat.WORKER_TEMP_DIR and "ignores a worker's --temp-dir" in note


def test_a_head_or_a_ray_with_per_node_temp_dirs_keeps_its_args(monkeypatch):
    import ray._private.utils as utils

    original = utils.internal_kv_get_with_retry
    head = ["start", "--head", "--temp-dir=/t/r0/ray"]
    assert raycompat.keep_worker_temp_dir(head, "/t/r0/ray") == head
    monkeypatch.setattr(raycompat, "per_node_temp_dirs", lambda: True)
    worker = ["start", "--address=10.0.0.1:6379", "--temp-dir=/t/r1/ray"]
    assert raycompat.keep_worker_temp_dir(worker, "/t/r1/ray") == worker
    assert utils.internal_kv_get_with_retry is original
    assert raycompat.take_notes() == []


def test_the_installed_rays_capabilities_are_found_as_its_release_notes_say():
    """The checks look for a capability, not a version: here both are compared (2.52 and 2.60 in CI)."""
    import ray
    from ray._raylet import InnerGcsClient

    version = tuple(map(int, raycompat.ray_version().split(".")[:2]))
    assert raycompat.ray_version() == ray.__version__
    assert raycompat.MIN_VERSION <= version < (2, 61)
    assert raycompat.per_node_temp_dirs() == (version >= (2, 55))
    assert ("node_selectors" in InnerGcsClient.get_all_node_info.__doc__) == (version >= (2, 54))
    raycompat.check_stop_order()
    assert (raycompat.DRAIN_ON_STOP in dict(raycompat.take_notes())) == (version < (2, 57))
    assert raycompat.gcs_store() == (version >= (2, 60))


def test_the_gcs_keeps_its_tables_where_rays_node_knows_the_rocksdb_store():
    assert raycompat.gcs_store("    def _is_rocksdb_gcs(self):\n        return ...")
    assert not raycompat.gcs_store("    def _get_gcs_address(self):\n")


def test_the_rank_reads_the_notes_by_key_from_the_nodes_output(tmp_path):
    from mpiray.raynode.output import COMPAT, NodeOutput

    output = NodeOutput(tmp_path / "rank-0001.ray.log")
    output.feed(b"Ray says something\n" + COMPAT + b"drain_on_stop Ray 2.52.0 does not drain: the head stops last\n")
    output.feed(b"half a line from Ray, then " + COMPAT + b"temp_dir Ray 2.52.0 ignores a worker's --temp-dir\n")
    assert output.compat == {"drain_on_stop": "Ray 2.52.0 does not drain: the head stops last",
                             "temp_dir": "Ray 2.52.0 ignores a worker's --temp-dir"}


def test_a_dashboard_agent_that_takes_jobs_without_the_token_is_refused_with_auth():
    """Ray 2.52/2.53's full agent (ray[default]) serves job submission on every node without the token."""
    old = "app = aiohttp.web.Application()\n"  # http_server_agent.py of Ray 2.52: no auth middleware
    new = "from ray._private.authentication.http_token_authentication import get_token_auth_middleware\n"
    problem = raycompat.agent_http_problem(True, full_agent=True, agent_source=old)
    assert "serves job submission on every node without checking the token" in problem
    assert "Ray 2.54 or later" in problem and "--no-auth" in problem
    assert raycompat.agent_http_problem(True, full_agent=True, agent_source=new) is None
    assert raycompat.agent_http_problem(True, full_agent=False, agent_source=old) is None  # --minimal: no HTTP
    assert raycompat.agent_http_problem(False, full_agent=True, agent_source=old) is None  # --no-auth: said so
    # The installed Ray, as installed (2.60 with its extras, or 2.52 without), passes: else nothing would start.
    from mpiray.raynode import commands

    assert raycompat.agent_http_problem(True, full_agent=commands.metrics_agent_problem() is None) is None


def test_the_dashboard_checks_the_token_where_its_server_has_rays_token_middleware():
    assert raycompat.dashboard_checks_token("middlewares=[get_token_auth_middleware(aiohttp, paths)]")
    assert not raycompat.dashboard_checks_token("middlewares=[self.metrics_middleware]")
    assert raycompat.dashboard_checks_token()  # the installed Ray (>= 2.52 with token auth) has it
