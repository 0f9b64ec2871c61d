"""PBS Pro and OpenPBS: a job's facts as PBS itself gives them (qstat), and worker jobs (qsub, qstat, qdel).

A PBS job's environment names its id and its node file, but not its walltime, nor where its chunks
went: `qstat -f -F json JOB` does (Resource_List.select and .walltime, exec_vnode, stime, run_count).
"""

from __future__ import annotations

import json
import re
import shlex
import time
from dataclasses import dataclass
from typing import ClassVar

from mpiray.batch.jobs import GONE, PENDING, RUNNING, CommandFailed, WorkerJob, run_command, script_body

DEFAULT_KILL_DELAY_S = 10.0  # PBS's, for a queue that sets none: qdel's SIGTERM to its SIGKILL

# qstat's one-letter job_state: queued, held, waiting, in transit, running, exiting, array job begun.
STATES = {"Q": PENDING, "H": PENDING, "W": PENDING, "T": PENDING, "R": RUNNING, "E": RUNNING, "B": RUNNING}


@dataclass(frozen=True)
class JobFacts:
    """A PBS job as qstat shows it."""

    job_id: str  # PBS's full id, e.g. 1234.server
    state: str  # job_state: Q, R, E, F, ...
    select: str  # Resource_List.select as asked: "3:ncpus=2+1:ncpus=8:ngpus=4"
    cpus: dict[str, int]  # host -> the CPUs PBS gave the job there (exec_vnode's ncpus)
    walltime: float | None  # seconds (Resource_List.walltime)
    started: float | None  # stime, seconds since 1970
    run_count: int  # 1 on the first run; qrerun and requeues add one
    exit_status: int | None = None  # once it ended
    queue: str = ""  # the queue it runs in (its kill_delay: qdel's SIGTERM to SIGKILL)

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(self.cpus)

    @property
    def ends_at(self) -> float | None:
        """When PBS ends the job for its walltime (it polls: up to a minute later, measured)."""
        return self.started + self.walltime if self.started is not None and self.walltime is not None else None


def job_facts(record: dict, job_id: str) -> JobFacts:
    """One job of `qstat -f -F json`'s "Jobs" (pure: tested on what the testbed's OpenPBS prints)."""
    resources = record.get("Resource_List", {})
    exit_status = record.get("Exit_status")
    return JobFacts(
        job_id=job_id, state=record.get("job_state", "?"), select=str(resources.get("select", "")),
        cpus=vnode_cpus(record.get("exec_vnode", "")), walltime=duration(resources.get("walltime")),
        started=stamp(record.get("stime")), run_count=int(record.get("run_count", 1) or 1),
        exit_status=int(exit_status) if exit_status is not None else None, queue=str(record.get("queue", "")),
    )


def vnode_cpus(exec_vnode: str) -> dict[str, int]:
    """'(n1:ncpus=2)+(n2:ncpus=2:mem=1gb)+(n1:ncpus=1)' -> {'n1': 3, 'n2': 2}: CPUs per host, in order.
    A vnode named host[0] (a host's part) counts for host."""
    cpus: dict[str, int] = {}
    for chunk in re.findall(r"\(([^)]*)\)", exec_vnode):
        for part in chunk.split("+"):
            vnode, *resources = part.split(":")
            host = vnode.split("[", 1)[0]
            found = [int(r.split("=", 1)[1]) for r in resources if r.startswith("ncpus=") and r[6:].isdigit()]
            cpus[host] = cpus.get(host, 0) + sum(found)
    return cpus


def select_chunks(select: str) -> list[tuple[int, dict[str, str]]]:
    """'3:ncpus=2+ngpus=1' -> [(3, {'ncpus': '2'}), (1, {'ngpus': '1'})]."""
    chunks = []
    for spec in filter(None, select.split("+")):
        parts = spec.split(":")
        count = int(parts[0]) if parts[0].isdigit() else 1
        fields = dict(part.split("=", 1) for part in parts[parts[0].isdigit():] if "=" in part)
        chunks.append((count, fields))
    return chunks


def duration(text: str | None) -> float | None:
    """PBS's [[HH:]MM:]SS (or plain seconds) -> seconds."""
    if not text:
        return None
    try:
        seconds = 0.0
        for part in str(text).split(":"):
            seconds = seconds * 60 + float(part)
        return seconds
    except ValueError:
        return None


def stamp(text: str | None) -> float | None:
    """qstat's 'Wed Nov 25 03:05:06 2026' (the server's local time) -> seconds since 1970."""
    try:
        return time.mktime(time.strptime(text, "%a %b %d %H:%M:%S %Y")) if text else None
    except ValueError:
        return None


def query(job_id: str) -> JobFacts:
    """The job as PBS shows it now (qstat -f -F json -x: finished jobs too, where the server keeps them)."""
    result = run_command(["qstat", "-f", "-F", "json", "-x", job_id])
    try:
        jobs = json.loads(result.stdout).get("Jobs", {})
    except ValueError:
        raise CommandFailed(f"qstat -f -F json {job_id}: not JSON: {result.stdout[:200]!r}") from None
    if len(jobs) != 1:
        raise CommandFailed(f"qstat -f -F json {job_id}: {len(jobs)} jobs")
    (full_id, record), = jobs.items()
    return job_facts(record, full_id)


def queue_fields(text: str) -> dict[str, str]:
    """`qstat -Qf QUEUE`'s "    name = value" lines -> {name: value} (pure: tested on what OpenPBS printed)."""
    return {name.strip(): value.strip() for name, sep, value in (line.partition(" = ") for line in text.splitlines())
            if sep}


def kill_delay(queue: str) -> float:
    """Seconds from qdel's SIGTERM to its SIGKILL in queue (PBS's default where the queue sets none)."""
    result = run_command(["qstat", "-Qf", queue])
    value = queue_fields(result.stdout).get("kill_delay")
    return float(value) if value and value.replace(".", "", 1).isdigit() else DEFAULT_KILL_DELAY_S


def dsv_states(text: str) -> dict[str, str]:
    """job id -> job_state, from `qstat -f -F dsv` (one line per job: 'Job Id: ID|name=value|...')."""
    states = {}
    for line in text.splitlines():
        head, _, rest = line.partition("|")
        if head.startswith("Job Id: "):
            fields = (field.partition("=") for field in rest.split("|"))
            # the first job_state: a later one could only be inside a value (Variable_List comes after it)
            state = next((value for name, _, value in fields if name == "job_state"), "")
            states[head[len("Job Id: "):].strip()] = state
    return states


def pbs_script(job: WorkerJob, node_id: int) -> str:
    select = f"select=1:ncpus={job.cpus}" + (f":ngpus={job.gpus}" if job.gpus else "")
    lines = ["#!/bin/bash", f"#PBS -N {job.name(node_id)}", f"#PBS -l {select}", "#PBS -j oe",
             f"#PBS -o {job.log_dir}/{job.name(node_id)}.out"]
    lines += [line for line in job.directives if line.startswith("#PBS")]
    command = job.join_command(node_id, ["mpiexec", "-n", "1"])
    return "\n".join([*lines, *script_body(job), "exec " + shlex.join(command), ""])


class Pbs:
    """jobs.BatchSystem under PBS (qsub from the head's node: some sites allow it only from login nodes)."""

    name: ClassVar[str] = "pbs"

    @staticmethod
    def script(job: WorkerJob, node_id: int) -> str:
        return pbs_script(job, node_id)

    def submit(self, script: str) -> str:
        return run_command(["qsub", "-"], script).stdout.strip()

    def states(self, job_ids: list[str]) -> dict[str, str]:
        if not job_ids:
            return {}
        # Not -F json: OpenPBS 23.06 prints only the first of several jobs in it. dsv: one line per job;
        # -x: a finished job is F (or, without job history, unknown: gone either way).
        result = run_command(["qstat", "-x", "-f", "-F", "dsv", *job_ids], check=False)
        seen = dsv_states(result.stdout)
        if not seen and result.returncode != 0 and "Unknown Job Id" not in result.stderr:
            raise CommandFailed(f"qstat exited {result.returncode}: {result.stderr.strip()[-500:]}")
        return {job: STATES.get(seen.get(job, ""), GONE) for job in job_ids}

    def cancel(self, job_ids: list[str]) -> None:
        if job_ids:
            run_command(["qdel", *job_ids], check=False)
