"""The Ray cluster the trainer runs on: the launcher's (RAY_ADDRESS) or a local one."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Iterator, Mapping, MutableMapping, Optional

from mpiray.driver import LEARNER_SLOT, ROLE_RESOURCE, private_local_ray, ray_version, role_resource
from train.errors import ResourceError

HEAD_RESOURCE = "node:__internal_head__"  # Ray's resource of the head node



@dataclasses.dataclass(frozen=True)
class ClusterInfo:
    """What the trainer needs to know about the cluster it is connected to."""

    address: Optional[str]  # None: a local Ray this process started
    num_nodes: int
    total_cpus: float
    total_gpus: float
    head_cpus: float = 0.0  # what the head node (rank 0's, under the launcher) offers
    head_gpus: float = 0.0
    # What each alive node offers: CPU, GPU, mpiray's learner slots and its role's resource (mpiray_role_NAME)
    # (neither on a Ray mpiray did not start).
    nodes: tuple[Mapping[str, float], ...] = ()

    @property
    def learner_slots(self) -> float:
        return sum(node.get(LEARNER_SLOT, 0) for node in self.nodes)

    @property
    def roles(self) -> list[str]:
        """The roles (mpiray --role) the nodes have."""
        return sorted({name[len(ROLE_RESOURCE):] for node in self.nodes for name in node if name.startswith(ROLE_RESOURCE)})

    def pool(self, role: str) -> list[Mapping[str, float]]:
        """The nodes of role."""
        return [node for node in self.nodes if node.get(role_resource(role), 0) > 0]


@contextlib.contextmanager
def ray_cluster(environ: MutableMapping[str, str], num_cpus: Optional[int] = None) -> Iterator[ClusterInfo]:
    """Connect to RAY_ADDRESS, or start a local Ray; shut down (our part of) it on exit."""
    import ray

    address = environ.get("RAY_ADDRESS") or None
    if ray.is_initialized():  # mpiray.init() connected this process already (python -m train --mpi)
        yield describe_cluster(environ, address)
        return
    if address is not None:
        ray.init(address=address, log_to_driver=True)
        try:
            yield describe_cluster(environ, address)
        finally:
            ray.shutdown()
        return
    with private_local_ray(environ, f"train{os.getpid()}") as temp_dir:
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=True, _temp_dir=str(temp_dir))
        try:
            yield describe_cluster(environ, None)
        finally:
            ray.shutdown()


def describe_cluster(environ: Mapping[str, str], address: Optional[str]) -> ClusterInfo:
    """Totals from the launcher's MPIRAY_TOTAL_* when set, else from Ray."""
    import ray

    resources = ray.cluster_resources()
    alive_nodes = [node for node in ray.nodes() if node.get("Alive")]
    head: Mapping[str, float] = next(
        (node["Resources"] for node in alive_nodes if HEAD_RESOURCE in node.get("Resources", {})), {})
    return ClusterInfo(
        address=address,
        num_nodes=int(environ.get("MPIRAY_NUM_NODES") or len(alive_nodes)),
        total_cpus=float(environ.get("MPIRAY_TOTAL_CPUS") or resources.get("CPU", 0)),
        total_gpus=float(environ.get("MPIRAY_TOTAL_GPUS") or resources.get("GPU", 0)),
        head_cpus=float(head.get("CPU", 0)),
        head_gpus=float(head.get("GPU", 0)),
        nodes=tuple({**{name: float(node.get("Resources", {}).get(name, 0))
                        for name in ("CPU", "GPU", LEARNER_SLOT, HEAD_RESOURCE)},
                     **{name: float(amount) for name, amount in node.get("Resources", {}).items()
                        if name.startswith(ROLE_RESOURCE)}} for node in alive_nodes),
    )


def check_saved_resources(params: Mapping, cluster: ClusterInfo, experiment: str) -> None:
    """Fail fast when a restored trial's saved config (params.json) asks for more than this cluster has:
    a requeued job may get fewer nodes, and Tune would wait for them until the walltime."""
    problems = saved_resource_problems(params, cluster)
    if problems:
        raise ResourceError(
            f"{experiment} was started on a bigger cluster: its saved config needs " + " and ".join(problems)
            + ". Run it on as many nodes (and CPUs, GPUs) as it started with; Tune would wait for them forever."
        )


def saved_resource_problems(params: Mapping, cluster: ClusterInfo) -> list[str]:
    """What a trial's saved config (params.json) needs that the cluster lacks, in words; [] when it fits."""
    learners = int(params.get("num_learners") or 0)
    learner_gpus = float(params.get("num_gpus_per_learner") or 0)
    per_learner = params.get("num_cpus_per_learner")
    if not isinstance(per_learner, (int, float)):  # "auto", as RLlib reads it: 1 beside no GPU, else 0
        per_learner = 0 if learner_gpus else 1
    learner_cpus = learners * (per_learner + int(params.get("num_aggregator_actors_per_learner") or 0))
    main_cpus = float(params.get("num_cpus_for_main_process") or 0)
    runner_cpus = int(params.get("num_env_runners") or 0) * float(params.get("num_cpus_per_env_runner") or 0)
    cpus = main_cpus + learner_cpus + runner_cpus
    gpus = max(1, learners) * learner_gpus
    problems = []
    if cpus > cluster.total_cpus or gpus > cluster.total_gpus:
        problems.append(f"{cpus:g} CPUs and {gpus:g} GPUs; the cluster has {cluster.total_cpus:g} and "
                        f"{cluster.total_gpus:g}")
    on_head = HEAD_RESOURCE in (params.get("custom_resources_for_main_process") or {})
    if on_head and main_cpus > cluster.head_cpus:
        problems.append(f"{main_cpus:g} CPUs on the head node, which has {cluster.head_cpus:g}")
    for name, amount in (params.get("custom_resources_per_learner") or {}).items():  # slots, a role's share
        need, have = learners * float(amount), sum(node.get(name, 0) for node in cluster.nodes)
        if need > have:
            what = "learner slots (one node each)" if name == LEARNER_SLOT else f"of {name} (--learners-on)"
            problems.append(f"{need:g} {what}; the cluster's nodes hold {have:g}")
    return problems


def head_problem(algorithm_config, cluster: ClusterInfo) -> Optional[str]:
    """Why the head node cannot hold the algorithm's main process (with its local learner) (None: it can)."""
    main = algorithm_config.algo_class.default_resource_request(algorithm_config).bundles[0]
    cpus, gpus = main.get("CPU", 0), main.get("GPU", 0)
    if cpus <= cluster.head_cpus and gpus <= cluster.head_gpus:
        return None
    return (
        f"the head node has {cluster.head_cpus:g} CPUs and {cluster.head_gpus:g} GPUs, the algorithm's main process "
        f"needs {cpus:g} and {gpus:g}"
    )


def learner_bundles(algorithm_config) -> list[Mapping[str, float]]:
    """The placement group bundles this Ray's RLlib asks for the remote learners: one per learner (2.60), or
    one for all of them (2.52: they must then share a node)."""
    if algorithm_config.num_learners == 0:
        return []
    from ray.rllib.algorithms.utils import _get_learner_bundles

    return list(_get_learner_bundles(algorithm_config))


def check_learners(algorithm_config, cluster: ClusterInfo, spread: bool, main_on_head: bool = False,
                   role: Optional[str] = None) -> None:
    """Fail fast when the learners could never be placed (Tune would show the trial pending forever).

    spread: each learner takes a learner slot (spread_learners); main_on_head: the algorithm's main process
    is pinned to the head node (pin_to_head), whose CPUs it then takes first; role: the learners go on that
    role's nodes only (--learners-on)."""
    learners = algorithm_config.num_learners
    if learners == 0:
        return
    bundles = learner_bundles(algorithm_config)
    if len(bundles) == 1 and learners > 1:  # one bundle for all: they share one node
        need = bundles[0]
        if not any(node["CPU"] >= need.get("CPU", 0) and node["GPU"] >= need.get("GPU", 0) for node in cluster.nodes):
            raise ResourceError(
                f"{learners} learners need {need.get('CPU', 0):g} CPUs and {need.get('GPU', 0):g} GPUs on one node: "
                f"this Ray's RLlib ({ray_version()}) places all learners in one bundle, and no node has "
                f"that much (the largest: {_largest(cluster)}). Give fewer learners, or use Ray 2.60, whose "
                "learners spread over the nodes")
        return
    if not spread:
        return
    free = [dict(node) for node in (cluster.pool(role) if role else cluster.nodes)]
    offered = sum(node.get(LEARNER_SLOT, 0) for node in free)
    main = algorithm_config.algo_class.default_resource_request(algorithm_config).bundles[0]
    for head_node in free if main_on_head else ():
        if head_node.get(HEAD_RESOURCE):
            head_node["CPU"] -= main.get("CPU", 0)
            head_node["GPU"] -= main.get("GPU", 0)
    need = {name: amount for name, amount in bundles[0].items() if name in ("CPU", "GPU")}
    placed = 0
    for _ in range(learners):  # as Ray would: a learner on any node with a slot and its CPUs and GPUs free
        node: Optional[dict[str, float]] = next((n for n in free if n.get(LEARNER_SLOT, 0) >= 1 and all(
            n.get(name, 0) >= amount for name, amount in need.items())), None)
        if node is None:
            break
        node[LEARNER_SLOT] -= 1
        for name, amount in need.items():
            node[name] -= amount
        placed += 1
    if placed < learners:
        head = f", the head's after the algorithm's main process ({main.get('CPU', 0):g} CPU)" if main_on_head else ""
        nodes = f"the role {role}'s nodes" if role else "the cluster's nodes"
        raise ResourceError(
            f"{learners} learners, but {nodes} can hold {placed}: they offer {offered:g} "
            f"learner slots (mpiray_learner_slot: each node 1, or one per GPU; --learner-slots), and each learner "
            f"needs {need.get('CPU', 0):g} CPUs and {need.get('GPU', 0):g} GPUs of its node's{head}. Give "
            f"--num-learners {placed} or fewer, or run on more nodes")


def check_role(cluster: ClusterInfo, role: Optional[str], option: str) -> None:
    """Fail fast when option (--learners-on, --env-runners-on) names a role no node has: Tune would wait forever."""
    if role is not None and not cluster.pool(role):
        have = ", ".join(cluster.roles) or "none (not a cluster mpiray started)"
        raise ResourceError(f"{option} {role}: no node of this cluster has that role (the roles here: {have}). Start "
                            f"its nodes with mpiray's --role {role} (a --join job's, or a rank range such as "
                            f"--role main=0,{role}=1-), or name one of those")


def env_runner_cpus(cluster: ClusterInfo, role: str, reserved_cpus: float, shared: bool) -> float:
    """The CPUs the env runners have on role's nodes (--env-runners-on): all of them, less reserved_cpus (the
    algorithm's main process and its learners) where those share the pool (shared)."""
    return sum(node.get("CPU", 0) for node in cluster.pool(role)) - (reserved_cpus if shared else 0)


def check_env_runners_fit(algorithm_config, role: str, cpus: float) -> None:
    """Fail fast when the env runners asked for do not fit the CPUs of role's nodes (cpus: env_runner_cpus)."""
    need = algorithm_config.num_env_runners * algorithm_config.num_cpus_per_env_runner
    if need > cpus:
        raise ResourceError(
            f"{algorithm_config.num_env_runners} env runners of {algorithm_config.num_cpus_per_env_runner:g} CPUs "
            f"need {need:g} CPUs on the role {role}'s nodes, which have {cpus:g} for them. Give --num-env-runners "
            f"{int(cpus // max(algorithm_config.num_cpus_per_env_runner, 1e-9))} or fewer, or leave it unset")


def _largest(cluster: ClusterInfo) -> str:
    node = max(cluster.nodes, key=lambda n: (n["GPU"], n["CPU"]), default={"CPU": 0, "GPU": 0})
    return f"{node['CPU']:g} CPUs and {node['GPU']:g} GPUs"


def default_num_env_runners(total_cpus: float, reserved_cpus: float) -> int:
    """All CPUs minus the algorithm/learners'; 0 (sample in the learner process) if none remain."""
    return max(0, int(total_cpus - reserved_cpus))


def requested_resources(algorithm_config) -> tuple[float, float]:
    """(CPUs, GPUs) of the placement group Tune will request for this config."""
    bundles = algorithm_config.algo_class.default_resource_request(algorithm_config).bundles
    return (
        sum(bundle.get("CPU", 0) for bundle in bundles),
        sum(bundle.get("GPU", 0) for bundle in bundles),
    )


def check_resources(algorithm_config, cluster: ClusterInfo) -> None:
    """Fail fast when the run's placement group could never be scheduled (Tune would wait forever)."""
    needed_cpus, needed_gpus = requested_resources(algorithm_config)
    problems = []
    if needed_cpus > cluster.total_cpus:
        problems.append(
            f"{needed_cpus:g} CPUs ({algorithm_config.num_env_runners} env runners x "
            f"{algorithm_config.num_cpus_per_env_runner:g} + the algorithm/learners) "
            f"but the cluster has {cluster.total_cpus:g}"
        )
    if needed_gpus > cluster.total_gpus:
        problems.append(f"{needed_gpus:g} GPUs but the cluster has {cluster.total_gpus:g}")
    if problems:
        raise ResourceError(
            "the run needs " + " and ".join(problems)
            + ". Lower --num-env-runners / --num-gpus, or leave --num-env-runners unset "
            "to use all CPUs the cluster has."
        )
