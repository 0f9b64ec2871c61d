"""`mpiray attach JOB_ID -- python driver.py`: a driver of a running cluster, from a shell (a login node,
another job), with RAY_ADDRESS and the cluster's token set.

It reads the user's registry (registry.py) and needs no MPI. It hands the driver the token in a file of
a private dir of its own (0700, removed when the driver ends), never on a command line or in the
environment, and refuses at once a cluster that is gone, another user's, or another Ray.

Which address: Ray's `ray.init(address=GCS)` connects through a raylet of the cluster on the driver's own
host, which it finds in the host's process table; on a host that runs none (a login node) it fails after
a minute ("No node info found matching attributes"). There the driver gets Ray Client's address instead,
ray://HEAD:PORT, the head's client server on a port of the job's block, which takes the same token; the
driver's `ray.init()` is the same line either way.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import psutil

from mpiray.elastic.registry import Entry, Registry
from mpiray.errors import ConfigError, DriverNotFound, LaunchError, VersionSkew
from mpiray.raynode.commands import node_env
from mpiray.raynode.raycompat import ray_version


def main(argv: Sequence[str]) -> int:
    argv = list(argv)
    command = argv[argv.index("--") + 1:] if "--" in argv else []
    parser = argparse.ArgumentParser(prog="mpiray attach", usage="mpiray attach JOB_ID [--registry DIR] -- COMMAND",
                                     description="Run COMMAND as a driver of your running cluster JOB_ID: "
                                     "RAY_ADDRESS and the cluster's token are set, so a plain ray.init() connects.")
    parser.add_argument("job", help="the cluster's job id (mpiray list)")
    parser.add_argument("--registry", type=Path, default=None, help="the registry (default: MPIRAY_REGISTRY or "
                        "~/.mpiray/clusters)")
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if not command:
        parser.error("give the driver command after '--', e.g. mpiray attach 1234 -- python driver.py")
    try:
        return attach(args.job, command, Registry(args.registry))
    except LaunchError as error:
        print(f"mpiray attach: {error}", file=sys.stderr)
        return error.exit_code


def runs_a_raylet_of(gcs_address: str) -> bool:
    """Whether this host's process table shows a raylet of the cluster at gcs_address: what ray.init(address=...)
    connects through (Ray finds it the same way)."""
    wanted = f"--gcs-address={gcs_address}"
    for proc in psutil.process_iter(["name", "cmdline"]):
        if proc.info["name"] == "raylet" and wanted in (proc.info["cmdline"] or ()):
            return True
    return False


def driver_address(entry: Entry, local_raylet: bool) -> tuple[str, str]:
    """(RAY_ADDRESS for a driver on this host, how it connects); LaunchError where it cannot."""
    if local_raylet:
        return entry.gcs_address, "through this host's raylet"
    if entry.client_port is None:
        raise ConfigError(f"this host runs none of cluster {entry.job_id}'s Ray nodes, and its head serves no Ray "
                          f"Client (it runs without ray[default], or an older mpiray): run attach on a host of the "
                          f"cluster, or start the cluster from an environment with ray[default]")
    here = sys.version.split()[0].rsplit(".", 1)[0]
    if entry.python.rsplit(".", 1)[0] != here:
        raise VersionSkew(f"cluster {entry.job_id} runs Python {entry.python} and this is Python {here}: Ray Client "
                          f"(this host runs none of its nodes) needs the same Python minor version; use the "
                          f"cluster's environment")
    return f"ray://{entry.head_ip}:{entry.client_port}", "Ray Client: this host runs none of its nodes"


def attach(job_id: str, command: list[str], registry: Registry) -> int:
    """Run command against job_id's cluster; its exit code (128+N if a signal ended it)."""
    entry = registry.read(job_id)
    if entry.ray != ray_version():
        raise VersionSkew(f"cluster {job_id} runs Ray {entry.ray} and this Python has Ray {ray_version()}: a driver "
                          f"must run the cluster's Ray (use the same environment)")
    address, how = driver_address(entry, runs_a_raylet_of(entry.gcs_address))
    token = registry.token(job_id)
    private = Path(tempfile.mkdtemp(prefix="mpiray-attach-"))  # 0700, a fresh name: nothing planted is reused
    try:
        token_path = None
        if token is not None:
            token_path = private / "auth_token"
            fd = os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(token)
        env = node_env(dict(os.environ), None, str(token_path) if token_path else None, private_tmp=str(private))
        env.update(RAY_ADDRESS=address, MPIRAY_JOB_ID=entry.job_id, MPIRAY_HEAD_IP=entry.head_ip,
                   MPIRAY_LOG_DIR=str(Path(entry.log_dir).parent))
        print(f"mpiray attach: {' '.join(command)} on cluster {job_id} ({address}, {how})", file=sys.stderr)
        try:
            child = subprocess.Popen(command, env=env)
        except OSError as error:
            raise DriverNotFound(f"cannot start {command}: {error.strerror}") from None
        forward = lambda signum, frame: child.send_signal(signum)  # noqa: E731
        before = {signum: signal.signal(signum, forward) for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
        try:
            code = child.wait()
        finally:
            for signum, handler in before.items():
                signal.signal(signum, handler)
        return 128 - code if code < 0 else code
    finally:
        shutil.rmtree(private, ignore_errors=True)
