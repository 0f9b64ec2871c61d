"""What the real-run tests share: run the real launcher under the real mpirun, and read what it left behind."""

from __future__ import annotations

import functools
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from mpiray.logs.events import KINDS, read_events
from mpiray.logs.report.jobdir import read_job
from mpiray.logs.report.parse import last_run

from process_control import alive_pids, wait_for

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PROBE = ROOT / "tests" / "drivers" / "probe.py"
PYTHON = sys.executable
START_RAY = ROOT / "start_ray.py"
JOBS = ROOT / "jobs"
# Under load (2 cores, other tests running) a 3-node cluster on a testbed takes 15-30 s to come up.
JOB_TIMEOUT_S = 300


@dataclass
class Launch:
    returncode: int
    stdout: str
    stderr: str
    job_dir: Path
    seconds: float

    def events(self, rank: int) -> list[dict]:
        return rank_events(self.job_dir, rank)

    def event(self, rank: int, name: str) -> dict | None:
        """The fields of rank's last event called name (None: it logged none)."""
        return last_event(self.job_dir, rank, name)

    def names(self, rank: int) -> list[str]:
        return [record["event"] for record in self.events(rank)]

    def probe(self) -> dict:
        return driver_report(self.stdout, "PROBE", self.stderr)

    def stopped_pids(self) -> list[int]:
        return logged_pids(self.job_dir)


def rank_events(job_dir: Path, rank: int) -> list[dict]:
    """rank's events, its last run only (a re-used job id appends); [] without a log."""
    return events_of(job_dir / f"rank-{rank:04d}.jsonl")


def events_of(log: Path) -> list[dict]:
    """An events file's records (a rank's, the autoscaler's), its last run only; [] while there is none."""
    return last_run(read_events(log))[0] if log.exists() else []


def client_server_logs(job_dir: Path) -> str:
    """The ends of the head's Ray Client server logs (the proxy's and each driver's server's): why a ray://
    connection failed is written there, in the head's session dir, which the job's end removes."""
    manifests = [r["fields"] for r in rank_events(job_dir, 0) if r["event"] == "node_manifest"]
    if not manifests:
        return "\n(the head wrote no node manifest)"
    logs = sorted({path.resolve() for path in Path(manifests[-1]["temp_dir"]).glob("session_*/logs/ray_client_server*")})
    return "".join(f"\n--- {path.name}:\n{path.read_text(errors='replace')[-4000:]}" for path in logs) or \
        f"\n(no ray_client_server logs under {manifests[-1]['temp_dir']})"


def last_event(job_dir: Path, rank: int, name: str) -> dict | None:
    found = [record["fields"] for record in rank_events(job_dir, rank) if record["event"] == name]
    return found[-1] if found else None


def exit_codes(job_dir: Path, ranks: int) -> list[int | None]:
    """Each rank's logged exit code (None: it logged none)."""
    return [(last_event(job_dir, rank, "exit") or {}).get("code") for rank in range(ranks)]


def rank_pid(job_dir: Path, rank: int) -> int:
    return next(record["pid"] for record in rank_events(job_dir, rank) if record["event"] == "rank_started")


def logged_pids(job_dir: Path) -> list[int]:
    """Every PID a rank logged: its Ray node's processes at start-up and what it stopped."""
    pids = []
    for path in job_dir.glob("rank-*.jsonl"):
        for record in read_events(path):
            if record["event"] in ("node_pids", "processes_stopped"):
                pids += record["fields"]["pids"]
    return pids


def causes(job_dir: Path) -> dict[str, list[int]]:
    """What `mpiray logs` says the job failed of: cause -> the ranks it names."""
    return {found.cause: found.ranks for found in read_job(job_dir).causes}


def wait_for_events(log: Path, name: str, count: int = 1, timeout: float = 120) -> list[dict]:
    """The fields of each event name in an events file (a rank's: job_dir / "rank-0000.jsonl", the
    autoscaler's), its last run, once it holds count of them."""

    def found() -> list[dict] | None:
        fields = [record["fields"] for record in events_of(log) if record["event"] == name]
        return fields if len(fields) >= count else None

    fields = wait_for(found, timeout, 0.1)
    if fields is None:
        names = [record["event"] for record in events_of(log)]
        raise AssertionError(f"{log} holds fewer than {count} {name} after {timeout:g} s; its events: {names[-20:]}")
    return fields


def launcher_argv(ranks: int, args=(), driver=()) -> list[str]:
    mpirun = [str(BIN / "mpirun"), "-np", str(ranks)] if ranks > 1 else []
    driver = list(driver) or [sys.executable, str(PROBE)]
    return [*mpirun, sys.executable, str(ROOT / "start_ray.py"), *args, "--", *driver]


@functools.cache
def mpirun_version() -> str:
    """What BIN/mpirun says it is: 'mpirun (Open MPI) 5.0.11', or hydra's build details."""
    result = subprocess.run([str(BIN / "mpirun"), "--version"], capture_output=True, text=True, timeout=30, check=False)
    return result.stdout + result.stderr


def mpirun_is_open_mpi() -> bool:
    """Whether BIN/mpirun is Open MPI's (PRRTE) rather than MPICH's hydra: they treat signals differently."""
    return "Open MPI" in mpirun_version()


def hydra_loses_exit_codes_after_a_signal() -> bool:
    """Hydra before MPICH 4.1 (e.g. Debian 12's 4.0.2) counts a rank that exits after a signal it
    forwarded as exit code 0 whenever it reaps the rank before reading its exit status (its proxy's
    forced_cleanup; removed by pmodels/mpich#5930): measured, mpiexec returned 0 in 6 of 15 runs."""
    match = re.search(r"^\s*Version:\s+(\d+)\.(\d+)", mpirun_version(), re.MULTILINE)
    return "HYDRA" in mpirun_version() and match is not None and (int(match[1]), int(match[2])) < (4, 1)


def rank_pids(launcher_pid: int) -> list[int]:
    """PIDs of the ranks (start_ray.py processes) below a running mpirun."""
    script = str(ROOT / "start_ray.py")
    found = []
    for process in psutil.Process(launcher_pid).children(recursive=True):
        try:  # a rank's own child between its fork and its exec shows the rank's command line: not a rank.
            # (Not "the parent's lacks the script": Open MPI's prterun, the ranks' parent, holds it too.)
            cmdline = process.cmdline()
            if script in cmdline and cmdline != process.parent().cmdline():
                found.append(process.pid)
        except (psutil.Error, AttributeError):  # gone, a zombie not reaped yet (podman's conmon), or an orphan
            continue
    return found


def tagged_lines(output: str, tag: str) -> list[dict]:
    """The JSON a test driver printed after TAG on each such line ("PROBE {...}"), in order."""
    return [json.loads(line[len(tag) + 1:]) for line in output.splitlines() if line.startswith(tag + " ")]


def driver_report(output: str, tag: str, stderr: str = "") -> dict:
    """The JSON of the last line tagged TAG (probe.py: PROBE, ...); the test fails without one."""
    reports = tagged_lines(output, tag)
    assert reports, f"the driver printed no {tag} line:\n{output}\n{stderr}"
    return reports[-1]


def fail_join(marker: str, variable: str = "FAIL_JOIN") -> dict[str, str]:
    """The environment of a run whose worker `ray start`s fail as an overloaded GCS makes them fail: the first
    one (marker: a path it makes), or every one (marker: "always"); with variable="HANG_JOIN", the first one hangs
    instead; with variable="FAIL_HEAD", the first head's fails so, in Ray's own code, after its processes started.
    The hook is the test's own: a sitecustomize on PYTHONPATH (tests/hooks/fail_join), nothing in mpiray."""
    hooks = str(ROOT / "tests" / "hooks" / "fail_join")
    return {variable: marker, "PYTHONPATH": os.pathsep.join(filter(None, [hooks, os.environ.get("PYTHONPATH")]))}


def new_job_id(tag: str) -> str:
    return f"test-{tag}-{secrets.token_hex(3)}"


def launch(tmp_path: Path, ranks: int, args=(), driver=(), timeout: float = 240, env=None, tag="run") -> Launch:
    """Run the launcher to the end and return what it printed and where its logs are."""
    job_id = new_job_id(tag)
    log_dir = tmp_path / "logs"
    argv = launcher_argv(ranks, ["--log-dir", str(log_dir), "--job-id", job_id, *args], driver)
    started = time.monotonic()
    result = subprocess.run(
        argv, cwd=ROOT, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=timeout
    )
    return Launch(result.returncode, result.stdout, result.stderr, log_dir / job_id, time.monotonic() - started)


@dataclass(frozen=True)
class Pace:
    """How fast this machine is now, measured: deadlines of tests that need a phase to be fast come from it."""

    head_start: float  # seconds from a rank's start (MPI up) to its head ALIVE, one rank alone

    def deadline(self, phases: float = 1.0, floor: float = 8.0) -> float:
        """A deadline for `phases` head starts, with room for a slow, loaded moment (4x, plus 4 s)."""
        return max(floor, 4 * phases * self.head_start + 4)


def assert_pids_logged(job_dir: Path) -> list[int]:
    """Every PID the ranks logged (logged_pids). It fails, rather than give nothing, where a rank started a node
    and no PID was logged (the events it reads renamed, or not logged): a check of what is left would then pass."""
    assert {"node_starting", "node_pids", "processes_stopped"} <= set(KINDS), "the events read here were renamed"
    pids = logged_pids(job_dir)
    started = any(record["event"] == "node_starting" for path in job_dir.glob("*rank-*.jsonl")
                  for record in read_events(path))
    assert pids or not started, f"ranks of {job_dir} started Ray nodes, but no PID of theirs was logged"
    return pids


def assert_nothing_left(launch_: Launch, wait: float = 0) -> None:
    """Every process the ranks logged (their Ray nodes, what they stopped) is gone (assert_pids_logged)."""
    pids = assert_pids_logged(launch_.job_dir)
    wait_for(lambda: not alive_pids(pids), wait, 0.5)
    alive = alive_pids(pids)
    assert not alive, "processes of the run still alive:\n" + "\n".join(alive)


def shm_segments() -> set[Path]:
    """MPI's shared-memory files: MPICH's mpich_shm_*, Open MPI's sm_segment.HOST.UID.JOB.RANK."""
    return {*Path("/dev/shm").glob("mpich_shm_*"), *Path("/dev/shm").glob("sm_segment.*")}


def mapped_files() -> set[Path]:
    """Every file some process has mapped (/proc/PID/maps)."""
    mapped = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            mapped.update(Path(line.split(maxsplit=5)[5].strip()) for line in maps.read_text().splitlines()
                          if line.count(" ") >= 5 and "/dev/shm/" in line)
        except OSError:
            pass
    return mapped


def field(records: list[dict], name: str, key: str):
    """A field of a rank's last event called name (None: no such event)."""
    found = [record["fields"].get(key) for record in records if record["event"] == name]
    return found[-1] if found else None


def rank_logs(job_dir: Path, ranks: int) -> list[list[dict]]:
    """Each rank's events (its last run)."""
    return [rank_events(job_dir, rank) for rank in range(ranks)]


def show_timings(capsys, request, **timings: float) -> None:
    """Show timings in the test output, even when pytest captures it."""
    with capsys.disabled():
        print("\n" + request.node.name + ": " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
    for key, value in timings.items():
        request.node.user_properties.append((key, round(value, 2)))


def wait_for_text(root: Path, pattern: str, text: str | re.Pattern[str] = "", timeout: float = JOB_TIMEOUT_S) -> Path:
    """The first path under root matching the glob pattern whose text holds text (a str: contains it, a compiled
    pattern: searches it; "": the path exists, a dir too), once there is one."""

    def holds(path: Path) -> bool:
        if not text:
            return True
        content = path.read_text(errors="replace") if path.is_file() else ""
        return text in content if isinstance(text, str) else text.search(content) is not None

    found = wait_for(lambda: next((path for path in sorted(root.glob(pattern)) if holds(path)), None), timeout)
    if found is None:
        pytest.fail(f"no {root}/{pattern} with {text!r} within {timeout:.0f} s")
    return found


WAITING_DRIVER = ROOT / "tests" / "slurm" / "elastic_driver.py"


@contextmanager
def waiting_cluster(tmp_path: Path, registry_root: Path, args=(), tag: str = "cluster") -> Iterator[tuple[str, object]]:
    """A 2-node cluster (mpirun) whose driver waits, published in the registry at registry_root: (its job id, its
    registry entry) while it runs. At the end its driver is released, and the job must end with 0."""
    from mpiray.elastic.registry import Registry

    job_id, marker, out_path = new_job_id(tag), tmp_path / f"{tag}-go", tmp_path / f"{tag}.out"
    argv = launcher_argv(2, ["--log-dir", str(tmp_path / "logs"), "--job-id", job_id, *args],
                         [PYTHON, str(WAITING_DRIVER), "wait-nodes", "2", str(marker)])
    with open(out_path, "w") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        registry, deadline = Registry(registry_root), time.monotonic() + JOB_TIMEOUT_S
        while not [e for e in registry.running() if e.job_id == job_id]:
            assert proc.poll() is None and time.monotonic() < deadline, out_path.read_text()[-3000:]
            time.sleep(0.3)
        yield job_id, registry.read(job_id)
        marker.touch()
        assert proc.wait(JOB_TIMEOUT_S) == 0, out_path.read_text()[-3000:]
    finally:
        marker.touch()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


# Ray's own log format, "[2026-11-23 15:38:07,407 E 32545 32545] ...", and Python's "... ERROR ...".
ERROR_LINE = re.compile(r"^\S*\[?\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ E \d+ \d+\]| E \d+ \d+\] |\bERROR\b")


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if ERROR_LINE.search(line)]


NOBODY = 65534
as_another_user = pytest.mark.skipif(
    os.getuid() != 0 or not shutil.which("setpriv") or not os.path.exists("/usr/bin/python3"),
    reason="attacks run as uid 65534 through setpriv: needs root, util-linux and /usr/bin/python3",
)


def make_private_dir_in_a_process_that_ends(root: Path) -> Path:
    """A private dir whose owner is gone: what a job step SIGKILLed whole (guard included) leaves."""
    made = subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; from mpiray.raynode.private import "
                           "PrivateDir; p = PrivateDir.create(Path(sys.argv[1]), 'r0'); p.write_token('t'); print(p.path)",
                           str(root)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    return Path(made.stdout.strip())


OLDEST = ROOT / ".envs" / "ray-2.52" / "bin" / "python"  # the oldest Ray's environment (tests/envs.sh ray-2.52)
SPILLER = ROOT / "tests" / "drivers" / "spiller.py"


needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mount") is None, reason="mounts a tmpfs: needs root")


@contextmanager
def tmpfs(size: str) -> Iterator[Path]:
    """A small RAM file system of its own, mounted for the test (root), unmounted after."""
    point = Path(tempfile.mkdtemp(prefix="pf", dir="/tmp"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(point)], check=True, timeout=30)
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False, timeout=30)
        point.rmdir()
