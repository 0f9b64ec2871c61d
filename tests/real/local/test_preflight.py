"""The pre-flight and the spill dir for real, where this machine can make the condition: a temp dir in RAM (a
warning), a full spill file system (a refusal, nothing of Ray started), ranks of another environment (a refusal
naming both), an open-file soft limit of 256 (raised: the raylet runs with the hard limit), a log dir each host
has its own of (a warning, on the Slurm testbed), and a driver that spills three times its object store on three
hosts (its files under the spill dir while it runs, nothing after), on this Ray and on Ray 2.52."""

from __future__ import annotations

import os
import resource
import shutil
import socket
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from mpiray.raynode.raycompat import ray_version

from helpers import (
    BIN,
    JOB_TIMEOUT_S,
    OLDEST,
    PYTHON,
    ROOT,
    START_RAY,
    driver_report,
    last_event,
    launch,
    launcher_argv,
    needs_root,
    new_job_id,
    rank_events,
    tmpfs,
)
from process_control import wait_for

STORE = 80 * 2**20  # the object store of each node: Ray's least is 75 MiB
@contextmanager
def sshfs_mount(root: Path):
    """A directory on a real network file system: sshfs (FUSE over SSH) from an sshd of the test's own on a
    loopback port (its own host key, key, config and PID, ended by PID); the kernel here has no NFS."""
    export, point, keys = root / "export", root / "mnt", root / "keys"
    for directory in (export, point, keys):
        directory.mkdir()
    for name in ("host", "user"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / name)], check=True, timeout=30)
    (keys / "authorized_keys").write_text((keys / "user.pub").read_text())
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    options = {"ListenAddress": "127.0.0.1", "Port": port, "HostKey": keys / "host", "PidFile": "none",
               "AuthorizedKeysFile": keys / "authorized_keys", "StrictModes": "no", "UsePAM": "no",
               "PermitRootLogin": "prohibit-password", "Subsystem": "sftp internal-sftp"}
    sshd = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", "/dev/null",
                             *[f"-o{key} {value}" for key, value in options.items()]], stderr=subprocess.DEVNULL)
    mount = None
    try:
        def listening() -> bool:
            with socket.socket() as client:
                return client.connect_ex(("127.0.0.1", port)) == 0

        assert wait_for(listening, 30), "the test's sshd does not listen"
        mount = subprocess.Popen(["sshfs", "-f", "-o", f"port={port},IdentityFile={keys / 'user'},"
                                  "StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null",
                                  f"root@127.0.0.1:{export}", str(point)], stderr=subprocess.PIPE, text=True)
        mounted = wait_for(lambda: mount.poll() is not None or f" {point} " in Path("/proc/self/mounts").read_text(), 30)
        assert mounted and mount.poll() is None, f"sshfs did not mount: {mount.stderr.read() if mount.poll() else ''}"
        yield point
    finally:
        if mount is not None:
            subprocess.run(["fusermount", "-u", str(point)], check=False, timeout=30, capture_output=True)
            try:
                mount.wait(timeout=30)
            except subprocess.TimeoutExpired:
                mount.kill()
                mount.wait()
        sshd.terminate()
        sshd.wait(timeout=30)


needs_sshfs = pytest.mark.skipif(os.geteuid() != 0 or not (shutil.which("sshfs") and Path("/usr/sbin/sshd").exists()),
                                 reason="mounts sshfs from its own sshd: needs root, sshfs and openssh-server")


@needs_sshfs
def test_a_temp_dir_on_a_network_file_system_is_refused_naming_it(tmp_path, short_tmp):
    with sshfs_mount(short_tmp) as remote:
        run = launch(tmp_path, 2, ["--temp-dir", str(remote)], driver=[PYTHON, "-c", "pass"], tag="nettemp")
        left_there = sorted(p.name for p in remote.iterdir())
    assert run.returncode == 2, run.stderr[-3000:]
    failed = run.event(0, "failed")
    assert failed["cause"] == "dir_network", failed
    assert f"the temp dir {remote} is on fuse.sshfs" in failed["message"]
    assert "node-local" in run.stderr  # the way out, said where the user looks
    assert left_there == []  # nothing made on the network file system
    for rank in (0, 1):
        assert "node_pids" not in [r["event"] for r in run.events(rank)]  # no `ray start` ran


@needs_root
def test_a_temp_dir_in_ram_is_a_warning_and_the_job_runs(tmp_path):
    with tmpfs("256m") as ram:
        run = launch(tmp_path, 1, ["--temp-dir", str(ram)], driver=[PYTHON, "-c", "pass"], tag="ramtemp")
    assert run.returncode == 0, run.stderr[-3000:]
    warned = [r["fields"] for r in run.events(0) if r["event"] == "preflight_warning"]
    assert [w["check"] for w in warned] == ["dir_ram"] and str(ram) in warned[0]["message"]
    assert "warning: pre-flight on" in run.stderr  # said where the user looks, once


@needs_root
def test_a_spill_file_system_96_percent_full_is_refused_before_any_ray_starts(tmp_path):
    with tmpfs("20m") as small:
        with open(small / "ballast", "wb") as ballast:  # 96% of it
            ballast.write(b"\0" * int(20 * 2**20 * 0.96))
        run = launch(tmp_path, 2, ["--spill-dir", str(small)], driver=[PYTHON, "-c", "pass"], tag="spillfull")
        leftovers = sorted(p.name for p in small.iterdir())
    assert run.returncode == 2, run.stderr[-3000:]
    failed = run.event(0, "failed")
    assert failed["cause"] == "dir_full" and f"the spill dir {small} is 96% full of bytes" in failed["message"]
    for rank in (0, 1):
        names = [r["event"] for r in run.events(rank)]
        assert "node_pids" not in names and "head_alive" not in names  # no `ray start` ran
    assert not list(run.job_dir.glob("*.ray.log")) or all(
        "ray start" not in p.read_text() for p in run.job_dir.glob("*.ray.log"))
    assert leftovers == ["ballast"]  # and no spill dir made on a refused job's host


@pytest.mark.skipif(not OLDEST.exists(), reason="needs .envs/ray-2.52 (bash tests/envs.sh ray-2.52 --build-only)")
def test_ranks_of_another_environment_are_refused_naming_both_and_nothing_starts(tmp_path):
    """An MPMD mpirun: rank 1 from another venv (Ray 2.52), as a job whose compute nodes have another environment."""
    job_id = new_job_id("skew")
    common = [str(START_RAY), "--log-dir", str(tmp_path / "logs"), "--job-id", job_id, "--", PYTHON, "-c", "pass"]
    argv = [str(BIN / "mpirun"), "-np", "1", PYTHON, *common, ":", "-np", "1", str(OLDEST), *common]
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
    assert result.returncode == 2, result.stderr[-3000:]
    job_dir = tmp_path / "logs" / job_id
    failed = last_event(job_dir, 0, "failed")
    assert failed["cause"] == "version_skew"
    assert f"ray {ray_version()}" in failed["message"] and "but 2.52.0 on 1 host" in failed["message"] and "ranks 1)" in \
        failed["message"]
    for rank in (0, 1):
        assert "node_pids" not in [r["event"] for r in rank_events(job_dir, rank)]


def test_the_open_file_soft_limit_is_raised_for_ray_to_the_hard_limit(tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip(f"the hard limit here is {hard}")
    probe = ("import json, os, psutil; rank0 = psutil.Process(os.getppid()); "
             "raylets = [p for p in rank0.children(recursive=True) if p.name() == 'raylet']; "
             "print('LIMITS ' + json.dumps([p.rlimit(psutil.RLIMIT_NOFILE) for p in raylets]))")
    argv = ["bash", "-c", 'ulimit -Sn 256 && exec "$@"', "bash",
            *launcher_argv(1, ["--log-dir", str(tmp_path / "logs"), "--job-id", new_job_id("nofile")],
                           [PYTHON, "-c", probe])]
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
    assert result.returncode == 0, result.stderr[-3000:]
    limits = driver_report(result.stdout, "LIMITS", result.stderr)
    assert limits and all(limit == [hard, hard] for limit in limits), limits
    (job_dir,) = (tmp_path / "logs").iterdir()
    fixed = [r["fields"] for r in rank_events(job_dir, 0) if r["event"] == "preflight_fixed"]
    assert fixed and "soft limit 256 raised" in fixed[0]["message"]






def test_the_dry_run_runs_the_pre_flight_too(tmp_path):
    run = launch(tmp_path, 2, ["--dry-run"], tag="dryflight")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "mpiray: pre-flight: 1 host" in run.stdout and f"python {sys.version.split()[0]}" in run.stdout
    assert run.event(0, "preflight")["groups"][0]["ranks"] == [0, 1]
