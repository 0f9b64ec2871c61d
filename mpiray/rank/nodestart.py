"""A rank's Ray node started: what the rank gathers for nodeplan.plan (its address, the image's probe, the host's
switch, the GPU variables as the installed Ray names them, this checkout's code for a container) and hands to its
own node (contracts.OwnNode.start). nodeplan.py is the pure plan; ownnode.py the node's life once started.
"""

from __future__ import annotations

from pathlib import Path

from mpiray import package
from mpiray.batch import environment
from mpiray.errors import ImageFailed
from mpiray.host import gpus, network, portblocks, resources
from mpiray.host.resources import HostView, Share
from mpiray.rank import nodeplan, preflight
from mpiray.rank.state import Rank
from mpiray.raynode import commands, raycompat
from mpiray.raynode import container as containers


def node_gpu_variables(share: Share) -> dict[str, str | None]:
    """nodeplan.node_gpu_variables with the variable the installed Ray reads an Intel GPU's from."""
    return nodeplan.node_gpu_variables(share, _intel_variable(share.gpu_vendor))


def driver_gpu_variables(view: HostView) -> tuple[tuple[str, str | None], ...]:
    """nodeplan.driver_gpu_variables, as the installed Ray names them."""
    return nodeplan.driver_gpu_variables(view, _intel_variable(view.gpu_vendor))


def _intel_variable(vendor: str) -> str:
    return raycompat.intel_visible_variable() if vendor == gpus.INTEL else "ZE_AFFINITY_MASK"


def code_dirs() -> dict[str, Path]:
    """The code a container binds (nodeplan.image_binds): mpiray's, and the trainer's beside it in a checkout."""
    return {name: package.PARENT / name for name in ("mpiray", package.TRAINER)
            if (package.PARENT / name / "__init__.py").exists()}


def in_image(private: Path, spill_dir: Path | None, job_dir: Path) -> list[containers.Bind]:
    """nodeplan.image_binds of this checkout's code, their sources made."""
    binds = nodeplan.image_binds(private, spill_dir, job_dir.resolve(), code_dirs())
    nodeplan.make_bind_sources(binds, spill_dir)
    return binds


def start_node(me: Rank, share: Share, ports: portblocks.NodePorts, head: bool,
               *, autoscaling_config: str = "") -> commands.NodeSpec:
    """Prepare this rank's Ray node and start its `ray start` (nodeplan.plan), held until me.own_node.up() (or,
    planned, say what would run).

    autoscaling_config: the head's, where Ray's autoscaler runs (elastic/autoscale.py)."""
    config, session = me.config, me.current_session
    ray_dir = me.own_node.prepare(session)
    node_ip = session.head_ip if head else network.worker_address(config.interface, session.head_ip, config.address_rule)
    image = preflight.image_facts(me) if containers.of(config) else None  # its Ray decides, not the host's
    if containers.of(config) and image is None:  # rank 0 refuses the job for it too: never a node that cannot start
        raise ImageFailed(f"on {me.host}: {preflight.image_problem(me)}")
    if image is not None:  # a /dev/shm of the container's own: the store fits it, or the job stops (never slow)
        try:
            share = resources.fit_own_shm(share, *image.shm, me.view, where=f"the image on {me.host}")
        except ValueError as error:
            raise ImageFailed(str(error)) from None
    switch = me.env.switch or environment.cray_switch(environment.read_cray_name())  # Slurm's topology, else Cray's
    where = nodeplan.Where(me.host, me.rank, me.env.partition, switch)
    planned = nodeplan.plan(config, session, where, share, ports=ports, head=head, node_ip=node_ip, ray_dir=ray_dir,
                            image=image, autoscaling_config=autoscaling_config,
                            dashboard_checks_token=head and image is None and raycompat.dashboard_checks_token())
    for note in share.notes:
        me.log.event("resource_note", note=note)
    me.log.event("resources_given", cpus=share.cpus, gpus=",".join(share.gpu_ids), memory_mib=share.memory >> 20,
                 object_store_mib=share.object_store >> 20)
    top_worker = commands.head_ports(planned.spec).max_worker if head else ports.max_worker
    me.log.event("ports_planned", first=ports.node_manager - 1, last=ports.max_worker, gcs=ports.gcs if head else "-",
                 workers=top_worker - ports.min_worker + 1)
    me.own_node.start(planned.spec, planned.argv, head, image)
    return planned.spec


