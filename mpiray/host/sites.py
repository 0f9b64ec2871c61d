"""Named sites as data: one row per machine, each fact with where it was read (`--site NAME` applies a row).

A row says what a job there needs that mpiray cannot find out by itself: which network the nodes talk on
(an interface, or the site's naming rule for a node's high-speed address), whose GPUs the nodes have,
the variables a site's fabric wants in every Ray node, and the batch directives every job there must
carry (so also each elastic worker job). Everything else (scheduler, launcher, GPU ids) mpiray reads from
the job as on any machine; the rest of a row (launcher, node-local temp, container runtime) is what
docs/sites.md shows. Applied facts never override what the user gave (a flag, an MPIRAY_* variable, a
variable already in the environment).

"probable" in a source marks a fact inferred from the site's documentation, not confirmed there.
No row was run on its hardware: docs/sites.md says how each was proven.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from mpiray.config import Config
from mpiray.host import gpus


@dataclass(frozen=True)
class Site:
    name: str  # --site NAME
    title: str
    scheduler: str  # "slurm" or "pbs"
    launcher: str  # how the job script starts the ranks
    interface: str | None = None  # --interface: the high-speed network's interface
    address_rule: str | None = None  # --address-rule: the site's name of a node's high-speed address
    gpu_vendor: str = "auto"  # --gpu-vendor
    gpus_per_node: int = 0
    node_env: tuple[tuple[str, str], ...] = ()  # set in every Ray node's environment, unless already set
    directives: tuple[str, ...] = ()  # batch directives every job there needs (elastic worker jobs get them)
    node_local_temp: str = ""
    container: str = ""
    job_script: str = ""  # in jobs/
    sources: tuple[str, ...] = field(default=())

    def applied(self, config: Config) -> dict[str, object]:
        """What the job runs with under this site (config: after apply(), the user's own choices kept), for the
        manifest and the pre-flight table."""
        facts: dict[str, object] = {"site": self.name}
        if config.interface:
            facts["interface"] = config.interface
        if config.address_rule:
            facts["address_rule"] = config.address_rule
        if config.gpu_vendor != "auto":
            facts["gpu_vendor"] = config.gpu_vendor
        if self.node_env:
            facts["node_env"] = dict(self.node_env)
        if self.directives:
            facts["worker_directives"] = list(self.directives)
        return facts


SLINGSHOT = "HPE Slingshot 11: interfaces hsn0-hsn3"

SITES = (
    Site("kestrel", "NREL Kestrel, CPU nodes (104 cores)", "slurm", "srun --mpi=pmi2 (Apptainer: --mpi=pmix)",
         interface="hsn0", node_local_temp="$TMPDIR (/tmp/scratch/$SLURM_JOB_ID)", container="Apptainer",
         job_script="slurm_kestrel.sh",
         sources=("NREL HPC docs, Kestrel system configuration: 104-core CPU nodes, " + SLINGSHOT,
                  "NREL HPC docs, Kestrel filesystems: TMPDIR=/tmp/scratch/<JOBID>",
                  "NREL HPC docs, Apptainer on Kestrel: srun --mpi=pmix")),
    Site("kestrel-gpu", "NREL Kestrel, GPU nodes (4x NVIDIA H100, 128 cores)", "slurm",
         "srun --mpi=pmi2 --gpus-per-node=4", interface="hsn0", gpu_vendor=gpus.NVIDIA, gpus_per_node=4,
         node_local_temp="$TMPDIR (/tmp/scratch/$SLURM_JOB_ID)", container="Apptainer (--nv)",
         job_script="slurm_kestrel.sh",
         sources=("NREL HPC docs, Kestrel GPU nodes: 4x H100, two Slingshot NICs (hsn0, hsn1)",)),
    Site("polaris", "ALCF Polaris (4x NVIDIA A100 per node)", "pbs",
         "PALS mpiexec --ppn 1 --depth 64 --cpu-bind depth",
         address_rule="{host}.hsn.cm.polaris.alcf.anl.gov", gpu_vendor=gpus.NVIDIA, gpus_per_node=4,
         directives=("#PBS -l filesystems=home:eagle",), node_local_temp="/local/scratch",
         container="Apptainer", job_script="pbs_polaris.sh",
         sources=("ALCF user guide, Polaris job scheduling: qsub requires -l filesystems= and select=N:system=polaris",
                  "ALCF user guide, Ray on Polaris (setup_ray_cluster.sh): "
                  "--node-ip-address=$(getent hosts $(hostname).hsn.cm.polaris.alcf.anl.gov)",
                  "ALCF user guide, Polaris hardware: 4x A100, " + SLINGSHOT)),
    Site("aurora", "ALCF Aurora (6 Intel Max 1550 cards = 12 tiles per node)", "pbs",
         "PALS mpiexec --ppn 1 --depth 208 --cpu-bind depth",
         address_rule="{host}.hsn.cm.aurora.alcf.anl.gov", gpu_vendor=gpus.INTEL, gpus_per_node=12,
         node_env=(("ZE_FLAT_DEVICE_HIERARCHY", "FLAT"),), directives=("#PBS -l filesystems=home:flare",),
         node_local_temp="/tmp", container="Apptainer", job_script="pbs_aurora.sh",
         sources=("ALCF user guide, Aurora: 6 Max 1550 cards, 12 tiles with ZE_FLAT_DEVICE_HIERARCHY=FLAT; "
                  "per-rank ZE_AFFINITY_MASK from the GPU binding script",
                  "probable: the .hsn.cm.aurora.alcf.anl.gov name, by analogy with ALCF's Polaris recipe",
                  "probable: -l filesystems=home:flare, as Polaris requires the resource")),
    Site("frontier", "OLCF Frontier (4x MI250X = 8 GCDs per node)", "slurm", "srun --gpus-per-node=8",
         interface="hsn0", gpu_vendor=gpus.AMD, gpus_per_node=8,
         node_local_temp="/mnt/bb/$USER (with -C nvme)", container="Apptainer",
         job_script="slurm_frontier.sh",
         sources=("OLCF user guide, Frontier: 8 GCDs per node, bound by Slurm with ROCR_VISIBLE_DEVICES",
                  "OLCF user guide, RCCL on Frontier: aws-ofi-rccl plugin, NCCL_SOCKET_IFNAME=hsn0",
                  "OLCF user guide, node-local NVMe at /mnt/bb/$USER")),
    Site("perlmutter", "NERSC Perlmutter GPU nodes (4x NVIDIA A100)", "slurm",
         "srun --gpus-per-node=4 (Ray only in Shifter or podman-hpc there)",
         interface="hsn0", gpu_vendor=gpus.NVIDIA, gpus_per_node=4, node_local_temp="/tmp (RAM)",
         container="Shifter (--module=gpu,nccl-plugin), podman-hpc (--gpu --net host)",
         job_script="slurm_perlmutter.sh",
         sources=("NERSC docs, Perlmutter architecture: 4x A100, " + SLINGSHOT,
                  "NERSC/slurm-ray-cluster: Ray inside Shifter or podman-hpc")),
    Site("lumi", "LUMI-G (4x MI250X = 8 GCDs per node)", "slurm", "srun --gpus-per-node=8",
         interface="hsn0", gpu_vendor=gpus.AMD, gpus_per_node=8,
         node_env=(("NCCL_SOCKET_IFNAME", "hsn0,hsn1,hsn2,hsn3"),), node_local_temp="/tmp (RAM)",
         container="Singularity (.sif, with the bindings module)", job_script="slurm_lumi.sh",
         sources=("LUMI docs, LUMI-G: 8 GCDs per node, four Slingshot NICs hsn0-hsn3",
                  "ray-project/ray#54580: the LUMI recipe sets NCCL_SOCKET_IFNAME=hsn0,hsn1,hsn2,hsn3")),
    Site("alps", "CSCS Alps (4x NVIDIA GH200 per node)", "slurm", "srun --environment=EDF (Container Engine)",
         interface="hsn0", gpu_vendor=gpus.NVIDIA, gpus_per_node=4, node_env=(("FI_PROVIDER", "cxi"),),
         node_local_temp="/tmp", container="CSCS Container Engine (an EDF TOML)", job_script="slurm_alps.sh",
         sources=("CSCS docs, Alps GH200 nodes: 4 GH200, Slingshot 11 (hsn0-hsn3)",
                  "CSCS docs, NCCL on Alps: the aws-ofi-nccl plugin with FI_PROVIDER=cxi")),
)
BY_NAME = {site.name: site for site in SITES}


def missing_directives(site: Site | None, scheduler: str, directives: tuple[str, ...]) -> tuple[str, ...]:
    """The site's required directives for this scheduler that a worker job template does not set itself
    (same resource name: a template's own `-l filesystems=home:grand` wins over the site's default)."""
    if site is None or site.scheduler != scheduler:
        return ()
    given = " ".join(directives)
    return tuple(line for line in site.directives if _resource(line) not in given)


def _resource(directive: str) -> str:
    """'#PBS -l filesystems=home:eagle' -> 'filesystems='."""
    return directive.split()[-1].partition("=")[0] + "="


def apply(config: Config) -> Config:
    """config with its site's network and GPU vendor where the user gave neither (--site; nothing without)."""
    site = BY_NAME.get(config.site or "")
    if site is None:
        return config
    if not (config.interface or config.address_rule):  # the user's own network choice wins whole
        config = dataclasses.replace(config, interface=site.interface, address_rule=site.address_rule)
    if config.gpu_vendor == "auto":
        config = dataclasses.replace(config, gpu_vendor=site.gpu_vendor)
    return config


def of(config: Config) -> Site | None:
    return BY_NAME.get(config.site or "")
