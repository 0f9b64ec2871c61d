"""What the ranks tell rank 0 at start-up (the messages' contents), and how rank 0 shows it."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

from mpiray.errors import LaunchError
from mpiray.raycompat import ray_version


@dataclass(frozen=True)
class Session:
    """What rank 0 tells every rank before anything starts."""

    job_id: str
    head_ip: str
    gcs_address: str
    token: str | None
    started: float  # rank 0's time.time() at launch, for "seconds to ready"


@dataclass(frozen=True)
class Report:
    """A rank's answer after starting (or failing to start) its node."""

    rank: int
    host: str
    log: str
    node_ip: str = ""
    node_id: str = ""
    resources: dict = field(default_factory=dict)
    seconds: float = 0.0
    versions: dict = field(default_factory=dict)
    error: str = ""
    exit_code: int = 0  # with error: the code the whole job ends with


def check_versions(reports: list[Report]) -> None:
    """All ranks must run the same Ray and Python: a mixed cluster fails in obscure ways later."""
    seen = {tuple(sorted(r.versions.items())) for r in reports}
    if len(seen) > 1:
        per_rank = "; ".join(
            f"rank {r.rank} on {r.host}: " + ", ".join(f"{k} {v}" for k, v in sorted(r.versions.items()))
            for r in reports
        )
        raise LaunchError(f"ranks run different versions, refusing to start: {per_rank}")


def versions(rank: int) -> dict:
    versions = {"ray": ray_version(), "python": sys.version.split()[0]}
    # Test hook for the version-skew check: MPIRAY_FAKE_VERSION="RANK:NAME=VERSION" makes one rank
    # report another version, as a rank started from another environment would.
    fake = os.environ.get("MPIRAY_FAKE_VERSION", "")
    if fake.startswith(f"{rank}:") and "=" in fake:
        name, value = fake.split(":", 1)[1].split("=", 1)
        versions[name] = value
    return versions


def describe_resources(node) -> str:
    res = node.resources
    return f"{res.get('CPU', 0):g} CPUs, {res.get('GPU', 0):g} GPUs, {res.get('memory', 0) / 2**30:.1f} GiB"



def print_summary(job_id: str, gcs_address: str, launch: str, ready: float, reports: list[Report]) -> None:
    """The cluster table on rank 0's stdout: one line per rank."""
    nodes = [r for r in reports if r.node_id]
    print(
        f"mpiray: job {job_id}: {len(nodes)} Ray nodes on {len({r.host for r in reports})} "
        f"hosts ready in {ready:.1f} s ({launch}); head {gcs_address}",
        flush=True,
    )
    for r in reports:
        what = describe_resources(r) if r.node_id else "idle"
        print(f"  rank {r.rank:>4}  {r.host:<20} {r.node_ip or '-':<15} {what:<36} {r.seconds:5.1f} s", flush=True)
