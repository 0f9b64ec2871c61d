"""Ray's own autoscaler grows and shrinks an mpiray cluster through this node provider: a new node is a
worker job on the batch scheduler (batch/) whose one rank joins the cluster (`mpiray run --join`).

Ray decides: its v1 monitor, which the head's `ray start --autoscaling-config` runs, sees the demand
(pending tasks and actors, placement groups: STRICT_SPREAD asks one node per bundle), bin-packs it onto
node types, and finds nodes idle for the cooldown; it drains a node through the GCS before it asks
for its end. This provider only does what it is told, safely:

- Identity: Ray's v1 matches a provider node to a Ray node by "IP"; with use_node_id_as_ip, a Ray node
  that offers the integer resource NODE_ID_AS_RESOURCE is known by it (each worker job's node gets its
  own), any other by its node id. The job's own nodes (its MPI ranks: the head and the static workers,
  listed by rank 0 in the static file) are reported too, the workers as unmanaged: their capacity
  counts, and Ray never launches or ends them.
- A worker job is "setting up" until its node joined (its job says so in the registry): reported up
  sooner, Ray's heartbeat check would end it.
- What Ray's v1 monitor lacks, mpiray's policy adds (the pains of dask-jobqueue's adapt()): never more
  than the cluster's MAX nodes pending and running; submits rate-limited; a job that ends before its
  node joined counts as failed, and the next submit waits (back-off), after MAX_FAILURES in a row no
  more (said in the log); a pending job stays queued as long as Ray wants its node (a production queue
  takes hours: cancelled and resubmitted, it would go to the back of the queue each time), unless
  --worker-pending-limit gives a limit, past which it is cancelled and counts as failed; when Ray ends an
  idle running node while a job is still pending, the pending job goes first.

Every decision is an event in LOG_DIR/JOB_ID/autoscaler-rank-0000.jsonl (`mpiray logs` shows them).
The state (jobs, failures) is a 0600 file beside the cluster's registry entry: rank 0 cancels every
worker job at the cluster's end from it, and a worker job that outlived a SIGKILLed head the others.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

from ray.autoscaler.node_provider import NodeProvider
from ray.autoscaler.tags import (
    NODE_KIND_HEAD,
    NODE_KIND_UNMANAGED,
    NODE_KIND_WORKER,
    STATUS_SETTING_UP,
    STATUS_UP_TO_DATE,
    TAG_RAY_NODE_KIND,
    TAG_RAY_NODE_NAME,
    TAG_RAY_NODE_STATUS,
    TAG_RAY_USER_NODE_TYPE,
)

from mpiray.batch.jobs import GONE, PENDING, RUNNING, CommandFailed, WorkerJob
from mpiray.batch.systems import SYSTEMS
from mpiray.elastic.autoscale import HEAD_TYPE, STATIC_TYPE, WORKER_TYPE, active_jobs, load, save
from mpiray.logs.events import RankLog

SUBMITS_PER_WINDOW, SUBMIT_WINDOW_S = 4, 10.0
BACKOFF_FIRST_S, MAX_FAILURES = 10.0, 3
REFRESH_S = 1.0  # the nodes are looked at at most this often (Ray asks the provider many times per update)
SCHEDULER_POLL_S = 10.0  # the scheduler is asked at most this often (--scheduler-poll): sites ask scripts to poll rarely


class BatchNodeProvider(NodeProvider):
    def __init__(self, provider_config: dict, cluster_name: str):
        super().__init__(provider_config, cluster_name)
        self.lock = threading.RLock()
        self.state_path = Path(provider_config["state"])
        self.static_path = Path(provider_config["static"])
        self.joins_dir = Path(provider_config["joins"])
        self.max_workers = int(provider_config["max_workers"])  # worker jobs pending + running, at most
        self.pending_limit = provider_config.get("pending_limit")  # seconds queued, at most (None: no limit)
        self.scheduler = SYSTEMS[provider_config["scheduler"]]()
        self.job = WorkerJob(**{**provider_config["worker_job"],
                                      "directives": tuple(provider_config["worker_job"].get("directives", ()))})
        self.state = load(self.state_path, {"next_id": 1, "jobs": {}, "failures": 0, "backoff_until": 0.0,
                                            "stopped": "", "submits": []})
        self.tags: dict[str, dict] = {}
        self.refreshed = 0.0
        self.scheduler_poll = float(provider_config.get("scheduler_poll") or SCHEDULER_POLL_S)
        self.asked = -float("inf")  # when the scheduler was last asked (monotonic)
        self.states: dict[str, str] = {}  # its answer then: job id -> PENDING, RUNNING, GONE
        self.unanswered = ""  # the scheduler's last failure to answer, said once while it lasts
        self.deferred = ""  # why the last submit Ray asked for had to wait
        self.log = RankLog(0, socket.gethostname())
        self.log.open(Path(provider_config["log_dir"]), prefix="autoscaler-")

    # ---- what Ray asks ------------------------------------------------------------------------

    def non_terminated_nodes(self, tag_filters: dict) -> list[str]:
        with self.lock:
            self._refresh()
            return [node for node, tags in self.tags.items()
                    if all(tags.get(key) == value for key, value in tag_filters.items())]

    def is_running(self, node_id: str) -> bool:
        with self.lock:
            job = self.state["jobs"].get(node_id)
            return job is None and node_id in self.tags or job is not None and job["state"] == RUNNING

    def is_terminated(self, node_id: str) -> bool:
        with self.lock:
            return node_id not in self.tags

    def node_tags(self, node_id: str) -> dict:
        with self.lock:
            return dict(self.tags.get(node_id, {}))

    def internal_ip(self, node_id: str) -> str:
        return node_id  # use_node_id_as_ip: NODE_ID_AS_RESOURCE, or the Ray node id of the job's own nodes

    def external_ip(self, node_id: str) -> str:
        return node_id

    def set_node_tags(self, node_id: str, tags: dict) -> None:
        with self.lock:
            if node_id in self.tags:
                self.tags[node_id].update(tags)

    def create_node(self, node_config: dict, tags: dict, count: int) -> dict:
        with self.lock:
            self._refresh(force=True)
            for _ in range(count):
                reason = self._cannot_submit()
                if reason:
                    if reason != self.deferred:  # said once while it lasts: Ray asks again every update
                        self.log.event("submit_deferred", reason=reason)
                    self.deferred = reason
                    break
                self.deferred = ""
                self._submit()
            save(self.state_path, self.state)
            return {}

    def terminate_node(self, node_id: str) -> dict:
        with self.lock:
            job = self.state["jobs"].get(node_id)
            if job is None or job["state"] == GONE:
                return {}
            pending = [n for n, j in self.state["jobs"].items() if j["state"] == PENDING and n != node_id]
            if job["state"] == RUNNING and pending:  # a queued job is worth less than an idle running node
                node_id, job = pending[-1], self.state["jobs"][pending[-1]]
                self.log.event("job_cancelled", node=node_id, job=job["job"], why="pending, before an idle running one")
            else:
                self.log.event("job_cancelled", node=node_id, job=job["job"],
                               why="idle for the cooldown" if job["state"] == RUNNING else "no longer needed")
            self.scheduler.cancel([job["job"]])
            job["state"], job["ended"] = GONE, time.time()
            self.tags.pop(node_id, None)
            save(self.state_path, self.state)
            return {}

    # ---- mpiray's policy ----------------------------------------------------------------------

    def _cannot_submit(self) -> str:
        now = time.time()
        if self.state["stopped"]:
            return self.state["stopped"]
        if len(active_jobs(self.state)) >= self.max_workers:
            return f"{self.max_workers} worker jobs pending or running already: the cluster's maximum"
        if now < self.state["backoff_until"]:
            until = time.ctime(self.state["backoff_until"])
            return f"backing off after {self.state['failures']} failed worker job(s), until {until}"
        recent = [t for t in self.state["submits"] if now - t < SUBMIT_WINDOW_S]
        if len(recent) >= SUBMITS_PER_WINDOW:
            return f"{SUBMITS_PER_WINDOW} submits in the last {SUBMIT_WINDOW_S:g} s: the rate limit"
        return ""

    def _submit(self) -> None:
        node_id = str(self.state["next_id"])
        self.state["next_id"] += 1
        try:
            job_id = self.scheduler.submit(self.scheduler.script(self.job, int(node_id)))
        except CommandFailed as error:
            self._failed(node_id, "", f"submit failed: {error}")
            return
        now = time.time()
        self.state["submits"] = [t for t in self.state["submits"] if now - t < SUBMIT_WINDOW_S] + [now]
        self.state["jobs"][node_id] = {"job": job_id, "state": PENDING, "submitted": now, "joined": False}
        self.tags[node_id] = self._worker_tags(node_id, joined=False)
        self.log.event("job_submitted", node=node_id, job=job_id, cpus=self.job.cpus, gpus=self.job.gpus,
                       job_name=self.job.name(int(node_id)))

    def _failed(self, node_id: str, job_id: str, why: str) -> None:
        state = self.state
        state["failures"] += 1
        # 10 s, then 20 s; the MAX_FAILURES-th in a row stops the submits instead (backoff 0: none follows).
        wait = BACKOFF_FIRST_S * 2 ** (state["failures"] - 1) if state["failures"] < MAX_FAILURES else 0.0
        state["backoff_until"] = time.time() + wait
        self.log.event("job_failed", node=node_id, job=job_id, why=why, failures=state["failures"], backoff=wait)
        if state["failures"] >= MAX_FAILURES:
            state["stopped"] = (f"{state['failures']} worker jobs in a row ended before their node joined (the last: "
                                f"{why}): no more are submitted; see their output in {self.job.log_dir}")
            self.log.event("submits_stopped", why=state["stopped"])

    def _refresh(self, force: bool = False) -> None:
        """The tags of every node: the head and static nodes rank 0 listed, and the worker jobs as the
        scheduler and the registry's joins show them now; each change of a job's state is an event."""
        if not force and time.monotonic() - self.refreshed < REFRESH_S:
            return
        self.refreshed = time.monotonic()
        static = load(self.static_path, {})
        tags = {static.get("head", "head"): self._tags(NODE_KIND_HEAD, HEAD_TYPE, "head", STATUS_UP_TO_DATE)}
        for node in static.get("workers", []):
            tags[node] = self._tags(NODE_KIND_UNMANAGED, STATIC_TYPE, node, STATUS_UP_TO_DATE)
        jobs = {node: job for node, job in self.state["jobs"].items() if job["state"] != GONE}
        states = self._ask_scheduler([job["job"] for job in jobs.values()])
        joined = self._joined()
        now = time.time()
        for node, job in jobs.items():
            # A job the scheduler has not been asked about since its submit is as it was (PENDING); one whose
            # node joined runs, whatever the last answer said: the join, not the next query, makes it up.
            new = states.get(job["job"], job["state"])
            if node in joined and new == PENDING:
                new = RUNNING
            if new == RUNNING and job["state"] == PENDING:
                self.log.event("job_started", node=node, job=job["job"], waited=round(now - job["submitted"], 1))
            if node in joined and not job["joined"]:
                job["joined"] = True
                self.state["failures"] = 0
                self.log.event("node_joined", node=node, job=job["job"], seconds=round(now - job["submitted"], 1))
            if new == GONE:
                job["ended"] = now
                if job["joined"]:
                    self.log.event("worker_job_ended", node=node, job=job["job"])
                else:
                    self._failed(node, job["job"], "it ended before its node joined")
            elif new == PENDING and self.pending_limit and now - job["submitted"] > self.pending_limit:
                self.scheduler.cancel([job["job"]])
                new, job["ended"] = GONE, now
                why = f"pending for more than --worker-pending-limit {self.pending_limit:g} s"
                self.log.event("job_cancelled", node=node, job=job["job"], why=why)
                self._failed(node, job["job"], why)  # backs off: resubmitted at once it would cycle in the queue
            job["state"] = new
            if new != GONE:
                tags[node] = self._worker_tags(node, joined=job["joined"])
        self.tags = {node: {**self.tags.get(node, {}), **tags[node]} for node in tags}  # Ray's own tags kept
        save(self.state_path, self.state)

    def _ask_scheduler(self, job_ids: list[str]) -> dict[str, str]:
        """The worker jobs' states, asked of the scheduler at most once per scheduler_poll seconds (else its last
        answer); a job it no longer lists is GONE."""
        if time.monotonic() - self.asked < self.scheduler_poll or not job_ids:
            return self.states
        self.asked = time.monotonic()
        try:
            answer = self.scheduler.states(job_ids)
        except CommandFailed as error:  # a busy or restarting server: the jobs stay as they were, asked again later
            if str(error) != self.unanswered:
                self.log.event("scheduler_unanswered", problem=str(error))
            self.unanswered = str(error)
            return self.states
        self.unanswered = ""
        self.states = {job_id: answer.get(job_id, GONE) for job_id in job_ids}
        return self.states

    def _joined(self) -> set[str]:
        """The provider's node ids whose Ray node joined (a worker job's Joiner writes that in the registry)."""
        found = set()
        for path in self.joins_dir.glob("*.json") if self.joins_dir.is_dir() else ():
            node = load(path, {}).get("provider_node")
            if node is not None:
                found.add(str(node))
        return found

    def _worker_tags(self, node: str, joined: bool) -> dict:
        return self._tags(NODE_KIND_WORKER, WORKER_TYPE, node, STATUS_UP_TO_DATE if joined else STATUS_SETTING_UP)

    @staticmethod
    def _tags(kind: str, node_type: str, name: str, status: str) -> dict:
        return {TAG_RAY_NODE_KIND: kind, TAG_RAY_USER_NODE_TYPE: node_type, TAG_RAY_NODE_NAME: name,
                TAG_RAY_NODE_STATUS: status}
