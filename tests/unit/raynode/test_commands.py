"""`ray start` command lines as lists (mpiray/raynode/commands.py), the environment they get, the socket-path check."""

import dataclasses
import json
import re
from pathlib import Path

import pytest

from mpiray.host import portblocks
from mpiray.host.resources import Share
from mpiray.raynode import commands
from mpiray.raynode.commands import NodeSpec, head_command, node_env, socket_path_problem, worker_command

SHARE = Share(cpus=3, gpu_ids=("0", "1"), memory=8 * 2**30, object_store=2 * 2**30)
PORTS = portblocks.node_ports(20000, gcs_port=6380)
# What is installed decides two of the flags (the tests below cover both ways): set, not detected.
SPEC = NodeSpec("10.0.0.5", "/tmp/mpiray-0-abc-r0", SHARE, PORTS, "node1-rank0", full_agent=False, ray_client=False)


def test_head_command():
    argv = head_command(["ray"], SPEC, dashboard=False)
    assert argv[:4] == ["ray", "start", "--head", "--port=6380"]
    for flag in ["--block", "--node-ip-address=10.0.0.5", "--temp-dir=/tmp/mpiray-0-abc-r0",
                 "--num-cpus=3", "--num-gpus=2", f"--memory={8 * 2**30}",
                 f"--object-store-memory={2 * 2**30}", "--node-manager-port=20001",
                 "--min-worker-port=20008", "--max-worker-port=20099", "--no-monitor",
                 "--include-dashboard=false", "--disable-usage-stats"]:
        assert flag in argv
    assert not any("redis" in a for a in argv)


@pytest.mark.parametrize("dashboard", [True, False])
def test_dashboard_binds_to_loopback_and_a_port_of_the_block_even_when_off(dashboard):
    argv = head_command(["ray"], SPEC, dashboard=dashboard)
    assert f"--include-dashboard={str(dashboard).lower()}" in argv
    assert "--dashboard-host=127.0.0.1" in argv
    assert f"--dashboard-port={PORTS.dashboard}" in argv and "8265" not in " ".join(argv)


@pytest.mark.parametrize("auth, checks_token, listens", [
    (True, True, "10.0.0.7"),  # a login node submits to it; Ray asks every request for the token
    (False, True, "127.0.0.1"),  # --no-auth: nobody off the head's host
    (True, False, "127.0.0.1"),  # a Ray whose dashboard would serve anyone
])
def test_the_jobs_api_listens_on_the_heads_address_only_where_ray_asks_for_the_token(auth, checks_token, listens):
    assert commands.dashboard_host("10.0.0.7", auth, checks_token) == listens
    spec = dataclasses.replace(SPEC, dashboard_host=listens)
    assert f"--dashboard-host={listens}" in head_command(["ray"], spec, dashboard=True)


def test_worker_command_joins_the_head_and_has_no_head_only_flags():
    argv = worker_command(["ray"], SPEC, "10.0.0.1:6380")
    assert argv[:3] == ["ray", "start", "--address=10.0.0.1:6380"]
    assert "--block" in argv
    assert not any(a.startswith(("--head", "--port=", "--include-dashboard", "--no-monitor")) for a in argv)


def test_node_env_points_at_the_token_file_and_never_carries_the_token():
    env = node_env({"RAY_AUTH_TOKEN": "leaked", "RAY_ADDRESS": "x", "HOME": "/h"}, ("1",), "/tmp/t/auth_token")
    assert env["RAY_AUTH_MODE"] == "token"
    assert env["RAY_AUTH_TOKEN_PATH"] == "/tmp/t/auth_token"
    assert "RAY_AUTH_TOKEN" not in env and "RAY_ADDRESS" not in env
    assert env["CUDA_VISIBLE_DEVICES"] == "1"
    assert env["HOME"] == "/h"
    assert node_env({}, None, None)["RAY_AUTH_MODE"] == "disabled"
    assert "CUDA_VISIBLE_DEVICES" not in node_env({}, None, None)


def test_grpcs_fork_handlers_are_off_in_rays_processes_unless_the_user_set_them():
    assert node_env({}, None, None)["GRPC_ENABLE_FORK_SUPPORT"] == "0"
    assert node_env({"GRPC_ENABLE_FORK_SUPPORT": "1"}, None, None)["GRPC_ENABLE_FORK_SUPPORT"] == "1"


def test_ray_tune_and_train_lock_files_go_to_the_private_dir_unless_the_user_chose_a_place():
    assert node_env({}, None, None, private_tmp="/tmp/mpiray-0-r0-abc")["RAY_TMPDIR"] == "/tmp/mpiray-0-r0-abc"
    assert node_env({"RAY_TMPDIR": "/scratch/me"}, None, None, private_tmp="/tmp/p")["RAY_TMPDIR"] == "/scratch/me"
    assert "RAY_TMPDIR" not in node_env({}, None, None)


def test_socket_path_limit():
    assert commands.AF_UNIX_PATH_MAX == 107
    assert socket_path_problem("/tmp/mpiray-1234-abcdef-r12-xxxxxx/ray", "/tmp") is None
    long_root = "/scratch/" + "x" * 60
    problem = socket_path_problem(long_root + "/mpiray-1234-abcdef-r12-xxxxxx/ray", long_root)
    assert problem and "107-byte" in problem and "--temp-dir" in problem
    # The advice leaves room for mpiray's own part: a root of that length fits.
    fits = int(problem.split("at most ")[1].split()[0])
    assert socket_path_problem("/" + "y" * (fits - 1) + "/mpiray-1234-abcdef-r12-xxxxxx/ray", "/" + "y" * (fits - 1)) is None


# ---------------------------------------------------------------- Ray's metrics agent


def spec_with(full_agent: bool, ray_client: bool = False) -> NodeSpec:
    return NodeSpec("10.0.0.5", "/tmp/mpiray-0-abc-r0", SHARE, PORTS, "node1-rank0", full_agent=full_agent,
                    ray_client=ray_client)


@pytest.mark.parametrize("build", [lambda spec: head_command(["ray"], spec, dashboard=False),
                                   lambda spec: worker_command(["ray"], spec, "10.0.0.1:6380")])
def test_a_full_agent_serves_metrics_on_ports_of_the_block(build):
    argv = build(spec_with(full_agent=True))
    assert f"--dashboard-agent-grpc-port={PORTS.dashboard_agent_grpc}" in argv
    assert f"--metrics-export-port={PORTS.metrics_export}" in argv
    assert f"--dashboard-agent-listen-port={PORTS.dashboard_agent_listen}" in argv
    assert commands.METRICS_OFF not in argv


@pytest.mark.parametrize("build", [lambda spec: head_command(["ray"], spec, dashboard=False),
                                   lambda spec: worker_command(["ray"], spec, "10.0.0.1:6380")])
def test_a_minimal_agent_gets_no_metrics_ports_so_ray_never_dials_one(build):
    # Given a port, raylet and the GCS dial it although a --minimal agent serves nothing there, and
    # log "Failed to establish connection to the metrics exporter agent" after ~20 s.
    argv = build(spec_with(full_agent=False))
    assert not any(a.startswith(("--dashboard-agent-grpc-port", "--metrics-export-port")) for a in argv)
    assert f"--dashboard-agent-listen-port={PORTS.dashboard_agent_listen}" in argv


@pytest.mark.parametrize(("full_agent", "metrics", "off"), [(True, True, False), (True, False, True),
                                                            (False, True, True), (False, False, True)])
def test_the_head_turns_collection_off_for_the_cluster_when_nothing_exports(full_agent, metrics, off):
    argv = head_command(["ray"], spec_with(full_agent), dashboard=False, metrics=metrics)
    assert (commands.METRICS_OFF in argv) is off
    assert commands.METRICS_OFF not in worker_command(["ray"], spec_with(full_agent), "10.0.0.1:6380")
    # Full agent, metrics off: the agent still runs its gRPC server, so its port stays in the block.
    assert any(a.startswith("--dashboard-agent-grpc-port=") for a in argv) is full_agent


def test_metrics_agent_problem_names_what_is_missing(monkeypatch):
    monkeypatch.setattr(commands, "METRICS_AGENT_MODULES", ("json", "no_such_module_xyz", "no_such_pkg_xyz.sub"))
    problem = commands.metrics_agent_problem()
    assert problem and "ray[default]" in problem
    assert "no_such_module_xyz, no_such_pkg_xyz.sub" in problem and "json" not in problem
    monkeypatch.setattr(commands, "METRICS_AGENT_MODULES", ("json",))
    assert commands.metrics_agent_problem() is None
    assert NodeSpec("10.0.0.5", "/tmp/x", SHARE, PORTS, "n").full_agent is True


def test_the_metrics_agent_modules_are_rays_own_list():
    # ray.dashboard.optional_deps decides --minimal (ray._private.utils.get_dashboard_dependency_error).
    import ray.dashboard

    source = (Path(ray.dashboard.__file__).parent / "optional_deps.py").read_text()
    imported = set(re.findall(r"^import ([\w.]+)", source, re.MULTILINE))
    ours = commands.METRICS_AGENT_MODULES
    related = {m for m in imported if any(m == o or o.startswith(m + ".") or m.startswith(o + ".") for o in ours)}
    assert imported and related == imported, imported - related


def test_what_a_full_head_binds_besides_takes_the_top_of_its_worker_range():
    # With ray[default], `ray start --head` serves Ray Client on 10001 unless given a port (an error
    # without grpcio), and its dashboard process serves its own metrics on 44227: ports every job on
    # the host would share.
    head = head_command(["ray"], spec_with(full_agent=True, ray_client=True), dashboard=False)
    assert f"--ray-client-server-port={PORTS.max_worker}" in head
    assert f"--max-worker-port={PORTS.max_worker - 2}" in head
    assert commands.head_ports(spec_with(full_agent=True, ray_client=True)) == commands.HeadPorts(
        max_worker=PORTS.max_worker - 2, ray_client=PORTS.max_worker, dashboard_metrics=PORTS.max_worker - 1)
    assert node_env({}, None, None, dashboard_metrics_port=PORTS.max_worker - 1)["DASHBOARD_METRIC_PORT"] == str(
        PORTS.max_worker - 1)
    assert "DASHBOARD_METRIC_PORT" not in node_env({}, None, None)
    worker = worker_command(["ray"], spec_with(full_agent=True, ray_client=True), "10.0.0.1:6380")
    assert f"--max-worker-port={PORTS.max_worker}" in worker
    assert not any(a.startswith("--ray-client-server-port") for a in worker)
    minimal = spec_with(full_agent=False, ray_client=False)
    assert not any(a.startswith("--ray-client-server-port") for a in head_command(["ray"], minimal, dashboard=False))
    assert commands.head_ports(minimal) == commands.HeadPorts(PORTS.max_worker, None, None)


@pytest.mark.parametrize(("full_agent", "ray_client"), [(True, True), (True, False), (False, False)])
def test_every_port_of_the_head_is_its_own_and_in_the_block(full_agent, ray_client):
    argv = head_command(["ray"], spec_with(full_agent, ray_client), dashboard=True)
    values = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "port" in a.split("=")[0])
    single = [int(v) for k, v in values.items() if k not in ("port", "min-worker-port", "max-worker-port")]
    workers = range(int(values["min-worker-port"]), int(values["max-worker-port"]) + 1)
    dashboard_metrics = commands.head_ports(spec_with(full_agent, ray_client)).dashboard_metrics
    single += [dashboard_metrics] if dashboard_metrics else []
    assert len(set(single)) == len(single) and not set(single) & set(workers)
    block = range(PORTS.node_manager - 1, PORTS.max_worker + 1)
    assert all(port in block for port in single + list(workers))


def test_each_nodes_learners_are_told_the_interface_of_its_own_address_unless_the_user_chose():
    assert commands.collective_env({}, "eth0", False) == {"GLOO_SOCKET_IFNAME": "eth0", "TP_SOCKET_IFNAME": "eth0"}
    assert commands.collective_env({}, "ib0", True) == {"GLOO_SOCKET_IFNAME": "ib0", "TP_SOCKET_IFNAME": "ib0",
                                                        "NCCL_SOCKET_IFNAME": "ib0"}
    # By vendor: NCCL's variable for NVIDIA and AMD (RCCL reads it), oneCCL's for Intel.
    assert commands.collective_env({}, "hsn0", True, "amd")["NCCL_SOCKET_IFNAME"] == "hsn0"
    intel = commands.collective_env({}, "hsn0", True, "intel")
    assert intel["CCL_KVS_IFACE"] == "hsn0" and "NCCL_SOCKET_IFNAME" not in intel
    # What the user (or a site's module) set stays, for gloo and NCCL alike: an env var overrides /etc/nccl.conf.
    assert commands.collective_env({"GLOO_SOCKET_IFNAME": "hsn0", "NCCL_SOCKET_IFNAME": "=hsn0", "TP_SOCKET_IFNAME": "x"},
                                   "eth0", True) == {}
    assert commands.collective_env({}, None, True) == {}  # an address no interface holds (a NAT): nothing guessed


def test_every_node_offers_learner_slots_beside_the_users_own_resources():
    assert json.loads(commands.node_resources(None, 1)) == {"mpiray_learner_slot": 1}
    assert json.loads(commands.node_resources('{"accel": 2}', 4)) == {"accel": 2, "mpiray_learner_slot": 4}
    assert json.loads(commands.node_resources('{"mpiray_learner_slot": 0}', 4)) == {"mpiray_learner_slot": 0}
    assert json.loads(commands.node_resources(None, 0)) == {}  # --learner-slots 0: a hetjob's CPU component
    assert json.loads(commands.node_resources(None, 0, "rollout")) == {"mpiray_role_rollout": 1}


def test_every_node_starts_with_its_labels_in_rays_form():
    spec = dataclasses.replace(SPEC, labels="mpiray.io/rank=0,team=rl")
    assert "--labels=mpiray.io/rank=0,team=rl" in head_command(["ray"], spec, dashboard=False)
    assert "--labels=mpiray.io/rank=0,team=rl" in worker_command(["ray"], spec, "10.0.0.5:6379")
    assert not [arg for arg in worker_command(["ray"], SPEC, "10.0.0.5:6379") if arg.startswith("--labels")]
