"""`mpiray dashboard JOB_ID`: how to open a running cluster's Ray dashboard from your own machine.

With --dashboard the head serves Ray's dashboard (and Jobs API: `mpiray submit`) on a port of the job's block:
with token auth on the head's address, where Ray asks every request for the cluster's token; with --no-auth
on 127.0.0.1 of its host alone (every user on that host reaches it there, nobody off it). This
command starts nothing: it reads the cluster from the registry and prints the ssh tunnel, from the host
it runs on (a login node) and from your machine through that host, and where the token is.
"""

from __future__ import annotations

import argparse
import getpass
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

from mpiray.elastic.registry import Entry, Registry
from mpiray.errors import LaunchError

LOCAL_PORT = 8265  # Ray's own dashboard port, on the user's machine


def tunnel(entry: Entry, token_path: Path | None, login: str, user: str, *, local_port: int = LOCAL_PORT) -> str:
    """What to run and open, as lines (pure, for the tests)."""
    forward = f"-L {local_port}:{entry.dashboard_host}:{entry.dashboard_port}"
    here, yours = f"from {login} (here):", "from your machine:"
    width = max(len(here), len(yours)) + 2
    lines = [
        f"cluster {entry.job_id}: Ray's dashboard is on {entry.dashboard_host}:{entry.dashboard_port} of {entry.host} "
        f"(the head).",
        "",
        f"  {here:<{width}}ssh -N {forward} {entry.host}",
        f"  {yours:<{width}}ssh -N -J {user}@{login} {forward} {user}@{entry.host}",
        "",
        f"then open http://localhost:{local_port}",
    ]
    if token_path is not None:
        lines += [f"and log in with the cluster's token (every user who reaches {entry.host} can reach the port; the token is",
                  f"yours alone):  cat {token_path}"]
    else:
        lines.append(f"(no token: the cluster runs --no-auth, so every user on {entry.host} can use it too)")
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="mpiray dashboard", description="Print the ssh tunnel to your running "
                                     "cluster's Ray dashboard and how to log in to it (the cluster must run with "
                                     "--dashboard). Starts nothing.")
    parser.add_argument("job", help="the cluster's job id (mpiray list)")
    parser.add_argument("--registry", type=Path, default=None, help="the registry (default: MPIRAY_REGISTRY or "
                        "~/.mpiray/clusters)")
    parser.add_argument("--local-port", type=int, default=LOCAL_PORT, help="the port on your machine (default: 8265)")
    args = parser.parse_args(list(argv))
    registry = Registry(args.registry)
    try:
        entry = registry.read(args.job)
    except LaunchError as error:
        print(f"mpiray dashboard: {error}", file=sys.stderr)
        return error.exit_code
    if entry.dashboard_port is None:
        print(f"mpiray dashboard: cluster {args.job} runs no dashboard: start it with --dashboard (or "
              f"MPIRAY_DASHBOARD=1)", file=sys.stderr)
        return 2
    token = registry.token_path(args.job)
    print(tunnel(entry, token if token.exists() else None, socket.gethostname(), getpass.getuser(), local_port=args.local_port))
    return 0
