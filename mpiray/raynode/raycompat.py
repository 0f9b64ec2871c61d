"""Ray internals mpiray relies on beyond Ray's public API, in one place (a new Ray release breaks this file).

Supported: Ray 2.52 (the first with token auth) through 2.60. What an older release lacks is found by
looking for it (a keyword, a protobuf field), not by its version number, and where that changes what
mpiray does, a note says so once (take_notes(): starter.py prints them, the rank logs them):
- 2.52-2.54: a worker's `ray start --temp-dir` is ignored (the head's temp dir is read from the GCS);
  mpiray answers that read with the rank's own dir (keep_worker_temp_dir).
- 2.52-2.54: the GCS's node records have no temp_dir; a node is found by its (unique) name alone.
- 2.52-2.53: the GCS client cannot ask for one node by name; the whole table is asked for and filtered here.
- 2.52-2.53: Ray's log monitor takes no node address (it finds the node's address itself).
- 2.52-2.59: no RocksDB store for the GCS's tables (gcs_store): a GCS that dies ends the job.
- 2.52-2.56: `ray start` does not drain its node on SIGTERM, and a worker's raylet stopped after the
  head waits for the gone GCS (SIGKILL 5 s later): rank 0 then stops the head after the workers.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import sys
from pathlib import Path

MIN_VERSION = (2, 52)  # the first Ray with token auth (RAY_AUTH_MODE=token)
ALIVE = 0  # GcsNodeState.ALIVE
SLOW_WATCH_INTERVAL = 0.5  # seconds between GCS queries that each read the whole node table

# What this process's Ray was found to lack (keys below), each said once: (key, note) for take_notes.
_notes: list[tuple[str, str]] = []
_lacking: set[str] = set()
NODE_SELECTORS = "node_selectors"  # the GCS client asks for one node by name
WORKER_TEMP_DIR = "temp_dir"  # a worker's --temp-dir is honoured and recorded in the GCS
DRAIN_ON_STOP = "drain_on_stop"  # `ray start` drains its node on SIGTERM: any stop order works


@functools.cache
def ray_version() -> str:
    """The installed Ray's version, without importing Ray (seconds) or importlib.metadata (~40 ms a rank)."""
    spec = importlib.util.find_spec("ray")
    if spec is None or spec.origin is None:
        return "not installed"
    try:
        found = re.search(r'^version = "([^"]+)"', Path(spec.origin).with_name("_version.py").read_text(), re.M)
    except OSError:
        found = None
    if found is not None:
        return found.group(1)
    from importlib.metadata import version

    return version("ray")


def version_problem(version: str, auth: bool) -> str | None:
    """Why this Ray cannot run a cluster with token auth (None: it can, or auth is off)."""
    numbers = re.match(r"(\d+)\.(\d+)", version)
    if not auth or numbers is None or tuple(map(int, numbers.groups())) >= MIN_VERSION:
        return None
    return (f"Ray {version} has no token authentication (Ray 2.52 and later do): its cluster would let anyone "
            f"who reaches its ports join and run code; pip install 'ray[default]>=2.52', or pass --no-auth")


def agent_http_problem(auth: bool, full_agent: bool, agent_source: str | None = None) -> str | None:
    """Why this Ray's full dashboard agent (ray[default]) would let anyone who reaches a node run code
    (None: it would not). Every node's agent serves an HTTP API, job submission included, on the
    node's address; it checks the cluster's token only since Ray 2.54. A --minimal agent (Ray without
    its [default] extras) serves no HTTP at all.

    agent_source: the text of ray/dashboard/http_server_agent.py (read from the installed Ray).
    """
    if not (auth and full_agent):
        return None
    if agent_source is None:
        spec = importlib.util.find_spec("ray")  # does not import Ray
        if spec is None or spec.origin is None:
            return None
        try:
            agent_source = Path(spec.origin).parent.joinpath("dashboard", "http_server_agent.py").read_text()
        except (AttributeError, OSError, TypeError):
            return None  # no such server in this Ray
    if "get_token_auth_middleware" in agent_source:
        return None
    return (f"Ray {ray_version()}'s dashboard agent (it runs in full with ray[default]) serves job submission "
            f"on every node without checking the token, so anyone who reaches a node could run code as you: "
            f"use Ray 2.54 or later, or Ray without its extras (pip install 'ray=={ray_version()}', no metrics "
            f"then), or pass --no-auth")


def ray_source(*parts: str) -> str | None:
    """The text of one of the installed Ray's files (parts: its path inside the package), without importing Ray;
    None where no Ray is here to read."""
    spec = importlib.util.find_spec("ray")
    try:
        return Path(spec.origin).parent.joinpath(*parts).read_text()  # type: ignore[union-attr, arg-type]
    except (AttributeError, OSError, TypeError):
        return None


@functools.cache
def dashboard_checks_token(source: str | None = None) -> bool:
    """Whether the installed Ray's dashboard (the head's HTTP server: Jobs API, state API) asks every request
    for the cluster's token; False where it would serve anyone (or no Ray is here to tell).

    source: the text of ray/dashboard/http_server_head.py (read from the installed Ray)."""
    source = ray_source("dashboard", "http_server_head.py") if source is None else source
    return source is not None and "get_token_auth_middleware" in source


@functools.cache
def gcs_store(source: str | None = None) -> bool:
    """Whether the installed Ray can keep the GCS's tables in RocksDB (RAY_gcs_storage=rocksdb: Ray 2.60), so that
    a GCS started again finds them (raynode/gcsrestart.py). Read from Ray's files, not its version.

    source: the text of ray/_private/node.py (read from the installed Ray)."""
    source = ray_source("_private", "node.py") if source is None else source
    return source is not None and "def _is_rocksdb_gcs" in source


@functools.cache
def intel_visible_variable(source: str | None = None) -> str:
    """The variable the installed Ray reads an Intel GPU node's visible devices from: ZE_AFFINITY_MASK (Ray
    2.60, ray-project/ray PR#64440), or ONEAPI_DEVICE_SELECTOR (Ray 2.52). Read from Ray's files, not its version.

    source: the text of ray/_private/accelerators/intel_gpu.py (read from the installed Ray)."""
    source = ray_source("_private", "accelerators", "intel_gpu.py") if source is None else source
    if source is None:
        return "ZE_AFFINITY_MASK"  # no Ray here (a dry run's planning host): the current release's
    reads = re.search(r"def get_visible_accelerator_ids_env_var\(\).*?return (\w+)", source, re.S)
    return "ZE_AFFINITY_MASK" if reads and reads.group(1).startswith("ZE_AFFINITY_MASK") else "ONEAPI_DEVICE_SELECTOR"


def reload_auth_settings() -> None:
    """Have this process's Ray read RAY_AUTH_MODE/RAY_AUTH_TOKEN_PATH again.

    Ray's C++ config reads them when ray is imported; a script that imported ray before mpiray set
    them would call its own cluster without the token. Ray's own _enable_token_auth does the same.
    """
    if "ray._raylet" in sys.modules:
        from ray._raylet import Config  # type: ignore[attr-defined]  # Ray's _raylet.pyi names a part of it

        Config.initialize("")


def take_notes() -> list[tuple[str, str]]:
    """(key, note) for what this process's Ray lacks, found since the last call."""
    notes = _notes[:]
    del _notes[: len(notes)]
    return notes


def _lacks(capability: str, note: str) -> None:
    if capability not in _lacking:
        _lacking.add(capability)
        _notes.append((capability, note))


# ---- the GCS's node table (starter.py, inside `ray start`) ------------------------------------


def gcs_client(address: str):
    from ray._raylet import GcsClient  # type: ignore[attr-defined]

    return GcsClient(address=address)


def alive_nodes(client, timeout: float, name: str | None = None) -> list[dict]:
    """The ALIVE nodes' records (only those called name, if given), as the fields of gcs.NodeInfo."""
    infos = None
    if name is not None and NODE_SELECTORS not in _lacking:
        # One node's record instead of the whole table: N nodes polling stay O(N), not O(N^2).
        from ray.core.generated.gcs_service_pb2 import GetAllNodeInfoRequest

        try:
            selectors = [GetAllNodeInfoRequest.NodeSelector(node_name=name)]
            infos = client.get_all_node_info(timeout=timeout, node_selectors=selectors)
        except TypeError as error:
            if "node_selectors" not in str(error):
                raise
            _lacks(NODE_SELECTORS, f"Ray {ray_version()}'s GCS client cannot ask for one node: this node "
                   f"reads the whole node table, less often ({SLOW_WATCH_INTERVAL:g} s)")
    if infos is None:
        infos = client.get_all_node_info(timeout=timeout)
    return [
        {
            "node_id": node_id.hex() if hasattr(node_id, "hex") else str(node_id),
            "ip": info.node_manager_address,
            "name": info.node_name,
            "temp_dir": getattr(info, "temp_dir", ""),  # recorded since 2.55
            "resources": dict(info.resources_total),
        }
        for node_id, info in infos.items()
        if info.state == ALIVE and (name is None or info.node_name == name)
    ]



def watch_interval(fast: float) -> float:
    """How often starter.py asks the GCS: less often where every query reads the whole node table."""
    return SLOW_WATCH_INTERVAL if NODE_SELECTORS in _lacking else fast


# ---- `ray start` on a worker, and the log monitor (starter.py) ---------------------------------


def per_node_temp_dirs() -> bool:
    """Whether a worker's `ray start --temp-dir` is honoured: Ray 2.55 made temp dirs per node, and
    added temp_dir to the GCS's node record in the same change."""
    from ray.core.generated.gcs_pb2 import GcsNodeInfo

    return "temp_dir" in GcsNodeInfo.DESCRIPTOR.fields_by_name


def keep_worker_temp_dir(args: list[str], temp_dir: str) -> list[str]:
    """`ray start` args that keep a worker node's files in temp_dir, on any supported Ray.

    Before 2.55 a worker ignores --temp-dir and reads the head's temp dir from the GCS's KV store
    (Node._init_temp): this process then answers that one read with temp_dir itself, and the flag is
    dropped so Ray does not print that it "will be ignored". Call after importing Ray's CLI.
    """
    if "--head" in args or per_node_temp_dirs():
        return args
    import ray._private.utils as utils
    from ray._private.ray_constants import KV_NAMESPACE_SESSION

    read = utils.internal_kv_get_with_retry

    def read_with_own_temp_dir(gcs_client, key, namespace, *rest, **options):
        if key in ("temp_dir", b"temp_dir") and namespace in (KV_NAMESPACE_SESSION, KV_NAMESPACE_SESSION.decode()):
            return temp_dir.encode()
        return read(gcs_client, key, namespace, *rest, **options)

    utils.internal_kv_get_with_retry = read_with_own_temp_dir
    _lacks(WORKER_TEMP_DIR, f"Ray {ray_version()} ignores a worker's --temp-dir: mpiray points it at its private dir "
           f"itself; the GCS records no node's temp dir, so this node is found by its name alone")
    return [arg for arg in args if not arg.startswith("--temp-dir=")]


def check_stop_order() -> None:
    """Note DRAIN_ON_STOP if this Ray's `ray start` stops its node without draining it through the GCS.

    Measured without it (2.52, 2.53, 2.56): a worker's raylet stopped while the head stops waits for
    the GCS's answer to its unregistering and needs SIGKILL; from 2.57 (which drains) it never did.
    """
    from ray._private.node import Node

    if not hasattr(Node, "_drain_node_before_shutdown"):
        _lacks(DRAIN_ON_STOP, f"Ray {ray_version()} does not drain a node it stops, and a worker's raylet "
               f"waits for a head already gone: the head stops after the workers' nodes")


def start_log_monitor(gcs_address: str, node_ip: str | None, temp_dir: str) -> None:
    """Ray's log monitor for this node, started as Node.start_log_monitor does."""
    import inspect

    import ray._private.services as services
    from ray._common.ray_constants import LOGGING_ROTATE_BACKUP_COUNT, LOGGING_ROTATE_BYTES

    session_dir = os.path.realpath(os.path.join(temp_dir, "session_latest"))
    logs_dir = os.path.join(session_dir, "logs")
    # Given since 2.54; before, the log monitor finds the node's address itself.
    takes_ip = "node_ip_address" in inspect.signature(services.start_log_monitor).parameters
    node = {"node_ip_address": node_ip} if takes_ip else {}
    services.start_log_monitor(
        session_dir,
        logs_dir,
        gcs_address,
        **node,
        fate_share=True,  # dies with this process (PR_SET_PDEATHSIG: with the thread that started it)
        max_bytes=int(os.getenv("RAY_ROTATION_MAX_BYTES", LOGGING_ROTATE_BYTES)),
        backup_count=int(os.getenv("RAY_ROTATION_BACKUP_COUNT", LOGGING_ROTATE_BACKUP_COUNT)),
        stdout_filepath=os.path.join(logs_dir, "log_monitor.out"),
        stderr_filepath=os.path.join(logs_dir, "log_monitor.err"),
    )
