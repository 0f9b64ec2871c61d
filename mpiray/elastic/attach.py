"""`mpiray attach JOB_ID -- python driver.py`: a driver of a running cluster, from a shell (a login node,
another job), with RAY_ADDRESS and the cluster's token set.

It reads the user's registry (registry.py) and needs no MPI. It hands the driver the token in a file of
a private dir of its own (0700, removed when the driver ends), never on a command line or in the
environment, and refuses at once a cluster that is gone, another user's, or another Ray.
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

from mpiray.elastic.registry import Registry
from mpiray.errors import LaunchError
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


def attach(job_id: str, command: list[str], registry: Registry) -> int:
    """Run command against job_id's cluster; its exit code (128+N if a signal ended it)."""
    entry = registry.read(job_id)
    if entry.ray != ray_version():
        raise LaunchError(f"cluster {job_id} runs Ray {entry.ray} and this Python has Ray {ray_version()}: a driver "
                          f"must run the cluster's Ray (use the same environment)", exit_code=2, cause="version_skew")
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
        env.update(RAY_ADDRESS=entry.gcs_address, MPIRAY_JOB_ID=entry.job_id, MPIRAY_HEAD_IP=entry.head_ip,
                   MPIRAY_LOG_DIR=str(Path(entry.log_dir).parent))
        print(f"mpiray attach: {' '.join(command)} on cluster {job_id} ({entry.gcs_address})", file=sys.stderr)
        try:
            child = subprocess.Popen(command, env=env)
        except OSError as error:
            raise LaunchError(f"cannot start {command}: {error.strerror}", exit_code=2) from None
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
