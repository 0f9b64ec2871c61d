"""The Slurm testbed itself: three idle hosts, MPI across them with PMI2, singletons without it,
TCP between the hosts (on eth0 and on hsn0), exit codes of failed batch jobs; each host its own process table, /tmp,
TMPDIR and /dev/shm, and the knobs on one host: power off, cut off, memory, /dev/shm's size, clock."""

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import netns
from slurm import testbed

# The project venv: the testbed's nodes share this filesystem.
PYTHON = sys.executable
ROOT = Path(__file__).resolve().parents[3]
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


# --- hosts that are hosts: each node's own processes, /tmp, /dev/shm and TMPDIR; the knobs on one host ------------

# What one task sees of its host: its hostname, every process in its table, /tmp's entries, TMPDIR and its mode.
HOST_PROBE = textwrap.dedent("""
    import json, os, socket
    processes = [open(f"/proc/{pid}/comm").read().strip() for pid in os.listdir("/proc") if pid.isdigit()]
    tmpdir = os.environ.get("TMPDIR", "")
    print(json.dumps({"host": socket.gethostname(), "processes": processes, "tmp": sorted(os.listdir("/tmp")),
                      "tmpdir": tmpdir, "tmpdir_mode": oct(os.stat(tmpdir).st_mode & 0o777) if tmpdir else None}),
          flush=True)
""")


def host_probe(bed, *srun_args):
    result = bed.run(["srun", *srun_args, PYTHON, "-c", HOST_PROBE], timeout=STEP_TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    return {task["host"]: task for task in map(json.loads, result.stdout.splitlines())}


def test_a_file_in_one_hosts_tmp_is_not_in_anothers(slurm_testbed, tmp_path):
    first, second = slurm_testbed.nodes[:2]
    marker = f"/tmp/written-on-{first.name}-{os.getpid()}"
    shared = tmp_path / "shared-file"
    write = slurm_testbed.run(["srun", "-N1", f"--nodelist={first.name}", "sh", "-c",
                               f"echo x > {marker} && echo y > {shared}"], timeout=STEP_TIMEOUT_S)
    assert write.returncode == 0, write.stderr
    try:
        seen = host_probe(slurm_testbed, "-N2", "-n2", f"--nodelist={first.name},{second.name}")
        assert Path(marker).name in seen[first.name]["tmp"]
        assert Path(marker).name not in seen[second.name]["tmp"]
        assert not Path(marker).exists()  # nor on the machine's /tmp
        assert slurm_testbed.room.path(first, marker).read_text() == "x\n"
        # What a site shares stays shared: pytest's dir (the submit dir of every test) is one on all hosts.
        assert shared.read_text() == "y\n"
        # No host sees another's /tmp through the testbed's state dir, which all share.
        assert not host_probe(slurm_testbed, "-N1", f"--nodelist={second.name}")[second.name]["tmp"].count(
            str(slurm_testbed.room.hosts_dir))
        peek = slurm_testbed.run(["srun", "-N1", f"--nodelist={second.name}", "ls", "-A",
                                  str(slurm_testbed.room.hosts_dir)], timeout=STEP_TIMEOUT_S)
        assert peek.returncode == 0 and peek.stdout == "", peek.stdout + peek.stderr
    finally:
        slurm_testbed.room.path(first, marker).unlink(missing_ok=True)


def test_each_host_has_its_own_process_table_and_a_private_tmpdir_per_job(slurm_testbed):
    seen = host_probe(slurm_testbed, "-N3", "-n3")
    assert sorted(seen) == slurm_testbed.node_names
    for host, task in seen.items():
        # One slurmd, one slurmstepd: its own; the machine's slurmctld and the other hosts' slurmd are not there.
        assert task["processes"].count("slurmd") == 1 and "slurmctld" not in task["processes"], (host, task)
        assert task["processes"].count("slurmstepd") == 1, (host, task)
        assert task["tmpdir"].startswith("/tmp/scratch/") and task["tmpdir_mode"] == "0o700", task
    (job_tmpdir,) = {task["tmpdir"] for task in seen.values()}
    node = slurm_testbed.nodes[0]
    # The epilog removes the job's TMPDIR from each host once the job has ended.
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while slurm_testbed.room.path(node, job_tmpdir).exists():
        assert time.monotonic() < deadline, f"{job_tmpdir} left on {node.name}"
        time.sleep(0.5)


def test_a_host_powered_off_loses_every_process_at_once_and_powers_on_again(slurm_testbed):
    node = slurm_testbed.nodes[2]
    before = netns.processes_on(node)
    assert before, "the host runs its slurmd"
    netns.power_off(node)
    try:
        assert netns.processes_on(node) == []
        assert not [pid for pid in before if netns.alive(pid)]
        # A dead host answers no one: a connect gets no refusal from its kernel, only silence.
        with socket.socket() as client:
            client.settimeout(1)
            with pytest.raises(OSError) as knock:
                client.connect((node.ip, testbed.SLURMD_PORT))
            assert not isinstance(knock.value, ConnectionRefusedError), knock.value
    finally:
        testbed.start_slurmd(slurm_testbed, node, detach=True)
    deadline = time.monotonic() + 60
    while slurm_testbed.node_states().get(node.name) != "idle":
        assert time.monotonic() < deadline, slurm_testbed.node_states()
        time.sleep(0.5)
    assert node.name in host_probe(slurm_testbed, "-N1", f"--nodelist={node.name}")


def test_a_host_cut_off_is_unreachable_while_its_processes_live_on(slurm_testbed):
    node = slurm_testbed.nodes[1]
    slurmd = [pid for pid in netns.processes_on(node) if Path(f"/proc/{pid}/comm").read_text().strip() == "slurmd"]

    def reaches_slurmd() -> bool:
        with socket.socket() as client:
            client.settimeout(2)
            return client.connect_ex((node.ip, testbed.SLURMD_PORT)) == 0

    assert reaches_slurmd()
    netns.cut_off(node)
    try:
        assert not reaches_slurmd()
        assert all(netns.alive(pid) for pid in slurmd) and slurmd
    finally:
        netns.cut_off(node, up=True)
    assert reaches_slurmd()


def test_a_hosts_memory_limit_is_what_mpiray_reads_and_what_the_kernel_enforces(slurm_testbed):
    node = slurm_testbed.nodes[0]
    if netns.memory_cgroup(node) is None:
        pytest.skip("no cgroup v1 memory controller here: the testbed's hosts have no memory knob")
    read = ("from mpiray.host.resources import _cgroup_memory_limit as limit; print(limit())")
    grab = "b = bytearray(400 * 2**20); print('held')"
    netns.limit_memory(node, 256 * 2**20)
    try:
        limit = slurm_testbed.run(["srun", "-N1", f"--nodelist={node.name}", f"--chdir={ROOT}", PYTHON, "-c", read],
                                  timeout=STEP_TIMEOUT_S)
        assert limit.stdout.strip() == str(256 * 2**20), limit.stdout + limit.stderr
        over = slurm_testbed.run(["srun", "-N1", f"--nodelist={node.name}", PYTHON, "-c", grab],
                                 timeout=STEP_TIMEOUT_S)
        assert over.returncode != 0 and "held" not in over.stdout, over.stdout + over.stderr
    finally:
        netns.limit_memory(node, None)
    fits = slurm_testbed.run(["srun", "-N1", f"--nodelist={node.name}", PYTHON, "-c", grab], timeout=STEP_TIMEOUT_S)
    assert fits.stdout.strip() == "held", fits.stderr


def test_a_hosts_dev_shm_and_clock_are_its_own(slurm_testbed):
    first, second = slurm_testbed.nodes[:2]
    probe = "import os, time; s = os.statvfs('/dev/shm'); print(s.f_blocks * s.f_frsize, time.time())"
    netns.resize_shm(second, "64m")
    testbed.set_clock(slurm_testbed, second, 3600)
    try:
        result = slurm_testbed.run(["srun", "-N2", "-n2", f"--nodelist={first.name},{second.name}", "--label",
                                    PYTHON, "-c", probe], timeout=STEP_TIMEOUT_S)
        now = time.time()
    finally:
        testbed.set_clock(slurm_testbed, second, None)
        netns.resize_shm(second, "50%")
    assert result.returncode == 0, result.stderr
    seen = {line.split(": ")[0]: line.split(": ")[1].split() for line in result.stdout.splitlines()}
    first_shm, first_time = int(seen["0"][0]), float(seen["0"][1])
    second_shm, second_time = int(seen["1"][0]), float(seen["1"][1])
    assert second_shm == 64 * 2**20 and first_shm > 1024 * 2**20, seen
    assert abs(first_time - now) < 30 and abs(second_time - now - 3600) < 30, (seen, now)


# Each task reads one file from the file server's mount and prints how long that took.
READ_PROBE = textwrap.dedent("""
    import sys, time
    started = time.time()  # the wall clock: the one clock the hosts share (a host's monotonic one is its own)
    with open(sys.argv[1], "rb") as data:
        while data.read(1 << 20):
            pass
    print(started, time.time(), flush=True)
""")


def test_three_hosts_reading_one_file_from_the_file_server_share_its_link(slurm_testbed):
    """/lustre is a real network mount (sshfs) behind one throttled link: three hosts reading a 64 MiB file at once
    take at least 2.5x one host's time, as on a parallel file system that all a job's nodes read from."""
    server = slurm_testbed.file_server
    data = server.export / f"read-{os.getpid()}.bin"
    data.write_bytes(os.urandom(64 * 2**20))
    data_bits = 64 * 2**20 * 8
    inside = server.mount_point / data.name
    try:
        mounts = slurm_testbed.run(["srun", "-N3", "sh", "-c", f"grep ' {server.mount_point} ' /proc/self/mounts"],
                                   timeout=STEP_TIMEOUT_S)
        assert mounts.stdout.count("fuse.sshfs") == 3, mounts.stdout + mounts.stderr
        # Alone twice, the faster counted: a first read of a host may wait on its mount's session, a busy CPU on ssh.
        ones = [slurm_testbed.run(["srun", "-N1", PYTHON, "-c", READ_PROBE, str(inside)], timeout=STEP_TIMEOUT_S)
                for _ in range(2)]
        assert all(one.returncode == 0 for one in ones), [one.stderr for one in ones]
        three = slurm_testbed.run(["srun", "-N3", PYTHON, "-c", READ_PROBE, str(inside)], timeout=STEP_TIMEOUT_S)
        assert three.returncode == 0, three.stderr
    finally:
        data.unlink()
    alone = min(end - start for start, end in (map(float, one.stdout.split()) for one in ones))
    # From the first start to the last end: srun starts the three readers up to seconds apart on a busy machine, and
    # one that starts late reads alone at the end, so the slowest reader's own time can be well under 2.5x.
    spans = [tuple(map(float, line.split())) for line in three.stdout.splitlines()]
    together = max(end for _, end in spans) - min(start for start, _ in spans)
    # The link, not the CPUs, sets the pace: one host alone reads at no more than the link's rate...
    link_s = data_bits / (int(server.rate.removesuffix("mbit")) * 1e6)
    assert alone >= 0.9 * link_s, f"one host read 64 MiB in {alone:.2f} s: faster than the link ({link_s:.2f} s)"
    # ...and three at once share it.
    assert together >= 2.5 * alone, f"one host {alone:.2f} s, three at once {together:.2f} s"
