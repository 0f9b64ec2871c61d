"""The rank log as typed events: each step a rank takes is one event, a name and its fields.

A rank writes every event twice, to LOG_DIR/JOB_ID/:
- rank-NNNN.jsonl, for programs: one JSON object per line (the schema below). `mpiray logs`, the
  live start-up line and the tests read these, never the English.
- rank-NNNN.log, for people: the event rendered through its KINDS text, one timestamped line.
So a message's wording can change freely; what a program relies on is an event's name and fields.

Schema version SCHEMA (docs/logs.md lists every event and its fields):
    {"v": 1, "time": 1764000000.123, "rank": 0, "host": "n1", "pid": 4242, "event": "head_alive",
     "level": "info", "fields": {"gcs_address": "10.0.0.1:25200", ...}}
time: seconds since 1970 on the rank's clock; pid: the rank's process (a re-used job id appends a
new run, a new pid); level: info, warning or error (from KINDS).
Events of a rank before it knows the job id (a worker waits for rank 0's) are kept in memory and
written when the log opens.
"""

from __future__ import annotations

import json
import os
import string
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, TextIO

from mpiray.logs.files import open_append, rank_events_name, rank_log_name

SCHEMA = 1
INFO, WARNING, ERROR = "info", "warning", "error"


@dataclass
class Kind:
    level: str
    text: str  # str.format over the event's fields (and rank, host): the human log's line
    # A driver's kind that explains why it failed: (what happened, the fix), which `mpiray logs` gives as the job's
    # cause when the driver's exit code is not 0 (driver.job_log writes the declaration into the log).
    cause: tuple[str, str] | None = None


def event_kinds(**kinds: tuple[str, str] | tuple[str, str, tuple[str, str]]) -> dict[str, Kind]:
    """A table of event kinds: name=(level, text) or (level, text, (cause, fix)). mpiray's is KINDS; a driver's log
    has its own (driver.job_log)."""
    return {name: Kind(*spec) for name, spec in kinds.items()}


DECLARED = "kinds_declared"  # a driver's log's first event: the kinds it writes, as `mpiray logs` reads them
DECLARED_KIND = Kind(INFO, "this log's event kinds: {names}")  # fields: names, kinds (name -> level, text, cause)


def declaration(kinds: Mapping[str, Kind]) -> dict:
    """The DECLARED event's fields for a table of kinds."""
    return {"names": ", ".join(kinds), "kinds": {name: {"level": kind.level, "text": kind.text,
                                                        "cause": list(kind.cause) if kind.cause else None}
                                                 for name, kind in kinds.items()}}


# Every event a rank writes, in the order a job meets them. Fields are named in the text, or listed
# in a comment where the text leaves some out (docs/logs.md is checked against this table).
KINDS = event_kinds(
    # -- start-up ------------------------------------------------------------------------------
    qdel_cuts_grace=(WARNING, "PBS's queue {queue} kills a job {kill_delay:g} s after a qdel's SIGTERM, before the "
                               "driver's --stop-grace {grace:g} s and Ray's stop end: a qdel'ed driver may lose its "
                               "checkpoint (the walltime stop gives it the whole grace); lower --stop-grace, or ask "
                               "the site for a longer kill_delay"),
    netmod_chosen=(INFO, "MPI: the PyPI MPICH wheel's network module set to {netmod} (MPIR_CVAR_CH4_NETMOD; its "
                         "default, UCX, can fail MPI_Init under srun --mpi=pmi2), over libfabric's {provider} "
                         "provider in MPI_Init (FI_PROVIDER; MPICH's own pick, sockets, can hang there); set "
                         "them yourself to choose others"),
    launched=(INFO, "started by {launcher} (task {task}), before MPI_Init"),  # + scheduler, mpi_type, netmod
    rank_started=(INFO, "mpiray on {host} (pid {pid}): rank {rank} of {size}, {launch}, {mpi}, Ray {ray}, "
                        "Python {python}"),  # + scheduler, launcher, job_id
    waiting_for_session=(INFO, "waiting for rank 0's session"),
    session_sent=(INFO, "session sent to {workers} workers: the head will be at {gcs_address}"),
    no_auth=(WARNING, "--no-auth: anyone who can reach this cluster's ports can join it and run code"),
    stale_dirs_removed=(INFO, "removed {count} private dir(s) of this user's ranks that were killed before they "
                              "could (their job step was SIGKILLed): {paths}"),
    port_note=(INFO, "ports: {note}"),
    preflight=(INFO, "pre-flight: {summary}"),
    preflight_warning=(WARNING, "pre-flight on {host}: {message}; {fix}"),
    preflight_fixed=(INFO, "pre-flight on {host}: {message}"),
    link_check=(INFO, "pre-flight: links: {summary} (judged against --slow-link {floor:g}: {judged})"),
    link_check_failed=(WARNING, "pre-flight: this host takes no part in the link check: {problem}"),
    nodes_excluded=(WARNING, "pre-flight: {hosts} left out of the cluster ({nodes} of {requested} Ray nodes start): "
                             "{why}; for the next submission: {exclude}"),
    spares_chosen=(INFO, "--spares: {hosts} kept as spares (ranks {ranks}): each starts when a node is lost"),
    spare_waiting=(INFO, "this host is a spare: its node starts when a worker's node is lost"),
    spare_activated=(WARNING, "rank {peer}'s node was lost: starting the spare ranks {ranks} ({left} spares left)"),
    spare_started=(INFO, "this spare starts its node: a worker's node was lost"),
    spare_joined=(INFO, "the spare rank {peer} on {peer_host} joined at {ip} (node {node_id:.12}), {seconds:g} s after "
                        "it was started"),
    spare_failed=(ERROR, "a spare's node did not start: {message}"),  # + peer, peer_host at rank 0
    no_spare_left=(WARNING, "rank {peer}'s node was lost and no spare is left: the cluster runs smaller"),
    host_refused=(WARNING, "the pre-flight refused this host, which runs no Ray: {why}"),
    spill_dir=(INFO, "Ray spills objects to {path} (made by this rank: {made})"),
    resource_note=(INFO, "resources: {note}"),
    container=(INFO, "this node's Ray runs in {reference} (container {name}), with {binds} bound"),
    resources_given=(INFO, "resources given to Ray: {cpus} CPUs, GPUs [{gpus}], memory {memory_mib} MiB, "
                           "object store {object_store_mib} MiB"),
    ports_planned=(INFO, "ports: block {first}-{last}, GCS {gcs}, {workers} for worker processes"),
    dry_run_node=(INFO, "dry run: would start a Ray {role} node: {command}"),
    private_dir=(INFO, "private dir (0700, token and Ray's temp dir): {path}"),
    node_starting=(INFO, "starting a Ray {role} node: {command}"),  # + argv
    node_output=(INFO, "Ray output: {output}; Ray's session logs kept in {kept_logs} at the end"),
    dashboard=(INFO, "dashboard and Jobs API on {listen}:{port} of {host}: `mpiray submit JOB_ID -- CMD` runs a "
                     "driver through it, `mpiray dashboard JOB_ID` prints the ssh tunnel and how to log in"),
    worker_will_connect=(INFO, "this worker's node at {ip} will join {gcs_address}"),
    compat_note=(INFO, "Ray compatibility: {note}"),  # + key
    join_retry=(WARNING, "{reason}; the head is up: starting this rank's node again (attempt {attempt} of "
                         "{attempts}; stopped what the last one left: {stopped})"),
    head_retry=(WARNING, "{reason}; starting the head's node again (attempt {attempt} of {attempts}; stopped what "
                         "the last one left: {stopped})"),
    head_alive=(INFO, "head ALIVE at {gcs_address} (node {node_id:.12}, {cpus:g} CPUs, {gpus:g} GPUs, "
                      "{memory_gib:.1f} GiB)"),  # + ip
    node_alive=(INFO, "this worker's node is ALIVE at {ip} (node {node_id:.12}, {cpus:g} CPUs, {gpus:g} GPUs, "
                      "{memory_gib:.1f} GiB)"),
    node_pids=(INFO, "Ray node processes: pids {pids}"),
    idle_by_design=(INFO, "one Ray node per host: this host's first rank runs it; this rank stays idle"),
    worker_waiting=(INFO, "rank {peer} on {peer_host} is waiting for its node (log: {log})"),
    join_granted=(INFO, "join slot for rank {peer} ({in_use} of a window of {window} in use)"),
    worker_joined=(INFO, "rank {peer}'s node at {ip} joined ({cpus:g} CPUs, {gpus:g} GPUs, {memory_gib:.1f} GiB, "
                         "{seconds:.1f} s)"),  # + node_id, peer_host
    worker_idle=(INFO, "rank {peer} runs no Ray node: its host's runs on the host's first rank, or the pre-flight "
                       "left its host out"),
    cluster_ready=(INFO, "all {workers} workers reported: {nodes} Ray nodes, {cpus:g} CPUs, {gpus:g} GPUs, ready "
                         "after {seconds:.1f} s"),
    node_manifest=(INFO, "node manifest: {ip} ({interface}), ports {listening}, Ray {ray}, token {token}"),
    published=(INFO, "this cluster is in the registry {root} as {job_id}: other jobs can --join it, shells attach"),
    metrics_targets=(INFO, "this job's {nodes} Ray nodes are listed for Prometheus in {path} (file_sd_configs: "
                           "prometheus/*.json of the cluster's log dir)"),
    metrics_targets_failed=(WARNING, "{path} could not be written ({problem}): Prometheus will not find this job's "
                                     "nodes there"),
    nodes_draining=(INFO, "Ray told that the workers' {nodes} nodes go in {seconds} s ({why}): Ray's libraries see "
                          "them draining (reason preemption) while the driver runs"),
    drain_failed=(WARNING, "Ray could not be told that the nodes go ({problem}): the driver still gets SIGTERM and "
                           "its whole grace"),
    node_draining=(INFO, "rank 0 drains this rank's node through Ray ({why}): Ray ends it at once if it is idle"),
    node_drained=(INFO, "this rank's Ray node ended as Ray drained it (code {code}; see {output})"),
    cluster_info=(INFO, "how to reach this cluster from a login node (Jobs API, tunnel, nodes): {path}"),
    cluster_info_failed=(WARNING, "{path} could not be written ({problem}): mpiray list and the registry still "
                                  "say how to reach the cluster"),
    registry_failed=(WARNING, "the cluster registry {root} cannot be used ({problem}): --join and attach will not "
                              "find this cluster"),
    joining=(INFO, "joining cluster {cluster} at {gcs_address} (its head on {head_host}) with {workers} more ranks"),
    batch_job=(INFO, "{scheduler} job {job_id}: select {select}, CPUs per host {cpus}, walltime {walltime} s, run "
                     "{run_count}"),  # + hosts, started, ends_at (seconds since 1970)
    batch_job_unknown=(WARNING, "{scheduler} job {job_id}: not known to this host's scheduler commands ({problem}): "
                                "no walltime deadline is kept"),
    select_without_ncpus=(WARNING, "select {select} names no ncpus: PBS gives such a chunk 1 CPU, and its Ray node "
                                   "offers 1 (ask for them: select=N:ncpus=C)"),  # + cause
    ranks_outside_job=(WARNING, "ranks {ranks} run on {hosts}, which are not this job's hosts {job_hosts}: their mpiexec "
                                "reached them outside PBS, which will neither count nor end them"),  # + cause
    # -- the leader's step (rank 0) ------------------------------------------------------------
    serving=(INFO, "this job's {nodes} nodes ({cpus} CPUs) serve cluster {cluster} until it ends or this job does"),
    cluster_ended=(INFO, "cluster {cluster} ended: this job's nodes leave it"),
    dry_run=(INFO, "dry run: no Ray was started, and no driver runs ({command})"),
    driver_started=(INFO, "driver started (pid {pid}): {command}; its output is also in {output}"),
    script_connected=(INFO, "this script is connected to the cluster as its driver (mpiray.init): {gcs_address}"),
    driver_exited=(INFO, "the driver exited with code {code}"),
    script_ended=(INFO, "the script ended with code {code} ({how})"),
    stop_signal=(WARNING, "signal {signum}: SIGTERM to the driver, {grace:g} s to finish"),
    time_limit=(ERROR, "the driver ran past --time-limit {limit:g} s: SIGTERM, then SIGKILL after {grace:g} s"),
    walltime_watched=(INFO, "the batch job's walltime ends at {ends_at:.0f}: the driver is stopped {margin:g} s before, "
                            "in {seconds:g} s (--walltime-margin)"),
    walltime_near=(ERROR, "the batch job's walltime ends in {margin:g} s: SIGTERM to the driver, then SIGKILL after "
                          "{grace:g} s, before the batch system kills the job"),  # + ends_at, cause
    gcs_lost=(WARNING, "the head's GCS died (code {code}, pid {pid}): {restarts_left} restart(s) left "
                       "(--gcs-restarts)"),
    gcs_back=(INFO, "the head's GCS answers again: restart {restart} (pid {pid})"),  # + of, seconds (or answered)
    head_lost=(ERROR, "the head's Ray node exited (code {code}, see {output}): stopping the driver"),
    script_stuck=(ERROR, "the script did not end within {grace:g} s of being told to: ending this process "
                         "without it"),
    node_lost=(WARNING, "rank {peer}'s Ray node is gone: {message}"),
    host_lost=(WARNING, "worker host {peer_host} is gone ({address} has not answered for {silent:g} s), with ranks "
                        "{ranks}: the job goes on without them"),
    beacon_failed=(WARNING, "this spare host gives rank 0 no port to knock on ({problem}): if it dies while it waits, "
                            "rank 0's message to start it may hold rank 0"),
    driver_log_incomplete=(WARNING, "driver.log is incomplete ({problem}; {dropped} lines not written): the "
                                    "driver's output went to this job's stdout/stderr only"),
    # -- failures ------------------------------------------------------------------------------
    failed=(ERROR, "{message}"),  # + cause: this rank's own failure
    worker_failed=(ERROR, "rank {peer} on {peer_host} failed: {message} (log: {log})"),  # + cause
    startup_timeout=(ERROR, "{missing_count} worker(s) did not join within --startup-timeout {timeout:g} s: "
                            "{missing_text}"),  # + missing [{rank, host, log}]
    unexpected=(ERROR, "unexpected failure:\n{traceback}"),
    own_node_exited=(ERROR, "this rank's Ray node exited with code {code} (see {output})"),
    head_host_lost=(ERROR, "the head's GCS at {gcs_address} has not answered for {silent:g} s: its host is down or "
                    "cut off, and rank 0 with it; this rank ends with 1"),
    # -- an elastic cluster (autoscale.py on rank 0; provider.py, Ray's autoscaler, in autoscaler-rank-0000.*) --
    autoscaler_configured=(INFO, "autoscaler: {low} to {high} nodes ({own} this job's), worker jobs of {cpus} CPUs, "
                                 "{gpus} GPUs on {scheduler}, cancelled after {cooldown:g} s idle"),
    job_submitted=(INFO, "worker job {job} submitted for node {node} ({job_name}: {cpus} CPUs, {gpus} GPUs)"),
    submit_deferred=(INFO, "a worker job Ray asked for waits: {reason}"),
    job_started=(INFO, "worker job {job} (node {node}) started after {waited} s in the queue"),
    node_joined=(INFO, "node {node} of worker job {job} joined the cluster {seconds} s after its submit"),
    job_failed=(WARNING, "worker job {job} (node {node}) failed: {why}; {failures} in a row, next submit in "
                         "{backoff:g} s"),
    submits_stopped=(ERROR, "{why}"),
    scheduler_unanswered=(WARNING, "the scheduler did not say how the worker jobs are ({problem}): they are taken "
                                   "to be as they were, and asked again"),
    job_cancelled=(INFO, "worker job {job} (node {node}) cancelled: {why}"),
    worker_job_ended=(INFO, "worker job {job} (node {node}) ended"),
    worker_jobs_cancelled=(INFO, "the cluster ends: its worker jobs {jobs} are cancelled"),
    siblings_cancelled=(INFO, "the cluster ended without its head's word: its other worker jobs {jobs} are cancelled"),
    # -- the end -------------------------------------------------------------------------------
    signalled=(WARNING, "stopping on signal {signum}"),
    job_ended=(INFO, "rank 0 ended the job with exit code {code}"),
    node_exited_on_signal=(INFO, "this rank's Ray node exited with code {code} after the stop signal"),
    settle_late=(WARNING, "stopping the head although ranks {ranks} did not say their `ray start` is done"),
    stop_late=(WARNING, "stopping the head although ranks {ranks} did not say their Ray node stopped"),
    teardown_failed=(ERROR, "teardown: could not {step}: {problem} (continuing)"),
    driver_not_ended=(ERROR, "the driver (pid {pid}) did not end even after SIGKILL"),
    processes_stopped=(INFO, "stopped {count} processes this rank started in {seconds:.1f} s ({killed} needed "
                             "SIGKILL): pids {pids}"),
    logs_kept=(INFO, "Ray's session logs kept in {path}"),
    peer_missing=(WARNING, "not every rank reached the end (one may have died): exiting anyway"),
    messages_dropped=(INFO, "dropped {count} MPI messages this rank never read"),
    mpi_messages=(INFO, "MPI messages of this rank: {sent} sent, {received} received"),
    exit=(INFO, "exit code {code}"),
)


class _Fields(dict):
    """A missing field renders as its name in braces (a log line must never fail a rank)."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


class _Formatter(string.Formatter):
    def format_field(self, value, spec):
        try:
            return super().format_field(value, spec)
        except (TypeError, ValueError):  # e.g. "{cpus:g}" of a field that is missing or not a number
            return str(value)


_FORMATTER = _Formatter()


def text(name: str, fields: dict, kinds: Mapping[str, Kind] = KINDS) -> str:
    """What an event says, in words (its kind's text over its fields, and the record's rank, host, pid)."""
    return _FORMATTER.vformat(kinds[name].text, (), _Fields(fields))


def render(name: str, fields: dict, kinds: Mapping[str, Kind] = KINDS) -> str:
    """The human log's line of an event (without its time stamp): its text, marked if a warning or error."""
    return {WARNING: "WARNING: ", ERROR: "ERROR: "}.get(kinds[name].level, "") + text(name, fields, kinds)


def stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds)) + f".{int(seconds % 1 * 1000):03d}"


class RankLog:
    """This rank's events, written to rank-NNNN.jsonl and rendered to rank-NNNN.log once open().

    Warnings and errors also go to stderr, as one line each. listeners get every event as written
    (the live start-up line is one). Thread-safe: mpiray.init()'s rank 0 logs from two threads.
    """

    def __init__(self, rank: int, host: str, kinds: Mapping[str, Kind] = KINDS):
        self.rank, self.host, self.kinds = rank, host, kinds  # kinds: the events it may write (a driver's own)
        self.path: Path | None = None  # the human log
        self.events_path: Path | None = None
        self.listeners: list[Callable[[dict], None]] = []
        self._human: TextIO | None = None
        self._events: TextIO | None = None
        self._pending: list[dict] = []
        self._provisional: list[dict] | None = None  # what a provisional open's files hold so far
        self._lock = threading.Lock()

    def ranked(self, rank: int) -> None:
        """Its rank, once MPI_Init told it: a log made before (early_log) starts as rank 0's."""
        self.rank = rank

    def open(self, job_dir: Path, rank: int | None = None, prefix: str = "", provisional: bool = False) -> None:
        """Start writing into job_dir (rank: the file's number, if not this rank's own; prefix: a joining
        job's, before the file names).

        provisional: opened before MPI_Init, where the job's own log dir is known; a rank that learns it
        writes elsewhere (a job that joins another's cluster) moves what it wrote there at its next open.
        """
        number = self.rank if rank is None else rank
        path, events_path = job_dir / rank_log_name(number, prefix), job_dir / rank_events_name(number, prefix)
        with self._lock:
            if self._human is not None:
                if self._provisional is None or path == self.path:
                    self._provisional = None
                    return
                assert self._events is not None and self.path is not None and self.events_path is not None  # opened together
                self._human.close()  # the early files held only these records: they move
                self._events.close()
                self.path.unlink(missing_ok=True)
                self.events_path.unlink(missing_ok=True)
                try:
                    self.path.parent.rmdir()  # made for them alone (another rank of the job may still use it)
                except OSError:
                    pass
                self._pending, self._provisional = self._provisional, None
            self.path, self.events_path = path, events_path
            self._human = open_append(self.path, text=True)
            self._events = open_append(self.events_path, text=True)
            for record in self._pending:
                self._write(record)
            self._provisional = list(self._pending) if provisional else None
            self._pending.clear()

    def event(self, name: str, /, **fields) -> dict:
        """Log one event; returns its record."""
        if name not in self.kinds:
            raise KeyError(f"no such event kind: {name}")  # a typo in mpiray itself: fail its tests
        record = {"v": SCHEMA, "time": round(time.time(), 3), "rank": self.rank, "host": self.host,
                  "pid": os.getpid(), "event": name, "level": self.kinds[name].level, "fields": fields}
        with self._lock:
            if self._human is None:
                self._pending.append(record)
            else:
                self._write(record)
                if self._provisional is not None:
                    self._provisional.append(record)
        level = self.kinds[name].level
        if level != INFO:
            where = f" (log: {self.path})" if self.path and level == ERROR else ""
            said = text(name, {"rank": self.rank, "host": self.host, "pid": os.getpid(), **fields}, self.kinds)
            print(f"mpiray: rank {self.rank} ({self.host}): {level}: {said}{where}", file=sys.stderr, flush=True)
        for listener in self.listeners:
            listener(record)
        return record

    def _write(self, record: dict) -> None:
        assert self._human is not None and self._events is not None  # only while open
        line = render(record["event"], {"rank": self.rank, "host": self.host, "pid": record["pid"], **record["fields"]},
                      self.kinds)
        self._human.write(f"{stamp(record['time'])} rank {self.rank} ({self.host}): {line}\n")
        self._events.write(json.dumps(record, default=str) + "\n")

    def close(self, fallback_dir: Path | None = None, rank: int | None = None) -> None:
        """Close the files; a rank that never learned its job dir writes what it logged to fallback_dir."""
        if self._human is None and self._pending and fallback_dir is not None:
            self.open(fallback_dir, rank)
        with self._lock:
            for handle in (self._human, self._events):
                if handle is not None:
                    handle.close()
            self._human = self._events = None


def read_events(path: Path) -> list[dict]:
    """A rank's events file -> its records; a line cut short (the rank was killed mid-write) is skipped."""
    records = []
    with open(path, errors="replace") as lines:
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("v") == SCHEMA and "event" in record:
                records.append(record)
    return records
