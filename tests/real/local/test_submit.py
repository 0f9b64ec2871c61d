"""`mpiray submit` and `mpiray jobs` (mpiray/elastic/submit.py) from a login host: a PID namespace of its own, with
no raylet in it, as in test_attach.py. The driver goes through Ray's Jobs API with the cluster's token, runs on
the head, and outlives its submitter; a request without the token is refused. And cluster_info.json."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from mpiray.elastic.registry import Registry

from helpers import BIN, JOB_TIMEOUT_S, PYTHON, ROOT, last_event, wait_for, wait_for_events, waiting_cluster

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                                reason="a login host is a PID namespace of its own: needs root and unshare")
REGISTRY_VARIABLE = "MPIRAY_REGISTRY"
LOGIN_HOST = ["unshare", "--pid", "--kill-child", "--mount-proc", "--"]
COUNT_NODES = "import ray; ray.init(); print('NODES', len(ray.nodes()), flush=True)"
# cluster_info.json's keys, as docs/logs.md lists them: programs on login nodes read them.
INFO_KEYS = ["job_id", "host", "head_ip", "gcs_address", "ray", "python", "scheduler", "ends_at", "dashboard_url",
             "jobs_url", "ray_client", "token_path", "tunnel", "submit", "nodes"]


@pytest.fixture
def cluster():
    """A 2-node cluster with --dashboard whose own driver waits: (job id, its registry entry, its job dir).

    Its registry and logs lie in a dir that every user may pass through (0711, as a home directory often is), so
    what keeps another user out is what mpiray made of them."""
    registry_before = os.environ[REGISTRY_VARIABLE]  # the session's private one (conftest.py)
    tmp_path = Path(tempfile.mkdtemp(prefix="mpiray-submit-"))
    tmp_path.chmod(0o711)
    os.environ[REGISTRY_VARIABLE] = str(tmp_path / "registry")  # for the launcher and every mpiray below
    try:
        with waiting_cluster(tmp_path, tmp_path / "registry", ["--dashboard"], tag="submit") as (job_id, entry):
            yield job_id, entry, tmp_path / "logs" / job_id
    finally:
        os.environ[REGISTRY_VARIABLE] = registry_before
        shutil.rmtree(tmp_path, ignore_errors=True)


def mpiray(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """`mpiray ARGS` on the login host."""
    return subprocess.run([*LOGIN_HOST, str(BIN / "mpiray"), *args], capture_output=True, text=True, timeout=timeout)


def status_of(job_id: str, submission: str) -> str:
    listing = mpiray("jobs", job_id)
    assert listing.returncode == 0, listing.stderr
    rows = [line.split() for line in listing.stdout.splitlines()[1:]]
    return {row[0]: row[1] for row in rows}.get(submission, "MISSING")


def wait_for_status(job_id: str, submission: str, wanted: str, timeout: float = JOB_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while (status := status_of(job_id, submission)) != wanted:
        assert time.monotonic() < deadline, f"{submission} is {status}, not {wanted}, after {timeout:g} s"
        time.sleep(1)


# Which node's raylet started the submitted driver's supervisor (its ancestor): the rank whose private dir holds
# its socket (mpiray-UID-rN-...). On one host every node has the same address, so neither ray.init() in the
# driver (the first raylet of that address) nor Ray's job logs (read through the agent at that address) can tell
# the nodes apart: the driver writes into a file.
WHERE_AM_I = ("import re, sys, psutil; raylet = next(p for p in psutil.Process().parents() if p.name() == 'raylet'); "
              "open(sys.argv[1], 'w').write(re.search(r'/mpiray-\\d+-(r\\d+)-', ' '.join(raylet.cmdline())).group(1))")


def test_a_submission_with_on_runs_on_a_node_of_that_label_and_without_on_the_head(cluster, tmp_path):
    job_id, entry, job_dir = cluster
    said = {}
    for on, rank in ((["--on", "mpiray.io/rank=1"], 1), ([], 0)):
        where = tmp_path / f"where-{rank}"
        placed = mpiray("submit", job_id, *on, "--", PYTHON, "-c", WHERE_AM_I, str(where))
        assert placed.returncode == 0, placed.stderr[-3000:]
        assert where.read_text() == f"r{rank}"
        said[rank] = placed.stderr
    assert "runs on a node labelled mpiray.io/rank=1" in said[1] and "runs on the head" in said[0]


def test_a_driver_submitted_from_a_login_host_runs_on_the_cluster_and_its_outcome_is_the_exit_code(cluster):
    job_id, entry, job_dir = cluster
    counted = mpiray("submit", job_id, "--", PYTHON, "-c", COUNT_NODES)
    assert counted.returncode == 0, counted.stderr[-3000:]
    assert "NODES 2" in counted.stdout
    failed = mpiray("submit", job_id, "--", PYTHON, "-c", "raise SystemExit(3)")
    assert failed.returncode == 3, failed.stderr[-3000:]
    assert "FAILED" in failed.stderr
    # and cluster_info.json says how to reach the cluster
    path = job_dir / "cluster_info.json"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    info = json.loads(path.read_text())
    assert list(info) == INFO_KEYS
    assert info["jobs_url"] == f"http://{entry.head_ip}:{entry.dashboard_port}"
    assert info["gcs_address"] == entry.gcs_address and info["ray_client"] == f"ray://{entry.head_ip}:{entry.client_port}"
    assert Path(info["token_path"]).read_text() == Registry(Path(info["token_path"]).parent).token(job_id)
    assert info["tunnel"] == f"ssh -N -L 8265:{entry.head_ip}:{entry.dashboard_port} {entry.host}"
    assert [node["rank"] for node in info["nodes"]] == [0, 1] and all(node["node_id"] for node in info["nodes"])


def test_a_submission_outlives_its_killed_submitter_and_a_stopped_one_leaves_the_cluster_up(cluster):
    job_id, _, _ = cluster
    submitter = subprocess.Popen([*LOGIN_HOST, str(BIN / "mpiray"), "submit", job_id, "--", PYTHON, "-c",
                                  "import time; time.sleep(4); print('SURVIVED', flush=True)"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = submitter.stderr.readline()  # "mpiray submit: ID on cluster JOB: ..." once Ray took it
        submission = line.split()[2]
        assert submission.startswith(f"mpiray-{job_id}-"), line
        submitter.kill()  # the shell that submitted it is gone (kill -9 of the whole login namespace)
    finally:
        submitter.kill()
        submitter.communicate(timeout=60)
    wait_for_status(job_id, submission, "SUCCEEDED")
    assert "SURVIVED" in mpiray("jobs", job_id, "logs", submission).stdout

    started = mpiray("submit", job_id, "--no-wait", "--", "sleep", "600")
    assert started.returncode == 0, started.stderr
    sleeper = started.stdout.strip()
    wait_for_status(job_id, sleeper, "RUNNING")
    stopped = mpiray("jobs", job_id, "stop", sleeper)
    assert stopped.returncode == 0 and "stopping" in stopped.stdout, stopped.stderr
    wait_for_status(job_id, sleeper, "STOPPED")
    again = mpiray("submit", job_id, "--", PYTHON, "-c", COUNT_NODES)  # the cluster is still up, whole
    assert again.returncode == 0 and "NODES 2" in again.stdout, again.stderr[-3000:]


def test_a_submission_runs_on_across_a_restart_of_the_heads_gcs_and_succeeds(cluster, tmp_path):
    """The head's gcs_server SIGKILLed while a submitted driver runs (mpiray starts it again: --gcs-restarts 3): the
    driver goes on, its submitter sees it end 0, and the Jobs API still knows it as SUCCEEDED (issue 61, item 1)."""
    job_id, _, job_dir = cluster
    up, go = tmp_path / "up", tmp_path / "go"
    driver = (f"import os, time, ray; ray.init(); open({str(up)!r}, 'w').close()\n"
              f"while not os.path.exists({str(go)!r}): time.sleep(0.2)\n"
              "print('NODES AFTER', len([n for n in ray.nodes() if n['Alive']]), flush=True)")
    submitter = subprocess.Popen([*LOGIN_HOST, str(BIN / "mpiray"), "submit", job_id, "--", PYTHON, "-c", driver],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        submission = submitter.stderr.readline().split()[2]  # "mpiray submit: ID on cluster JOB: ..."
        assert wait_for(up.exists, JOB_TIMEOUT_S), "the submitted driver never started"
        (gcs,) = [pid for pid in last_event(job_dir, 0, "node_pids")["pids"] if psutil.Process(pid).name() == "gcs_server"]
        os.kill(gcs, signal.SIGKILL)
        wait_for_events(job_dir / "rank-0000.jsonl", "gcs_back", timeout=60)
        go.touch()
        out, err = submitter.communicate(timeout=JOB_TIMEOUT_S)
    finally:
        if submitter.poll() is None:
            submitter.kill()
            submitter.communicate(timeout=60)
    assert submitter.returncode == 0, err[-3000:]
    assert "NODES AFTER 2" in out, out[-2000:]
    assert status_of(job_id, submission) == "SUCCEEDED"


def test_the_jobs_api_refuses_a_request_without_the_token_and_another_user_cannot_read_it(cluster):
    """It listens on the head's address, where every user of the network reaches it."""
    _, entry, job_dir = cluster
    assert entry.dashboard_host == entry.head_ip
    for token, code in ((None, 401), ("0" * 64, 403)):
        request = urllib.request.Request(f"http://{entry.head_ip}:{entry.dashboard_port}/api/jobs/",
                                         headers={"Authorization": f"Bearer {token}"} if token else {})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == code
    token_file = Path(json.loads((job_dir / "cluster_info.json").read_text())["token_path"])
    token = token_file.read_text()
    token_file.write_text("0" * 64)  # another cluster's token in the registry: one line, no traceback
    try:
        wrong = mpiray("jobs", entry.job_id)
    finally:
        token_file.write_text(token)
    assert wrong.returncode == 1 and wrong.stderr.startswith("mpiray jobs: Authentication failed"), wrong.stderr
    assert wrong.stderr.count("\n") == 1
    info = json.loads((job_dir / "cluster_info.json").read_text())
    for path in (info["token_path"], str(job_dir / "cluster_info.json")):
        # nobody gets as far as the file: each dir above it up to the 0711 one lets it pass
        assert subprocess.run(["runuser", "-u", "nobody", "--", "test", "-e", str(Path(path).parent.parent)],
                              timeout=30).returncode == 0
        attempt = subprocess.run(["runuser", "-u", "nobody", "--", "cat", path], capture_output=True, text=True,
                                 timeout=30)
        assert attempt.returncode != 0 and "Permission denied" in attempt.stderr, path


def test_a_notebook_on_a_login_host_drives_the_cluster(cluster):
    """jobs/cluster_notebook.ipynb, executed headless (nbclient, a real Jupyter kernel) on the login host."""
    job_id, _, _ = cluster
    script = ("import nbclient, nbformat, sys\n"
              "notebook = nbformat.read(sys.argv[1], as_version=4)\n"
              "nbclient.NotebookClient(notebook, timeout=240, kernel_name='python3').execute()\n"
              "print('\\n'.join(output.get('text', '') for cell in notebook.cells for output in cell.get('outputs', [])))\n")
    result = subprocess.run([*LOGIN_HOST, PYTHON, "-c", script, str(ROOT / "jobs" / "cluster_notebook.ipynb")],
                            capture_output=True, text=True, timeout=JOB_TIMEOUT_S,
                            env={**os.environ, "MPIRAY_NOTEBOOK_JOB": job_id})
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"cluster {job_id}: Ray " in result.stdout
    assert " SUCCEEDED" in result.stdout and "NODES 2" in result.stdout
