"""Node labels for real (mpiray/raynode/labels.py): every Ray node of a job starts with mpiray's labels and the
user's, Ray reports them, and Ray's label selectors place a task and an actor by them. The pure parts are in
tests/unit/raynode/test_labels.py."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

from mpiray.raynode.labels import fitted

from helpers import assert_nothing_left, driver_report, launch

# The driver: every node's labels as Ray reports them, and where a task and an actor placed by label ran.
DRIVER = """
import json, ray
ray.init()
labels = {n["NodeID"]: n.get("Labels", {}) for n in ray.nodes() if n["Alive"]}
here = lambda: ray.get_runtime_context().get_node_id()
task = ray.remote(label_selector={"mpiray.io/rank": "1"})(here)
class Where:
    def where(self):
        return here()
actor = ray.remote(label_selector={"mpiray.io/rank": "0", "team": "rl"})(Where)
print("LABELS " + json.dumps({"nodes": sorted(labels.values(), key=lambda l: l.get("mpiray.io/rank", "")),
      "task": labels[ray.get(task.remote())].get("mpiray.io/rank"),
      "actor": labels[ray.get(actor.remote().where.remote())].get("mpiray.io/rank")}), flush=True)
"""


def test_every_node_carries_its_labels_and_a_task_and_an_actor_land_where_their_selectors_say(tmp_path):
    job = launch(tmp_path, 2, ["--labels", "team=rl", "--role", "rollout"], [sys.executable, "-c", DRIVER],
                 tag="labels")
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    found = driver_report(job.stdout, "LABELS", job.stderr)
    for rank, labels in enumerate(found["nodes"]):
        ours = {key: value for key, value in labels.items() if key.startswith("mpiray.io/") or key == "team"}
        assert ours == {"mpiray.io/job": job.job_dir.name, "mpiray.io/batch-job": job.job_dir.name,
                        "mpiray.io/host": fitted(socket.gethostname()), "mpiray.io/rank": str(rank),
                        "mpiray.io/role": "rollout", "team": "rl"}, labels
        assert labels["ray.io/market-type"] == "on-demand" and "ray.io/gpu-domain" not in labels  # Ray's, as ours
    assert (found["task"], found["actor"]) == ("1", "0")
    # What Ray holds is what the job's files say: cluster_info.json, each node's manifest, `mpiray logs`.
    info = json.loads((job.job_dir / "cluster_info.json").read_text())
    by_rank = {int(labels["mpiray.io/rank"]): labels for labels in found["nodes"]}
    for node in info["nodes"]:
        ray_labels = {k: v for k, v in by_rank[node["rank"]].items() if k != "ray.io/node-id"}  # Ray's own
        assert node["labels"] == ray_labels == job.event(node["rank"], "node_manifest")["labels"]
    shown = subprocess.run([sys.executable, "-m", "mpiray", "logs", str(job.job_dir)], capture_output=True, text=True,
                           timeout=60)
    assert "    labels: mpiray.io/batch-job=" in shown.stdout and "team=rl" in shown.stdout, shown.stdout[-3000:]
    assert_nothing_left(job)


def test_a_label_ray_would_refuse_stops_the_job_before_mpi_with_what_was_wrong(tmp_path):
    job = launch(tmp_path, 2, ["--labels", "ray.io/node-id=x"], [sys.executable, "-c", "pass"], tag="badlabel")
    assert job.returncode == 2
    assert "--labels" in job.stderr and "ray.io/ (Ray's) are set by them" in job.stderr
    assert not job.job_dir.exists() or not list(job.job_dir.glob("rank-*.ray.log"))  # no Ray node started


def test_a_role_for_ranks_the_job_does_not_have_stops_every_rank_before_any_ray_starts(tmp_path):
    job = launch(tmp_path, 2, ["--role", "trainer=0,rollout=2-"], [sys.executable, "-c", "pass"], tag="badrole")
    assert job.returncode == 2, job.stdout[-3000:] + job.stderr[-3000:]
    assert "--role rollout=2-: this job has 2 ranks (0-1)" in job.stderr
    for rank in (0, 1):  # each rank said why it stopped, and none started a Ray node
        assert "node_starting" not in job.names(rank) and job.event(rank, "exit")["code"] == 2
    assert_nothing_left(job)
