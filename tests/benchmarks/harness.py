"""What every benchmark here shares: its processes (a child subreaper, so that what `ray start` daemonizes stays
its descendant; the orphans it reaps; what it left), a child whose output lines are time-stamped as they come
(Captured), a job's rank logs as events (JobLogs), the environment a measured job gets, the median, the log line
and the report writer (a markdown table and its JSON, side by side). Run a benchmark with tests/benchmarks/run,
which puts tests/support/ and tests/ on its path; it ends only processes it started, by PID or by the group of a
job it started in a session of its own (tests/support/process_control.py)."""

from __future__ import annotations

import json
import os
import re
import resource
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from mpiray.logs.events import read_events

from helpers import assert_pids_logged
from process_control import alive, descendants, describe, end_group, terminate

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "docs" / "reports"  # the kept reports, beside the pages that quote them (each script's --out default)
PYTHON = sys.executable
BIN = Path(PYTHON).parent
STOP_GRACE_S = 10.0


# Popen objects whose exit status we still read: the orphan reaper must leave them alone.
TRACKED: dict[int, subprocess.Popen] = {}


class Interrupted(BaseException):
    """SIGTERM/SIGHUP: like Ctrl-C, not a failed measurement."""


def _testbed_daemons() -> set[int]:
    module = sys.modules.get("slurm.testbed")
    return set(getattr(module, "_started", {})) if module else set()


def reap_orphans() -> None:
    """Wait for exited orphans re-parented to us; never for a child whose status someone reads."""
    keep = set(TRACKED) | _testbed_daemons()
    try:
        children = psutil.Process().children()
    except psutil.Error:
        return
    for child in children:
        if child.pid in keep:
            continue
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(child.pid, os.WNOHANG)
        except (psutil.Error, ChildProcessError):
            pass


def descendant_pids() -> set[int]:
    reap_orphans()
    return {p.pid for p in descendants()}


def new_descendants(before: set[int]) -> list[psutil.Process]:
    """Our live descendants that were not there before (testbed daemons are in before)."""
    reap_orphans()
    return descendants(before)


def stop_what_we_started(before: set[int]) -> None:
    """At a benchmark's end, however it ended: each job still running, by its group (SIGTERM first, so that it stops
    its own Ray nodes), then any other process we started since `before` (descendant_pids())."""
    for popen in list(TRACKED.values()):
        end_group(popen, STOP_GRACE_S + 20)
    left = new_descendants(before)
    if left:
        log(f"stopping {len(left)} leftover processes: {describe(left)}")
        terminate(left, STOP_GRACE_S)


def children_cpu_s() -> float:
    """CPU seconds of every descendant this process (a subreaper) has reaped, through any depth."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Captured:
    """A child whose stdout/stderr lines are time-stamped (time.monotonic) as they arrive."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path = ROOT):
        self.argv = [str(a) for a in argv]
        self.lines: list[tuple[float, str, str]] = []  # (time, "out"/"err", text)
        self.ended: float | None = None
        self.ended_wall: float | None = None
        self._changed = threading.Condition()
        self.started_wall = time.time()
        self.started = time.monotonic()
        # A session of its own: an interrupted benchmark can end the whole job by its group.
        self.proc = subprocess.Popen(
            self.argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True,
        )
        TRACKED[self.proc.pid] = self.proc
        self._threads = [
            threading.Thread(target=self._pump, args=(self.proc.stdout, "out"), daemon=True),
            threading.Thread(target=self._pump, args=(self.proc.stderr, "err"), daemon=True),
            threading.Thread(target=self._wait, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _pump(self, pipe, stream: str) -> None:
        for raw in iter(pipe.readline, b""):
            now = time.monotonic()
            with self._changed:
                self.lines.append((now, stream, raw.decode(errors="replace").rstrip("\n")))
                self._changed.notify_all()
        pipe.close()

    def _wait(self) -> None:
        self.proc.wait()
        with self._changed:
            self.ended, self.ended_wall = time.monotonic(), time.time()
            self._changed.notify_all()

    def wait_for_line(self, prefix: str, timeout: float) -> float | None:
        """When a stdout line starting with prefix arrived, or None (timeout or exit without it)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for when, stream, text in self.lines:
                    if stream == "out" and text.startswith(prefix):
                        return when
                if self.ended is not None or time.monotonic() >= deadline:
                    return None
                self._changed.wait(timeout=min(1.0, max(0.0, deadline - time.monotonic())))

    def wait(self, timeout: float) -> int | None:
        self._threads[2].join(timeout)
        for thread in self._threads[:2]:
            thread.join(5)
        if self.ended is None:
            return None
        TRACKED.pop(self.proc.pid, None)
        return self.proc.returncode

    def kill(self) -> None:
        """The whole job, by its process group (mpirun/srun and what it started here)."""
        end_group(self.proc, STOP_GRACE_S + 5)
        self.wait(5)
        TRACKED.pop(self.proc.pid, None)

    def text(self, stream: str = "out") -> str:
        return "\n".join(t for _, s, t in self.lines if s == stream)

    def last_line(self, prefix: str) -> float | None:
        times = [w for w, s, t in self.lines if s == "out" and t.startswith(prefix)]
        return times[-1] if times else None


JOB_REGISTRY: list[Path] = []  # the cluster registry the measured jobs publish in: the scratch dir's, not ~/.mpiray


def clean_env(local: bool = True) -> dict[str, str]:
    """Our environment without launcher defaults, Ray addresses, tokens (and, locally, a scheduler), with
    the benchmark's own cluster registry."""
    env = dict(os.environ)
    drop = ("MPIRAY_", "RAY_ADDRESS", "RAY_AUTH")
    if local:  # mpirun on this host only, even when this runs inside an allocation
        drop += ("SLURM_", "PBS_", "PMI_", "PMIX_", "OMPI_", "ALPS_", "PALS_", "COBALT_")
    env = {k: v for k, v in env.items() if not k.startswith(drop)}
    if JOB_REGISTRY:
        env["MPIRAY_REGISTRY"] = str(JOB_REGISTRY[0])
    return env


@dataclass
class JobLogs:
    """What the ranks logged as events (LOG_DIR/JOB_ID/rank-NNNN.jsonl), with wall-clock times."""

    events: dict[int, list[dict]] = field(default_factory=dict)
    job_dir: Path | None = None

    @classmethod
    def read(cls, job_dir: Path) -> JobLogs:
        return cls({int(path.stem.split("-")[1]): read_events(path) for path in sorted(job_dir.glob("rank-*.jsonl"))},
                   job_dir)

    def fields(self, name: str) -> list[dict]:
        return [record["fields"] for records in self.events.values() for record in records if record["event"] == name]

    def private_dirs(self) -> list[str]:
        return [fields["path"] for fields in self.fields("private_dir")]

    def when(self, rank: int, name: str) -> float | None:
        return next((record["time"] for record in self.events.get(rank, []) if record["event"] == name), None)

    def first_time(self, rank: int) -> float | None:
        return self.events[rank][0]["time"] if self.events.get(rank) else None

    def stopped_pids(self) -> list[int]:
        return [pid for fields in self.fields("processes_stopped") for pid in fields["pids"]]

    def node_pids(self) -> list[int]:
        """Every PID the ranks logged (their nodes' and what they stopped): the tests' assert_pids_logged,
        which fails where a rank started a node and logged no PID, rather than let `leftovers` find none."""
        return assert_pids_logged(self.job_dir) if self.job_dir is not None else []

    def rank_pids(self) -> dict[int, int]:
        return {rank: records[0]["pid"] for rank, records in self.events.items() if records}

    def driver_pid(self) -> int | None:
        found = [record["fields"]["pid"] for record in self.events.get(0, []) if record["event"] == "driver_started"]
        return found[0] if found else None


def job_processes(job_id: str, logs: JobLogs, since_wall: float) -> list[psutil.Process]:
    """Live processes started since since_wall whose command line or environment names the job or
    one of its ranks' private dirs (Ray's processes carry their temp dir)."""
    markers = (job_id, *logs.private_dirs())
    found = []
    for proc in psutil.process_iter(["create_time"]):
        try:
            if proc.pid == os.getpid() or proc.info["create_time"] < since_wall - 1:
                continue
            text = " ".join(proc.cmdline()) + " " + " ".join(proc.environ().values())
            if any(marker in text for marker in markers) and alive(proc):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def leftovers(job_id: str, logs: JobLogs, before: set[int], since_wall: float) -> list[psutil.Process]:
    """Processes of the job still alive after it exited (none is the target)."""
    left = {p.pid: p for p in new_descendants(before)}
    left.update((p.pid, p) for p in job_processes(job_id, logs, since_wall))
    for pid in logs.node_pids() + list(logs.rank_pids().values()):
        try:
            proc = psutil.Process(pid)
            if alive(proc) and proc.create_time() >= since_wall - 1:  # not a reused PID
                left[pid] = proc
        except psutil.Error:
            pass
    return list(left.values())


def median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


REPORT_FILE = re.compile(r"docs/reports/(\w+_report\.(md|json)|scale\.png)$")


def run_facts(command: list[str] | None = None) -> dict:
    """What a report was measured on, stated in every report (write_report): the commit (and whether the tree
    differed from it), the date, the machine (cores, memory, kernel), Python, Ray and MPI, and the command."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30).stdout.rstrip()
        except (OSError, subprocess.TimeoutExpired):
            return ""

    try:
        from mpi4py import MPI

        mpi = " ".join(MPI.Get_library_version().strip().splitlines()[0].split())
    except Exception as error:  # noqa: BLE001  (any failure to load MPI is a fact worth reporting, not a crash)
        mpi = f"unknown ({type(error).__name__})"
    try:
        from mpiray.raynode.raycompat import ray_version

        ray = ray_version()
    except Exception:  # noqa: BLE001
        ray = "unknown"
    # What differs from the commit, less the reports themselves (a run of all rewrites them one after the other).
    changed = [line[3:] for line in git("status", "--porcelain", "--untracked-files=no").splitlines()
               if not REPORT_FILE.search(line)]
    return {
        "commit": git("rev-parse", "--short=12", "HEAD") or "unknown",
        "tree_changed": sorted(changed),  # tracked files that differ from the commit when it ran ([]: none)
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "kernel": os.uname().release,
        "python": sys.version.split()[0],
        "ray": ray,
        "mpi": mpi,
        "command": " ".join(command if command is not None else ["bash tests/benchmarks/run",
                                                                 Path(sys.argv[0]).stem, *sys.argv[1:]]),
    }


def facts_line(facts: dict) -> str:
    changed = f" plus changes to {', '.join(facts['tree_changed'])}" if facts["tree_changed"] else ""
    return (f"Measured {facts['date']} on commit {facts['commit']}{changed}: {facts['cores']} cores, "
            f"{facts['memory_gib']} GiB, Linux {facts['kernel']}, Python {facts['python']}, Ray {facts['ray']}, "
            f"{facts['mpi']}. Command: `{facts['command']}`.")


def write_report(out_dir: Path, name: str, text: str, data: object | None = None, indent: int = 2) -> None:
    """A benchmark's report: NAME_report.md (its table, as printed) and, where it keeps its measures, NAME_report.json
    ({"run": run_facts(), "measures": data}), in out_dir (made if missing). The markdown's second line states the
    run's facts: the commit, machine and command that made it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    facts = run_facts()
    title, _, rest = text.partition("\n")
    (out_dir / f"{name}_report.md").write_text(f"{title}\n\n{facts_line(facts)}\n{rest}")
    if data is not None:
        report = {"run": facts, "measures": data}
        (out_dir / f"{name}_report.json").write_text(json.dumps(report, indent=indent, default=str) + "\n")
