"""`mpiray submit JOB_ID -- CMD ...` and `mpiray jobs JOB_ID [stop|logs SUBMISSION]`: drivers of a running
cluster through Ray's Jobs API, from a login node, with the cluster's token.

Ray Client (`mpiray attach` from a login node) is frozen, and Ray's docs warn that Tune and Train may not
work through it; a Ray Job is Ray's own way in from outside. The driver runs on the head, under Ray's job
supervisor: it outlives the shell that submitted it (a dropped ssh session, a killed `mpiray submit`).

Where it connects: the head's dashboard serves the Jobs API. With token auth (the default) it listens on the
head's address, on a port of the job's block, and Ray refuses every request without the cluster's token
(401) or with another (403); with --no-auth (or a Ray, the image's with --container, whose dashboard does
not check the token) only on 127.0.0.1 of the head's host (docs/security.md says why). `--address URL`
takes another way in, e.g. http://localhost:8265 through the tunnel `mpiray dashboard` prints. The token is
read from the user's registry (0600 in a 0700 dir) and sent in a header, never put on a command line or in the
environment.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from mpiray.elastic.registry import Entry, Registry
from mpiray.errors import ConfigError, LaunchError, NoSuchCluster
from mpiray.raynode.raycompat import ray_version

# Ray's words for a submission that has ended (ray.job_submission.JobStatus.is_terminal).
ENDED = ("SUCCEEDED", "FAILED", "STOPPED")
FOLLOW_POLL_S = 1.0  # how often a followed submission's new output and status are asked for
SUBMISSION_PREFIX = "mpiray"


def jobs_url(entry: Entry) -> str:
    """The Jobs API of a registered cluster (its head's dashboard); ConfigError where it serves none."""
    if entry.dashboard_port is None:
        raise ConfigError(f"cluster {entry.job_id} serves no Jobs API: Ray's dashboard serves it, so start the "
                          f"cluster with --dashboard (or MPIRAY_DASHBOARD=1)")
    return f"http://{entry.dashboard_host}:{entry.dashboard_port}"


def client(job_id: str, registry: Registry, address: str | None):
    """A JobSubmissionClient of cluster job_id that sends its token; LaunchError where there is none to reach."""
    entry = registry.read(job_id)
    url = address or jobs_url(entry)
    if address is None and entry.dashboard_host == "127.0.0.1":
        why = "runs --no-auth" if not entry.auth else \
            f"runs Ray {entry.ray}, whose dashboard does not ask for the cluster's token"
        raise ConfigError(f"cluster {job_id} {why}, so its Jobs API listens on 127.0.0.1 of {entry.host} "
                          f"alone: open the tunnel `mpiray dashboard {job_id}` prints and pass --address "
                          f"http://localhost:8265")
    token = registry.token(job_id)
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    from ray.job_submission import JobSubmissionClient  # Ray's import: only for a command that needs it

    try:
        return JobSubmissionClient(url, headers=headers)
    except (OSError, RuntimeError, ValueError) as error:  # requests' ConnectionError is an OSError
        raise NoSuchCluster(f"cluster {job_id}'s Jobs API at {url} did not answer: {error}") from None


def jobs_client(job_id: str, address: str | None = None, registry: str | Path | None = None):
    """`mpiray.jobs_client(JOB_ID)`: Ray's JobSubmissionClient of your running cluster JOB_ID, with its token, for a
    notebook or a script on a login node (jobs/cluster_notebook.ipynb); LaunchError where there is none to reach.
    address: another way in (http://localhost:8265 through the tunnel); registry: default MPIRAY_REGISTRY or
    ~/.mpiray/clusters."""
    return client(job_id, Registry(Path(registry) if registry is not None else None), address)


def follow(jobs, submission: str, out=sys.stdout) -> int:
    """Print a submission's output as it comes until it has ended; its exit code (0: SUCCEEDED)."""
    printed = 0
    while True:
        status = str(jobs.get_job_status(submission).value)
        logs = jobs.get_job_logs(submission)
        if len(logs) > printed:
            out.write(logs[printed:])
            out.flush()
            printed = len(logs)
        if status in ENDED:
            break
        time.sleep(FOLLOW_POLL_S)
    info = jobs.get_job_info(submission)
    if status == "SUCCEEDED":
        return 0
    code = getattr(info, "driver_exit_code", None)
    print(f"mpiray submit: {submission} {status}: {info.message or ''}".rstrip(": "), file=sys.stderr)
    return code if isinstance(code, int) and code > 0 else 1


def on_labels(pairs: Sequence[str]) -> dict[str, str]:
    """`--on KEY=VALUE` (each a label selector of Ray's: VALUE, !VALUE, in(A,B), !in(A,B)) -> the selector.
    Raises ConfigError naming the pair that is not one."""
    selector: dict[str, str] = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key.strip() or not value.strip():
            raise ConfigError(f"--on {pair!r} is not KEY=VALUE, e.g. --on mpiray.io/role=rollout")
        selector[key.strip()] = value.strip()
    return selector


def submit(job_id: str, command: list[str], registry: Registry, address: str | None, *, wait: bool,
           working_dir: str | None, on: dict[str, str] | None = None) -> int:
    jobs = client(job_id, registry, address)
    runtime_env = {"working_dir": working_dir} if working_dir else None
    where = {"entrypoint_label_selector": on} if on else {}
    try:
        submission = jobs.submit_job(entrypoint=shlex.join(command), runtime_env=runtime_env,
                                     submission_id=f"{SUBMISSION_PREFIX}-{job_id}-{time.strftime('%H%M%S')}-"
                                                   f"{time.time_ns() % 10_000:04d}", **where)
    except TypeError:  # a Ray (before 2.60's) whose Jobs API takes no entrypoint label selector
        if not on:
            raise
        raise ConfigError(f"this Ray ({ray_version()}) cannot place a Ray Job by label: drop --on") from None
    if not wait:
        print(submission)
        return 0
    node = "a node labelled " + ", ".join(f"{k}={v}" for k, v in on.items()) if on else "the head"
    print(f"mpiray submit: {submission} on cluster {job_id}: it runs on {node} and goes on if this ends "
          f"(mpiray jobs {job_id} stop {submission})", file=sys.stderr)
    try:
        return follow(jobs, submission)
    except KeyboardInterrupt:
        print(f"\nmpiray submit: stopped following; {submission} goes on (mpiray jobs {job_id} logs {submission})",
              file=sys.stderr)
        return 130


def table(details) -> str:
    """`mpiray jobs`: one line per submission, Ray's own status words, newest last."""
    rows = [("SUBMISSION", "STATUS", "STARTED", "ENTRYPOINT")]
    for job in sorted(details, key=lambda d: d.start_time or 0):
        started = time.strftime("%H:%M:%S", time.localtime(job.start_time / 1000)) if job.start_time else "-"
        rows.append((job.submission_id or job.job_id or "-", str(job.status.value), started, job.entrypoint))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return "\n".join(f"{a:<{widths[0]}}  {b:<{widths[1]}}  {c:<{widths[2]}}  {d}" for a, b, c, d in rows)


def main(argv: Sequence[str]) -> int:
    """`mpiray submit JOB_ID [--no-wait] [--address URL] [--working-dir DIR] -- COMMAND ...`"""
    argv = list(argv)
    command = argv[argv.index("--") + 1:] if "--" in argv else []
    parser = argparse.ArgumentParser(
        prog="mpiray submit", usage="mpiray submit JOB_ID [--no-wait] [--address URL] [--working-dir DIR] [--on KEY=VALUE] "
              "-- COMMAND",
        description="Run COMMAND as a Ray Job on your running cluster JOB_ID (started with --dashboard): it runs on "
                    "the head and goes on if this ends. Follows its output and exits with its outcome (0: "
                    "SUCCEEDED), or with --no-wait prints its submission id.")
    common(parser)
    parser.add_argument("--no-wait", dest="wait", action="store_false", help="print the submission id and return")
    parser.add_argument("--working-dir", default=None, help="a directory Ray uploads and runs COMMAND in (Ray's "
                        "runtime_env working_dir, at most 100 MiB); default: the head's working directory")
    parser.add_argument("--on", action="append", default=[], metavar="KEY=VALUE",
                        help="run COMMAND on a node with this label (Ray's entrypoint label selector; again for "
                             "more), e.g. --on mpiray.io/role=rollout; default: the head")
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if not command:
        parser.error("give the driver command after '--', e.g. mpiray submit 1234 -- python driver.py")
    return _run("submit", lambda: submit(args.job, command, Registry(args.registry), args.address, wait=args.wait,
                                         working_dir=args.working_dir, on=on_labels(args.on)))


def jobs_main(argv: Sequence[str]) -> int:
    """`mpiray jobs JOB_ID [list | logs SUBMISSION | stop SUBMISSION]`"""
    parser = argparse.ArgumentParser(prog="mpiray jobs", description="The Ray Jobs of your running cluster JOB_ID: "
                                     "list them (Ray's status words), print one's output, or stop one (the cluster "
                                     "stays up).")
    common(parser)
    parser.add_argument("action", nargs="?", default="list", choices=("list", "logs", "stop"))
    parser.add_argument("submission", nargs="?", help="a submission id (mpiray jobs JOB_ID)")
    args = parser.parse_args(list(argv))
    if args.action != "list" and not args.submission:
        parser.error(f"mpiray jobs {args.job} {args.action} needs a submission id (see mpiray jobs {args.job})")

    def act() -> int:
        jobs = client(args.job, Registry(args.registry), args.address)
        if args.action == "list":
            print(table(jobs.list_jobs()))
        elif args.action == "logs":
            sys.stdout.write(jobs.get_job_logs(args.submission))
        else:
            stopped = jobs.stop_job(args.submission)
            print(f"{args.submission}: {'stopping' if stopped else 'had already ended'}")
        return 0

    return _run("jobs", act)


def common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", help="the cluster's job id (mpiray list)")
    parser.add_argument("--address", default=None, help="the Jobs API's URL another way, e.g. http://localhost:8265 "
                        "through the tunnel of `mpiray dashboard JOB_ID` (default: the head's, from the registry)")
    parser.add_argument("--registry", type=Path, default=None, help="the registry (default: MPIRAY_REGISTRY or "
                        "~/.mpiray/clusters)")


def _run(name: str, act) -> int:
    try:
        return act()
    except LaunchError as error:
        print(f"mpiray {name}: {error}", file=sys.stderr)
        return error.exit_code
    except Exception as error:
        from ray.exceptions import AuthenticationError

        # What Ray's client raises: a token refused (401/403), an HTTP error (an unknown submission: RuntimeError),
        # a head it cannot reach (requests' errors are OSErrors). One line, as for every other error of mpiray's.
        if not isinstance(error, (AuthenticationError, RuntimeError, OSError)):
            raise
        first = next((line for line in str(error).splitlines() if line.strip()), type(error).__name__)
        hint = " (the cluster's token in your registry is not the cluster's: is MPIRAY_REGISTRY the one it ran " \
               "with?)" if isinstance(error, AuthenticationError) else ""
        print(f"mpiray {name}: {first}{hint}", file=sys.stderr)
        return 1
