"""`mpiray logs [LOG_DIR/]JOB_ID`: a job's rank logs read back for the user, at a glance.

Each rank writes its events to LOG_DIR/JOB_ID/rank-NNNN.jsonl (events.py). This package reads them
back, never the English rank-NNNN.log: the cluster table (rank, host, IP, resources, joined after,
status), the start-up phases, the first error and the ranks that never reported, why the job failed
(a known cause and its fix, per rank), each node's manifest; as text, as JSON (`--json`) or as a
timeline image (`--png`). Reading is pure functions over the events, so a failed or killed job's
partial logs (a log that stops mid-way, ranks without a log) read as well as a clean one's. Times
are seconds after the job's first event, on the ranks' own clocks.

In reading order: model (the report's shape, typed), parse (one rank's events -> facts), classify
(failures -> causes), analyse (all ranks -> the report), jobdir (where a job's logs are), render (the
report as text), timeline (as an image); the command is here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from mpiray.errors import NoMatplotlib, NoSuchJob
from mpiray.logs.report.jobdir import find_job_dir, read_job
from mpiray.logs.report.render import format_report
from mpiray.logs.report.timeline import draw_timeline


def build_parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mpiray logs",
        description="Explain a job from its rank logs: the cluster table, the start-up phases, the first "
        "error, the ranks that never reported, why it failed (with the fix) and each node's manifest. Works "
        "on a failed or killed job's partial logs.",
    )
    parser.add_argument("job", nargs="?", default=None,
                        help="a job's log dir, LOG_DIR/JOB_ID, or a JOB_ID under --log-dir "
                        "(default: the newest job there)")
    parser.add_argument("--log-dir", type=Path, default=Path(environ.get("MPIRAY_LOG_DIR") or "logs"),
                        help="where bare job ids are looked up (default: logs) [env MPIRAY_LOG_DIR]")
    parser.add_argument("--json", action="store_true", help="print the report as JSON, for scripts")
    parser.add_argument("--png", type=Path, metavar="FILE",
                        help="also draw the start-up timeline (one bar per rank) into FILE (needs matplotlib)")
    return parser


def main(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> int:
    """`mpiray logs ...`: 0 once the report is printed (whatever the job's own outcome); 2 for bad input."""
    args = build_parser(os.environ if environ is None else environ).parse_args(list(argv))
    try:
        job_dir = find_job_dir(args.job, args.log_dir)
        report = read_job(job_dir)
    except NoSuchJob as error:
        print(f"mpiray logs: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"mpiray logs: cannot read the job's logs: {error}", file=sys.stderr)
        return 2
    try:
        print(json.dumps(report.to_json(), indent=2) if args.json else format_report(report), flush=True)
    except BrokenPipeError:  # `mpiray logs JOB | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    if args.png:
        try:
            width, height = draw_timeline(report, args.png)
        except NoMatplotlib as error:
            print(f"mpiray logs: {error}", file=sys.stderr)
            return 1
        except OSError as error:
            print(f"mpiray logs: cannot write {args.png}: {error}", file=sys.stderr)
            return 1
        if not args.json:
            print(f"timeline: {args.png} ({width}x{height})")
    return 0
