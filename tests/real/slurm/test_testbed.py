"""The Slurm testbed itself: three idle hosts, MPI across them with PMI2, singletons without it,
TCP between the hosts (on eth0 and on hsn0), and exit codes of failed batch jobs."""

import json
import os
import socket
import subprocess
import sys
import textwrap
import time

from slurm import testbed

# The project venv: the testbed's nodes share this filesystem.
PYTHON = sys.executable
STEP_TIMEOUT_S = 60

# Prints what one task sees: MPI rank and size, its address on the testbed network, its
# hostname, and the scheduler/PMI variables the launcher detects srun by.
MPI_PROBE = textwrap.dedent("""
    import json, os, socket, sys
    from mpi4py import MPI
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.connect((sys.argv[1], 9))  # no packet is sent; picks the source address
        ip = udp.getsockname()[0]
    # Kept short: srun cuts output lines longer than 1 KiB and interleaves the tasks' pieces.
    env = {k: v for k, v in os.environ.items()
           if k in ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_MPI_TYPE") or k.startswith("PMI")}
    comm = MPI.COMM_WORLD
    print(json.dumps({"rank": comm.Get_rank(), "size": comm.Get_size(), "ip": ip,
                      "hostname": socket.gethostname(), "env": env}), flush=True)
""")

# Task 0 listens on its node, task 1 connects to it by hostname from another node.
TCP_PROBE = textwrap.dedent("""
    import os, socket, time
    if os.environ["SLURM_PROCID"] == "0":
        server = socket.create_server(("0.0.0.0", 47011))
        server.settimeout(30)
        conn, peer = server.accept()
        conn.sendall(b"pong " + conn.recv(64))
        print("server", peer[0], flush=True)
    else:
        deadline = time.monotonic() + 30
        while True:
            try:
                conn = socket.create_connection((os.environ["SERVER"], 47011), timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        conn.sendall(b"ping")
        print("client", conn.recv(64).decode(), flush=True)
""")


def srun_probe(bed, *srun_args):
    result = bed.run(["srun", *srun_args, PYTHON, "-c", MPI_PROBE, bed.controller_ip],  # a bare mpi4py program
                     timeout=STEP_TIMEOUT_S, env={**os.environ, **testbed.BARE_MPI_ENV})
    assert result.returncode == 0, result.stderr
    return sorted((json.loads(line) for line in result.stdout.splitlines()),
                  key=lambda task: task["env"]["SLURM_PROCID"])


def test_three_nodes_idle(slurm_testbed):
    # Jobs of earlier tests may still be completing; the nodes return to idle within seconds.
    deadline = time.monotonic() + 30
    while (states := slurm_testbed.node_states()) != dict.fromkeys(slurm_testbed.node_names,
                                                                   "idle"):
        assert time.monotonic() < deadline, f"nodes not idle: {states}"
        time.sleep(0.5)


def test_srun_pmi2_spans_three_hosts(slurm_testbed):
    tasks = srun_probe(slurm_testbed, "-N3", "-n3", "--mpi=pmi2")
    assert [task["rank"] for task in tasks] == [0, 1, 2]
    assert {task["size"] for task in tasks} == {3}
    assert [task["ip"] for task in tasks] == slurm_testbed.node_ips
    assert [task["hostname"] for task in tasks] == slurm_testbed.node_names
    assert all(task["env"]["SLURM_MPI_TYPE"] == "pmi2" for task in tasks)


def test_srun_without_pmi_gives_singletons(slurm_testbed):
    tasks = srun_probe(slurm_testbed, "-N3", "-n3")
    assert [(task["rank"], task["size"]) for task in tasks] == [(0, 1)] * 3
    assert [task["env"]["SLURM_PROCID"] for task in tasks] == ["0", "1", "2"]
    assert {task["env"]["SLURM_NTASKS"] for task in tasks} == {"3"}
    # What tells the launcher it is an MPI singleton under srun: no PMI wire-up at all.
    for task in tasks:
        assert "SLURM_MPI_TYPE" not in task["env"]
        assert not [name for name in task["env"] if name.startswith("PMI")]


def test_hosts_talk_tcp_by_hostname(slurm_testbed):
    first, second = slurm_testbed.nodes[:2]
    result = slurm_testbed.run(
        ["srun", "-N2", "-n2", f"--nodelist={first.name},{second.name}", "--label",
         PYTHON, "-c", TCP_PROBE],
        env={**slurm_testbed.env(), "SERVER": first.name}, timeout=STEP_TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == [f"0: server {second.ip}", "1: client pong ping"]


def test_hosts_route_only_the_private_subnet(slurm_testbed):
    first, second = slurm_testbed.nodes[:2]
    in_second = ["nsenter", f"--net={second.netns_path}"]
    route = subprocess.run([*in_second, "ip", "-4", "route", "get", first.ip],
                           capture_output=True, text=True, timeout=STEP_TIMEOUT_S, check=True)
    assert f"src {second.ip}" in route.stdout
    default = subprocess.run([*in_second, "ip", "-4", "route", "show", "default"],
                             capture_output=True, text=True, timeout=STEP_TIMEOUT_S, check=True)
    assert default.stdout == ""


def test_hosts_talk_tcp_over_hsn0(slurm_testbed):
    # A second network, as a site's Slingshot: a subnet of its own, named NAME.hsn.testbed, while a host's own
    # name (and so a job's default choice) stays on the management network, eth0.
    first, second = slurm_testbed.nodes[:2]
    assert socket.gethostbyname(first.name) == first.ip
    assert socket.gethostbyname(first.hsn_name) == first.hsn_ip
    route = subprocess.run(["nsenter", f"--net={second.netns_path}", "ip", "-4", "route", "get", first.hsn_ip],
                           capture_output=True, text=True, timeout=STEP_TIMEOUT_S, check=True)
    assert "dev hsn0" in route.stdout and f"src {second.hsn_ip}" in route.stdout
    result = slurm_testbed.run(
        ["srun", "-N2", "-n2", f"--nodelist={first.name},{second.name}", "--label",
         PYTHON, "-c", TCP_PROBE],
        env={**slurm_testbed.env(), "SERVER": first.hsn_name}, timeout=STEP_TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == [f"0: server {second.hsn_ip}", "1: client pong ping"]


def test_failing_batch_job_reports_exit_code(slurm_testbed, tmp_path):
    script = tmp_path / "fail.sh"
    script.write_text("#!/bin/bash\n#SBATCH --nodes=1\necho started on $(hostname)\nexit 3\n")
    output = tmp_path / "fail.out"
    submitted = slurm_testbed.run(["sbatch", "--wait", "--parsable", f"--output={output}",
                                   str(script)], timeout=STEP_TIMEOUT_S)
    assert submitted.returncode == 3, submitted.stderr
    job_id = submitted.stdout.strip()
    result = slurm_testbed.wait_for_job(job_id, timeout=STEP_TIMEOUT_S)
    assert result == testbed.JobResult(state="FAILED", exit_code=3, signal=0)
    assert output.read_text().startswith("started on mpiray-node")
