"""A node's plan (mpiray/rank/nodeplan.py) as lists: its `ray start` line, environment and container binds, from
named values alone (no host, no Ray, no MPI)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mpiray.config import Config
from mpiray.host import gpus
from mpiray.host.portblocks import node_ports
from mpiray.host.resources import Share
from mpiray.rank import nodeplan
from mpiray.rank.knock import KNOCK_EVERY, SILENT_FOR
from mpiray.rank.messages import Session
from mpiray.raynode import commands
from mpiray.raynode import container as containers

SESSION = Session(job_id="4711", head_ip="10.1.0.1", gcs_address="10.1.0.1:23700", token="t", started=0.0)
WHERE = nodeplan.Where("node7", 3, partition="gpu", switch="sw2")
SHARE = Share(cpus=8, gpu_ids=("0", "1"), memory=8 << 30, object_store=2 << 30, gpu_vendor=gpus.NVIDIA)
PORTS = node_ports(23700, units=2)


def planned(config: Config = Config(), head: bool = False, **values) -> nodeplan.Plan:
    return nodeplan.plan(config, SESSION, WHERE, SHARE, ports=PORTS, head=head, node_ip="10.1.0.7",
                         ray_dir=Path("/tmp/x/ray"), **values)


def flag(argv: list[str], name: str) -> str:
    (value,) = [arg.partition("=")[2] for arg in argv if arg.startswith(name + "=")]
    return value


def test_a_workers_line_joins_the_head_with_its_address_labels_and_slots():
    argv = planned().argv
    ray = commands.ray_command(niced_import=True)
    assert argv[:len(ray) + 1] == [*ray, "start"]
    assert flag(argv, "--address") == "10.1.0.1:23700" and "--head" not in argv
    assert flag(argv, "--node-ip-address") == "10.1.0.7"
    assert flag(argv, "--num-cpus") == "8" and flag(argv, "--num-gpus") == "2"
    assert '"mpiray_learner_slot": 2' in flag(argv, "--resources")  # a learner slot per GPU
    assert '"mpiray_role_main": 1' in flag(argv, "--resources")  # its role's pool, for RLlib's actors
    labels = dict(pair.split("=") for pair in flag(argv, "--labels").split(","))
    assert {labels[f"mpiray.io/{key}"] for key in ("job", "host", "rank", "role", "partition", "switch")} == {
        "4711", "node7", "3", "main", "gpu", "sw2"}


def test_the_heads_line_listens_where_the_token_lets_it():
    guarded = planned(head=True, dashboard_checks_token=True).spec
    assert guarded.dashboard_host == commands.dashboard_host("10.1.0.7", True, True)
    unguarded = planned(head=True, dashboard_checks_token=False).spec
    assert unguarded.dashboard_host == commands.LOOPBACK
    argv = planned(head=True).argv
    assert "--head" in argv and flag(argv, "--port") == str(PORTS.gcs) and "--niced-import" not in argv


def test_in_an_image_the_images_python_runs_the_starter_and_its_ray_decides():
    config = Config(container="podman:localhost/ray:2.60")
    image = containers.ImageFacts(python="3.11.7", ray="2.60.0", full_agent=False, ray_client=False,
                                  dashboard_checks_token=True)
    result = planned(config, head=True, image=image, dashboard_checks_token=False)
    assert result.argv[:4] == [containers.of(config).python, "-m", "mpiray.raynode.starter", "start"]
    assert result.spec.full_agent is False and result.spec.ray_client is False
    assert result.spec.dashboard_host != commands.LOOPBACK  # the image's Ray checks the token, not the host's


def test_a_nodes_environment_names_its_gpus_token_and_waits_as_long_as_the_startup_timeout():
    spec = planned().spec
    env = nodeplan.node_env(Config(startup_timeout=300), spec, head=False, base={"HOME": "/h", "NCCL_SOCKET_IFNAME": "ib9"},
                            token_path="/p/auth_token", private_tmp="/p", interface="hsn0",
                            gpu_variables=nodeplan.node_gpu_variables(SHARE))
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1" and env["RAY_AUTH_TOKEN_PATH"] == "/p/auth_token"
    assert env["RAY_NUM_REDIS_GET_RETRIES"] == "151"  # a ~2 s retry each, for 300 s
    assert env["GLOO_SOCKET_IFNAME"] == "hsn0" and env["NCCL_SOCKET_IFNAME"] == "ib9"  # the user's stays
    assert "AUTOSCALER_UPDATE_INTERVAL_S" not in env
    # Ray's own labels, as a platform sets them (`ray start --labels` refuses the prefix): a GPU node's domain.
    assert json.loads(env["RAY_OVERRIDE_LABELS"]) == {"ray.io/gpu-domain": "node7", "ray.io/market-type": "on-demand"}


def test_a_role_per_rank_range_and_the_market_type_reach_the_nodes_labels_and_resources():
    plan = planned(Config(role="trainer=0-2,rollout=3-", market_type="spot"))
    labels = dict(pair.split("=") for pair in flag(plan.argv, "--labels").split(","))
    assert labels["mpiray.io/role"] == "rollout" and '"mpiray_role_rollout": 1' in flag(plan.argv, "--resources")
    assert plan.spec.ray_labels == "ray.io/gpu-domain=node7,ray.io/market-type=spot"
    env = nodeplan.node_env(Config(), plan.spec, head=False, base={"RAY_OVERRIDE_LABELS": '{"ray.io/gpu-domain": "x"}'},
                            token_path=None, private_tmp="/p", interface=None, gpu_variables={})
    assert json.loads(env["RAY_OVERRIDE_LABELS"]) == {"ray.io/gpu-domain": "x", "ray.io/market-type": "spot"}  # theirs


def test_an_autoscaling_head_looks_at_the_demand_every_second():
    spec = planned(head=True, autoscaling_config="/p/autoscale.yaml").spec
    env = nodeplan.node_env(Config(), spec, head=True, base={}, token_path=None, private_tmp="/p", interface=None,
                            gpu_variables={})
    assert env["AUTOSCALER_UPDATE_INTERVAL_S"] == str(nodeplan.AUTOSCALER_UPDATE_S)
    assert int(env["AUTOSCALER_METRIC_PORT"]) in range(PORTS.min_worker, PORTS.max_worker + 1)


def test_the_heads_gcs_keeps_its_tables_in_its_private_dir_and_no_worker_restarts_one():
    head = nodeplan.node_env(Config(), planned(head=True).spec, head=True, base={"MPIRAY_NODE_GCS_RESTARTS": "9"},
                             token_path=None, private_tmp="/p", interface=None, gpu_variables={}, gcs_restarts=3)
    assert (head["RAY_gcs_storage"], head["RAY_gcs_storage_path"]) == ("rocksdb", "/p/gcs-store")
    assert head["MPIRAY_NODE_GCS_RESTARTS"] == "3"
    for env in (nodeplan.node_env(Config(), planned().spec, head=False, base={"MPIRAY_NODE_GCS_RESTARTS": "9"},
                                  token_path=None, private_tmp="/p", interface=None, gpu_variables={}, gcs_restarts=3),
                nodeplan.node_env(Config(), planned(head=True).spec, head=True, base={"MPIRAY_NODE_GCS_RESTARTS": "9"},
                                  token_path=None, private_tmp="/p", interface=None, gpu_variables={}, gcs_restarts=0)):
        assert env["MPIRAY_NODE_GCS_RESTARTS"] == "0" and "RAY_gcs_storage" not in env  # never an inherited count


@pytest.mark.parametrize("wanted, image_ray, store_here, restarts, words", [
    (3, None, True, 3, "gcs restarts 3: its tables in RocksDB on the head's node-local disk"),
    (3, None, False, 0, "gcs restarts off: Ray here keeps no GCS store (2.60 and later do)"),
    (0, None, True, 0, "gcs restarts off (--gcs-restarts 0)"),
    (2, "2.60.0", False, 2, "gcs restarts 2"),  # the image's Ray decides, not the host's
    (2, "2.52.0", True, 0, "gcs restarts off: Ray 2.52.0 keeps no GCS store"),
])
def test_the_gcs_restarts_where_the_heads_ray_keeps_its_tables(wanted, image_ray, store_here, restarts, words):
    got, said = nodeplan.gcs_restarts(wanted, image_ray, store_here)
    assert got == restarts and said.startswith(words), said


def test_a_container_binds_the_private_dir_logs_results_spill_dir_and_code_read_only():
    binds = nodeplan.image_binds(Path("/p"), Path("/s/spill"), Path("/work/logs/4711"),
                                 {"mpiray": Path("/src/mpiray"), "train": Path("/src/train")})
    assert [bind.spec for bind in binds] == [
        "/p:/p", "/work/logs:/work/logs", "/work/results:/work/results", "/s/spill:/s/spill",
        f"/src/mpiray:/p/{containers.CODE_DIR}/mpiray:ro", f"/src/train:/p/{containers.CODE_DIR}/train:ro"]


def test_the_driver_sees_every_gpu_rank_0_found_or_none_of_its_variables():
    from mpiray.host.resources import HostView

    found = HostView("h", (0, 1), 1 << 30, 1 << 30, gpu_ids=("0", "1"), gpu_vendor=gpus.NVIDIA)
    assert ("CUDA_VISIBLE_DEVICES", "0,1") in nodeplan.driver_gpu_variables(found)
    none = HostView("h", (0, 1), 1 << 30, 1 << 30)
    assert nodeplan.driver_gpu_variables(none) == ()


def test_the_heads_gcs_takes_a_silent_node_for_dead_as_soon_as_rank_0_does_unless_the_user_said_otherwise():
    # Ray's own checks took ~65 s for a host powered off (a learner waited in gloo all along); these ~12 s.
    head = nodeplan.node_env(Config(), planned(head=True).spec, head=True, base={"RAY_health_check_timeout_ms": "9000"},
                             token_path=None, private_tmp="/p", interface=None, gpu_variables={})
    period, timeout, threshold = (int(head[f"RAY_health_check_{name}"])
                                  for name in ("period_ms", "timeout_ms", "failure_threshold"))
    assert timeout == 9000  # the user's
    assert (period + 2000) * threshold <= 1000 * (SILENT_FOR + KNOCK_EVERY)
    worker = nodeplan.node_env(Config(), planned().spec, head=False, base={}, token_path=None, private_tmp="/p",
                               interface=None, gpu_variables={})
    assert not [name for name in worker if name.startswith("RAY_health_check")]  # only the GCS checks
