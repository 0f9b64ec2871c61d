"""`ray start` command lines, built by pure functions (asserted as lists in the tests)."""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass, field
from typing import Sequence

from mpiray.host import gpus
from mpiray.host.portblocks import NodePorts
from mpiray.host.resources import Share
from mpiray.package import module_command

# Ray's longest socket path below a temp dir: session_<date>_<time>_<usec>_<pid>/sockets/plasma_store
SOCKET_SUFFIX = "/session_2026-11-22_03-06-42_431508_4194304/sockets/plasma_store"
AF_UNIX_PATH_MAX = 107

# Ray's per-node dashboard agent serves metrics (the gRPC server raylet and the GCS send them to, and
# the Prometheus endpoint) only when these import, ray.dashboard.optional_deps' list, i.e. ray[default];
# without them (`ray`, `ray[rllib]`) every node's agent runs --minimal and serves neither.
METRICS_AGENT_MODULES = (
    "aiohttp", "aiohttp_cors", "grpc", "opencensus", "opentelemetry.exporter.prometheus", "opentelemetry.proto",
    "prometheus_client", "pydantic",
)
METRICS_OFF = '--system-config={"enable_metrics_collection":false}'


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a missing parent package
        return False


def metrics_agent_problem() -> str | None:
    """Why Ray's agents on this host cannot export metrics (None: they can): ray[default] is missing."""
    missing = [module for module in METRICS_AGENT_MODULES if not _importable(module)]
    if not missing:
        return None
    return (
        f"Ray's metrics agent needs ray[default] (missing here: {', '.join(missing)}); "
        f"pip install 'ray[default]' to export metrics"
    )


def ray_command(niced_import: bool = False) -> list[str]:
    """How a rank runs `ray ...`: through starter.py, which holds `ray start` until released."""
    return module_command("mpiray.raynode.starter") + (["--niced-import"] if niced_import else [])


LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class NodeSpec:
    """Everything one `ray start` needs to know."""

    node_ip: str
    temp_dir: str
    share: Share
    ports: NodePorts
    node_name: str
    resources: str = ""  # custom resources, as JSON ({"NODE_ID_AS_RESOURCE": 7}): --resources
    autoscaling_config: str = ""  # the head's: Ray's autoscaler runs with this config (autoscale.py)
    spill_dir: str = ""  # --object-spilling-directory: the same on every node of the job (spill.py)
    labels: str = ""  # --labels: mpiray's and the user's (labels.py), Ray's k=v,k=v form
    # Ray's own labels (ray.io/market-type, ray.io/gpu-domain: labels.ray_labels), in Ray's k=v,k=v form: `ray
    # start --labels` refuses the prefix, so they go the way a platform sets them (RAY_OVERRIDE_LABELS)
    ray_labels: str = ""
    dashboard_host: str = LOOPBACK  # a head's: where its dashboard (and Jobs API) listens (dashboard_host())
    # Whether this node's dashboard agent runs in full (ray[default] installed), not --minimal.
    full_agent: bool = field(default_factory=lambda: metrics_agent_problem() is None)
    # Whether a head here serves Ray Client (ray://): Ray starts it whenever grpcio imports (ray[default]).
    ray_client: bool = field(default_factory=lambda: _importable("grpc"))


@dataclass(frozen=True)
class HeadPorts:
    """What a head binds beyond NodePorts' slots when ray[default] is installed, from the top of its worker
    range: Ray's defaults (Ray Client 10001, the dashboard's own metrics 44227) are shared by every job on a host.
    """

    max_worker: int
    ray_client: int | None  # `ray start --head` serves Ray Client (ray://) whenever grpcio imports
    dashboard_metrics: int | None  # a full dashboard process serves its own metrics (DASHBOARD_METRIC_PORT)
    autoscaler_metrics: int | None = None  # Ray's autoscaler serves its metrics (AUTOSCALER_METRIC_PORT, 44217)


def head_ports(spec: NodeSpec) -> HeadPorts:
    top = spec.ports.max_worker
    ray_client = top if spec.ray_client else None
    top -= ray_client is not None
    dashboard_metrics = top if spec.full_agent else None
    top -= dashboard_metrics is not None
    autoscaler_metrics = top if spec.autoscaling_config else None
    top -= autoscaler_metrics is not None
    return HeadPorts(top, ray_client, dashboard_metrics, autoscaler_metrics)


def _common(spec: NodeSpec, max_worker: int) -> list[str]:
    ports = spec.ports
    argv = [
        "--block",  # stays our child: never daemonized away from the rank that stops it
        "--disable-usage-stats",
        f"--node-ip-address={spec.node_ip}",
        f"--node-name={spec.node_name}",
        f"--temp-dir={spec.temp_dir}",
        f"--num-cpus={spec.share.cpus}",
        f"--num-gpus={len(spec.share.gpu_ids)}",
        f"--memory={spec.share.memory}",
        f"--object-store-memory={spec.share.object_store}",
        f"--node-manager-port={ports.node_manager}",
        f"--object-manager-port={ports.object_manager}",
        f"--min-worker-port={ports.min_worker}",
        f"--max-worker-port={max_worker}",
        f"--dashboard-agent-listen-port={ports.dashboard_agent_listen}",
        f"--runtime-env-agent-port={ports.runtime_env_agent}",
        # starter.py starts the log monitor once the node is ALIVE: off the start's critical path.
        "--include-log-monitor=false",
    ]
    if spec.resources:
        argv.append(f"--resources={spec.resources}")
    if spec.spill_dir:
        argv.append(f"--object-spilling-directory={spec.spill_dir}")
    if spec.labels:
        argv.append(f"--labels={spec.labels}")
    if spec.full_agent:
        # The agent's gRPC server (raylet and the GCS send it metrics) and its Prometheus endpoint.
        argv += [f"--dashboard-agent-grpc-port={ports.dashboard_agent_grpc}",
                 f"--metrics-export-port={ports.metrics_export}"]
    # A --minimal agent serves neither and writes -1 to its port files, which Ray reads when these ports
    # are 0 and then does not try; a port given here, raylet and the GCS dial anyway and log an ERROR.
    return argv



def head_command(ray: Sequence[str], spec: NodeSpec, *, dashboard: bool, metrics: bool = True) -> list[str]:
    """The head's `ray start`; metrics: each node exports Ray's metrics on ports.metrics_export (needs full_agent);
    the dashboard (and Jobs API), on or off, listens on spec.dashboard_host."""
    ports, extra = spec.ports, head_ports(spec)
    argv = [*ray, "start", "--head", f"--port={ports.gcs}", *_common(spec, extra.max_worker)]
    if extra.ray_client:  # given without grpcio, a port is an error
        argv.append(f"--ray-client-server-port={extra.ray_client}")
    if spec.autoscaling_config:  # Ray's autoscaler grows and shrinks it through worker jobs (provider.py)
        argv.append(f"--autoscaling-config={spec.autoscaling_config}")
    else:  # a batch cluster of a fixed set of nodes: the autoscaler monitor would only cost a process
        argv.append("--no-monitor")
    if not (metrics and spec.full_agent):
        # Nothing collects what is not exported: every node's raylet, workers and agent (given
        # --disable-metrics-collection) take this from the head's config.
        argv.append(METRICS_OFF)
    # The dashboard's port is in the job's block even when it is off: Ray's default (8265) is shared
    # by every job on the host.
    argv += [f"--include-dashboard={'true' if dashboard else 'false'}", f"--dashboard-host={spec.dashboard_host}",
             f"--dashboard-port={ports.dashboard}"]
    return argv


def dashboard_host(node_ip: str, auth: bool, checks_token: bool) -> str:
    """Where the head's dashboard, and so Ray's Jobs API, listens: on the head's address (the job's interface)
    where Ray asks every request for the cluster's token, so a login node can submit; elsewhere (--no-auth,
    or a Ray whose dashboard does not check it) on 127.0.0.1 of the head's host alone, reached by a tunnel.
    checks_token: raycompat.dashboard_checks_token() of the Ray that runs the head."""
    return node_ip if auth and checks_token else LOOPBACK


def worker_command(ray: Sequence[str], spec: NodeSpec, gcs_address: str) -> list[str]:
    return [*ray, "start", f"--address={gcs_address}", *_common(spec, spec.ports.max_worker)]


# gRPC's C core, as grpcio's Linux wheels build it, arms fork handlers unless this says 0. A process full of
# gRPC threads that forks to run a program (Ray's Ray Client proxy, one server per client; any Ray process or
# task that runs a subprocess) then loses the child now and then before its exec: the handlers skip while
# other threads are in gRPC, the child closes its inherited fds, gRPC's poller in it aborts (rc -11 or -6,
# empty logs). A Ray Client driver then fails "Starting Ray client server failed" (ray-project/ray#63202,
# open in Ray 2.60): here 9 of 100 drivers, 4 at a time, by hand, 0 of 100 under mpiray (Fisher's exact test
# p = 0.003, docs/reports/client_connect_report.md); the first driver of a fresh cluster more often (2 of 6 runs of
# tests/real/local/test_attach.py before, 0 of 12 after). Off, the child just execs; gRPC's Python layer supports no use
# of gRPC in a forked child either way.
GRPC_FORK_SUPPORT = "GRPC_ENABLE_FORK_SUPPORT"


def gpu_env(vendor: str, ids: tuple[str, ...], intel_variable: str = "ZE_AFFINITY_MASK") -> dict[str, str | None]:
    """The visible-device variables a Ray node of vendor's GPUs ids is handed: name -> value, or None to remove.

    Two layers, as each vendor's runtime has them: the runtime's mask narrowed to this node's ids
    (ROCR_VISIBLE_DEVICES, ZE_AFFINITY_MASK: physical ids, as the scheduler named them), and the variable
    the installed Ray reads and sets per GPU task (ray/_private/accelerators/), listing the node's GPUs as
    Ray will hand them out. Every other vendor's variable goes: Ray 2.52-2.60 raise on an AMD node where
    ROCR_VISIBLE_DEVICES is set without HIP_VISIBLE_DEVICES; HIP also obeys CUDA_VISIBLE_DEVICES and
    GPU_DEVICE_ORDINAL, which would index past the narrowed mask (0 GPUs).
    intel_variable: raycompat.intel_visible_variable(), what the installed Ray reads for Intel GPUs.
    """
    env: dict[str, str | None] = dict.fromkeys(gpus.VISIBLE_VARIABLES)
    listed = ",".join(ids)
    positions = ",".join(str(i) for i in range(len(ids)))
    if vendor == gpus.AMD:  # Ray reads HIP_VISIBLE_DEVICES: positions within the mask
        env.update(ROCR_VISIBLE_DEVICES=listed or None, HIP_VISIBLE_DEVICES=positions)
    elif vendor == gpus.INTEL and intel_variable == "ZE_AFFINITY_MASK":  # Ray 2.60 reads and sets the mask itself
        env.update(ZE_AFFINITY_MASK=listed)
    elif vendor == gpus.INTEL:  # Ray 2.52 reads ONEAPI_DEVICE_SELECTOR, which selects among what the mask left
        env.update(ZE_AFFINITY_MASK=listed or None, ONEAPI_DEVICE_SELECTOR=f"level_zero:{positions}" if ids else "")
    else:  # NVIDIA, or no GPU: CUDA_VISIBLE_DEVICES="" keeps a node of 0 GPUs from every device
        env.update(CUDA_VISIBLE_DEVICES=listed)
    return env


def node_env(
    environ: dict[str, str], gpu_ids: tuple[str, ...] | None, token_path: str | None,
    dashboard_metrics_port: int | None = None, *, private_tmp: str | None = None,
    gpu_variables: dict[str, str | None] | None = None,
) -> dict[str, str]:
    """The environment of a `ray start` child, or of the driver (gpu_ids None: GPUs untouched).

    gpu_variables: gpu_env()'s, for a node (default: NVIDIA's for gpu_ids).

    dashboard_metrics_port: the head's head_ports(spec).dashboard_metrics (Ray reads it from the environment).
    private_tmp: the rank's private dir, as RAY_TMPDIR (unless the user set one): Ray Tune and Train take
    their file locks in RAY_TMPDIR/_ray_lockfiles, else in /tmp/_ray_lockfiles, where another user can
    make the directory first (every lock then fails) or hold a lock (a checkpoint waits forever).
    gRPC's fork handlers are off (GRPC_FORK_SUPPORT), unless the user said otherwise.
    """
    env = dict(environ)
    if private_tmp:
        env.setdefault("RAY_TMPDIR", private_tmp)
    env.setdefault(GRPC_FORK_SUPPORT, "0")
    if dashboard_metrics_port:
        env["DASHBOARD_METRIC_PORT"] = str(dashboard_metrics_port)
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    if gpu_ids is not None:
        for name, value in (gpu_variables or gpu_env(gpus.NVIDIA, gpu_ids)).items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
    if token_path:
        env["RAY_AUTH_MODE"] = "token"
        env["RAY_AUTH_TOKEN_PATH"] = token_path
    else:
        env["RAY_AUTH_MODE"] = "disabled"
    env.pop("RAY_AUTH_TOKEN", None)  # the token file is the only source
    env.pop("RAY_ADDRESS", None)
    return env


# The custom resource that says how many RLlib learners a node may hold: the trainer's learners take one each
# (custom_resources_per_learner), so N learners land on N slots, spread over the nodes that offer them.
LEARNER_SLOT = "mpiray_learner_slot"


# The custom resource of a node's role (--role), one per node: RLlib places its learners and env runners by custom
# resources, not label selectors, so each asks ROLE_SHARE of its pool's (train --learners-on, --env-runners-on).
ROLE_RESOURCE = "mpiray_role_"
ROLE_SHARE = 0.001  # 1000 actors per node; Ray keeps resources to 0.0001


def role_resource(role: str) -> str:
    """The custom resource the nodes of role offer."""
    return ROLE_RESOURCE + role


def node_resources(user_resources: str | None, learner_slots: int, role: str | None = None) -> str:
    """--resources for a node: the user's custom resources (JSON), its learner slots and its role's resource (theirs
    kept, if named)."""
    resources = json.loads(user_resources or "{}")
    if learner_slots:  # none: no learner lands here (Ray lists no resource of amount 0)
        resources.setdefault(LEARNER_SLOT, learner_slots)
    if role:
        resources.setdefault(role_resource(role), 1)
    return json.dumps(resources, sort_keys=True)


# The collectives' network (torch.distributed: RLlib's learners, Ray Train). Unset, gloo binds whatever the
# hostname resolves to (often 127.0.x.x: a group across hosts then fails "connectFullMesh ... Connection
# refused"; on real sites the management ethernet, not ib0/hsn0); NCCL (and AMD's RCCL, which reads NCCL's
# variables) prefers ib*, then anything but lo; oneCCL's key-value store picks an interface of its own.
# Ray sets none of them; a value in a node's `ray start` environment reaches every worker (learner) of the node.
# Each library's variable, and whether it is set on every node (True) or only where the network was chosen
# (--interface, --address-rule, a site's row): unchosen, NCCL's own pick (InfiniBand first) beats the
# route's interface, which may be the management ethernet.
COLLECTIVES = (
    ("GLOO_SOCKET_IFNAME", True, ()),  # gloo: torch.distributed's CPU backend
    ("TP_SOCKET_IFNAME", True, ()),  # tensorpipe: torch.distributed.rpc
    ("NCCL_SOCKET_IFNAME", False, (gpus.NVIDIA, gpus.AMD, gpus.NONE)),  # NCCL and RCCL's bootstrap and sockets
    ("CCL_KVS_IFACE", False, (gpus.INTEL,)),  # oneCCL's key-value store (Intel GPUs)
)
COLLECTIVE_VARIABLES = tuple(name for name, _, _ in COLLECTIVES)


def collective_env(environ: dict[str, str], node_interface: str | None, chosen: bool,
                   vendor: str = gpus.NONE) -> dict[str, str]:
    """What a node's `ray start` environment adds for its learners' collectives: each library's interface
    variable = the interface that holds the address the node advertises (its own name on each host); the
    GPU libraries' (by vendor) only where the network was chosen; never a variable the user set (a site's
    module sets NCCL's, and an environment variable overrides /etc/nccl.conf). Nothing else of NCCL or
    libfabric is touched."""
    if not node_interface:  # an address no interface holds (a NAT): nothing guessed
        return {}
    return {name: node_interface for name, always, vendors in COLLECTIVES
            if (always or (chosen and vendor in vendors)) and not environ.get(name)}


def socket_path_problem(ray_dir: str, temp_root: str) -> str | None:
    """Why Ray's Unix sockets under ray_dir (made below temp_root) would exceed the 107-byte AF_UNIX limit."""
    longest = len(os.fsencode(ray_dir)) + len(SOCKET_SUFFIX)
    if longest <= AF_UNIX_PATH_MAX:
        return None
    ours = len(os.fsencode(ray_dir)) - len(os.fsencode(temp_root))
    return (
        f"Ray's socket paths under {ray_dir} would be {longest} bytes, over the {AF_UNIX_PATH_MAX}-byte "
        f"AF_UNIX limit: give a shorter --temp-dir (or TMPDIR), at most "
        f"{AF_UNIX_PATH_MAX - len(SOCKET_SUFFIX) - ours} characters, e.g. /tmp"
    )
