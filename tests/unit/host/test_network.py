"""Port blocks and their locks (abstract unix socket names), including attacks by a real second user."""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import select
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mpiray.errors import ConfigError
from mpiray.host import portblocks

ROOT = Path(__file__).resolve().parents[3]
NOBODY = 65534


def unique_prefix() -> str:
    """Lock names of this test alone, so it neither sees nor blocks real launchers on the host."""
    return f"mpiray-test-{secrets.token_hex(4)}"


def read_line(proc: subprocess.Popen, timeout: float = 10) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, f"{proc.args} printed nothing in {timeout} s"
    return proc.stdout.readline().strip()


@contextlib.contextmanager
def started(argv: list[str], **kwargs):
    """A process that the test ends by its PID, whatever happens."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, **kwargs)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        for pipe in (proc.stdin, proc.stdout):
            pipe.close()


def spans(*blocks) -> list[set[int]]:
    return [set(range(b.base, b.base + b.size)) for b in blocks]


# --- one host, several launchers ------------------------------------------------------------------

def test_two_launchers_starting_together_get_different_port_blocks():
    # Both see the same ports free (nothing listens yet); the lock decides. The same job id makes
    # both start from the same candidate, as two job ids do that hash to one slot.
    prefix = unique_prefix()
    first = portblocks.free_block("job-1", 2, lock_prefix=prefix)
    second = portblocks.free_block("job-1", 2, lock_prefix=prefix)
    assert second.base != first.base
    assert not spans(first)[0] & spans(second)[0]
    assert any(f"ports {first.base}-{first.base + 199} skipped: another process holds its lock "
               f"@{prefix}-{first.base}" == note for note in second.notes), second.notes
    first.release()
    third = portblocks.free_block("job-1", 2, lock_prefix=prefix)
    assert third.base == first.base
    second.release()
    third.release()


def test_a_larger_block_does_not_overlap_a_held_smaller_one():
    prefix = unique_prefix()
    held = portblocks.free_block("job-1", 1, lock_prefix=prefix)
    # A job (4 ranks on the host) whose first candidate covers the held block.
    job = next(f"job-{i}" for i in range(2, 10_000)
               if 0 <= held.base - portblocks.candidate_bases(f"job-{i}", 4)[0] < 4 * portblocks.UNIT)
    bigger = portblocks.free_block(job, 4, lock_prefix=prefix)
    assert bigger.base != portblocks.candidate_bases(job, 4)[0]
    assert held.base not in range(bigger.base, bigger.base + bigger.size)
    assert any(f"holds its lock @{prefix}-{held.base}" in note for note in bigger.notes), bigger.notes
    bigger.release()
    held.release()


def test_threads_taking_blocks_at_once_get_disjoint_ones():
    prefix, count = unique_prefix(), 8
    start, blocks = threading.Barrier(count), []

    def take():
        start.wait(timeout=10)
        blocks.append(portblocks.free_block("job-1", 2, lock_prefix=prefix))

    threads = [threading.Thread(target=take) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(blocks) == count
    taken = spans(*blocks)
    assert sum(map(len, taken)) == len(set().union(*taken))
    for block in blocks:
        block.release()


CHILD = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from mpiray.host import portblocks
block = portblocks.free_block(sys.argv[1], 2, lock_prefix=sys.argv[2])
print(block.base, flush=True)
sys.stdin.read()  # hold the block until the test closes stdin
"""


def test_processes_with_different_tmpdirs_get_disjoint_blocks(tmp_path):
    # Per-job TMPDIRs (as batch systems set them) must not split the locks.
    prefix, count = unique_prefix(), 4
    with contextlib.ExitStack() as stack:
        procs = []
        for index in range(count):
            tmpdir = tmp_path / f"job-tmp-{index}"
            tmpdir.mkdir()
            env = {**os.environ, "TMPDIR": str(tmpdir)}
            procs.append(stack.enter_context(started([sys.executable, "-c", CHILD, "job-1", prefix], env=env)))
        bases = [int(read_line(proc)) for proc in procs]
        for proc in procs:
            proc.stdin.close()
        assert [proc.wait(timeout=10) for proc in procs] == [0] * count
    taken = [set(range(base, base + 200)) for base in bases]
    assert sum(map(len, taken)) == len(set().union(*taken)), bases


def test_a_killed_holder_leaves_no_stale_lock():
    prefix = unique_prefix()
    with started([sys.executable, "-c", CHILD, "job-1", prefix]) as proc:
        base = int(read_line(proc))
        proc.kill()
        proc.wait(timeout=10)
    block = portblocks.free_block("job-1", 2, lock_prefix=prefix)
    assert block.base == base
    block.release()


# --- why a candidate is skipped, and what the caller is told --------------------------------------

def test_a_port_a_finished_job_left_in_time_wait_is_free_for_the_next_job():
    # The server side of a closed connection keeps its port in TIME_WAIT for a minute; Ray's servers
    # bind with SO_REUSEADDR, so the next job on the host can use the block (seen: a test right after
    # a Ray job found its block "in use").
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Ray's servers do
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        server, _ = listener.accept()
        server.close()  # the side that closes first keeps the port in TIME_WAIT
        client.close()
    assert f":{port} " in subprocess.run(["ss", "-tanH", "state", "time-wait"], capture_output=True,
                                         text=True, timeout=10).stdout + " "
    assert portblocks.port_is_free(port)
    with socket.socket() as listener:  # while something listens there, it is not
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("", port))
        listener.listen()
        assert not portblocks.port_is_free(port)


def test_a_block_with_a_port_in_use_is_skipped_and_noted():
    prefix = unique_prefix()
    first = portblocks.candidate_bases("job-1", 1)[0]
    with socket.socket() as listener:
        try:
            listener.bind(("", first + 7))
        except OSError:
            pytest.skip(f"port {first + 7} is in use on this host already")
        listener.listen()
        block = portblocks.free_block("job-1", 1, lock_prefix=prefix)
    assert block.base != first
    assert f"ports {first}-{first + 99} skipped: port {first + 7} is in use" in block.notes
    assert f"@{prefix}-{block.base}" in block.notes[-1] and "locked" in block.notes[-1]
    # The skipped block's lock was given back at once.
    again = portblocks.free_block("job-1", 1, lock_prefix=prefix)
    assert again.base == first
    again.release()
    block.release()


def test_the_block_holding_the_gcs_port_is_skipped_and_noted():
    first = portblocks.candidate_bases("job-1", 2)[0]
    block = portblocks.free_block("job-1", 2, reserved=first + 150, lock_prefix=unique_prefix())
    assert block.base != first
    assert f"ports {first}-{first + 199} skipped: they include the GCS port {first + 150}" in block.notes
    block.release()


def test_when_every_block_is_held_the_error_says_so_within_seconds():
    prefix = unique_prefix()
    bases = portblocks.candidate_bases("job-1", 1)
    holders = []
    try:
        for base in bases:
            holder = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            holders.append(holder)
            holder.bind(f"\0{prefix}-{base}")
        started_at = time.monotonic()
        with pytest.raises(ConfigError) as error:
            portblocks.free_block("job-1", 1, lock_prefix=prefix)
        assert time.monotonic() - started_at < 2
    finally:
        for holder in holders:
            holder.close()
    message = str(error.value)
    assert f"of {len(bases)} candidate blocks, {len(bases)} held by other launchers" in message
    assert f"@{prefix}-PORT" in message and "network namespace" in message


def test_locks_that_cannot_be_taken_are_reported_not_silently_dropped():
    # A lock name past the 107-byte limit of a unix socket address: the bind fails, as it would if a
    # security module refused abstract sockets.
    block = portblocks.free_block("job-1", 1, lock_prefix="x" * 120)
    assert block.locks == []
    assert block.notes[0].startswith("port locks off: binding an abstract unix socket failed")
    assert "only the port check decides" in block.notes[0]
    block.release()


# --- attacks by a real second user (nobody) -------------------------------------------------------

def nobody_argv() -> list[str] | None:
    if shutil.which("setpriv"):  # execs the program itself: its PID is the one the test ends
        return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    if shutil.which("runuser"):
        return ["runuser", "-u", pwd.getpwuid(NOBODY).pw_name, "--"]
    return None


def _nobody_exists() -> bool:
    try:
        pwd.getpwuid(NOBODY)
    except KeyError:
        return False
    return True


as_root_with_nobody = pytest.mark.skipif(
    os.geteuid() != 0 or nobody_argv() is None or not _nobody_exists() or not Path("/usr/bin/python3").exists(),
    reason="needs root, uid 65534, setpriv or runuser, and /usr/bin/python3 (the venv is under /root)",
)

# Run as nobody: bind each name (abstract, of the given socket type), say so, hold them for at most
# the given seconds (the test ends it by PID before that).
SQUATTER = """
import os, socket, sys, time
kind = getattr(socket, sys.argv[1])
held = []
for name in sys.argv[3:]:
    sock = socket.socket(socket.AF_UNIX, kind)
    sock.bind("\\0" + name)
    if kind != socket.SOCK_DGRAM:
        sock.listen()
    held.append(sock)
print("ready", os.getuid(), flush=True)
time.sleep(float(sys.argv[2]))
"""

# Run as nobody: plant, at each path, a FIFO, a symlink to the target, or a directory.
PLANTER = """
import os, sys
for spec in sys.argv[1:]:
    kind, path, target = spec.split("|")
    if kind == "fifo":
        os.mkfifo(path, 0o666)
    elif kind == "symlink":
        os.symlink(target, path)
    else:
        os.mkdir(path, 0o755)
print("planted", os.getuid(), flush=True)
"""


@contextlib.contextmanager
def squatting(kind: str, names: list[str]):
    argv = [*nobody_argv(), "/usr/bin/python3", "-I", "-c", SQUATTER, kind, "30", *names]
    with started(argv, cwd="/", env={"PATH": "/usr/bin:/bin"}) as proc:
        assert read_line(proc) == f"ready {NOBODY}"
        yield proc
    assert proc.returncode is not None


@as_root_with_nobody
def test_another_user_holding_the_first_blocks_lock_makes_us_take_another_in_time():
    job = f"attack-{secrets.token_hex(3)}"
    first = portblocks.candidate_bases(job, 1)[0]
    with squatting("SOCK_STREAM", [portblocks.lock_name(first).removeprefix("@")]):
        started_at = time.monotonic()
        block = portblocks.free_block(job, 1)
        took = time.monotonic() - started_at
        block.release()
    assert took < 2
    assert block.base != first
    assert f"ports {first}-{first + 99} skipped: another process holds its lock @mpiray-port-{first}" in block.notes


@as_root_with_nobody
def test_another_user_cannot_hold_our_lock_with_another_socket_type():
    job = f"attack-{secrets.token_hex(3)}"
    first = portblocks.candidate_bases(job, 1)[0]
    name = portblocks.lock_name(first).removeprefix("@")
    with squatting("SOCK_DGRAM", [name]), squatting("SOCK_SEQPACKET", [name]):
        block = portblocks.free_block(job, 1)
        block.release()
    assert not any("holds its lock" in note for note in block.notes), block.notes


@as_root_with_nobody
def test_another_user_holding_every_lock_gets_a_clear_error_in_seconds():
    prefix = unique_prefix()  # the real names would stop real launchers on this host meanwhile
    bases = portblocks.candidate_bases("job-1", 1)
    with squatting("SOCK_STREAM", [f"{prefix}-{base}" for base in bases]):
        started_at = time.monotonic()
        with pytest.raises(ConfigError, match=f"{len(bases)} held by other launchers"):
            portblocks.free_block("job-1", 1, lock_prefix=prefix)
        assert time.monotonic() - started_at < 2


@as_root_with_nobody
def test_files_another_user_plants_where_lock_files_could_be_change_nothing(tmp_path, monkeypatch):
    # FIFOs, symlinks and a foreign-owned dir at every lock-file path an mpiray used or might use
    # (its old /tmp/mpiray-ports, lock files in the sticky system dirs) and a TMPDIR of nobody's:
    # the locks are no files, so none of it can hang, redirect or switch off the locking.
    job = f"attack-{secrets.token_hex(3)}"
    first = portblocks.candidate_bases(job, 2)[0]
    target = tmp_path / "roots-file"
    target.write_text("root's\n")
    before = target.stat()
    missing = tmp_path / "must-not-be-created"
    old_dir = Path("/tmp/mpiray-ports")
    nobody_tmp = Path("/tmp") / f"mpiray-nobody-tmp-{secrets.token_hex(3)}"
    sticky = [d for d in (Path("/run/lock"), Path("/dev/shm"), Path("/tmp"))
              if d.is_dir() and not d.is_symlink() and d.stat().st_mode & stat.S_ISVTX]
    specs, planted = [], []
    if not old_dir.exists():
        specs.append(f"dir|{old_dir}|")
        planted.append(old_dir)
    specs.append(f"dir|{nobody_tmp}|")
    planted.append(nobody_tmp)
    for directory in sticky:
        for base, kind, to in ((first, "fifo", ""), (first + 100, "symlink", target), (first + 200, "symlink", missing)):
            path = directory / f"mpiray-port-{base}.lock"
            if not os.path.lexists(path):
                specs.append(f"{kind}|{path}|{to}")
                planted.append(path)
    try:
        argv = [*nobody_argv(), "/usr/bin/python3", "-I", "-c", PLANTER, *specs]
        result = subprocess.run(argv, cwd="/", env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=10)
        assert result.stdout.strip() == f"planted {NOBODY}", result.stderr
        if old_dir in planted:  # nobody's 0755 dir at the old place, with a FIFO inside it
            specs = [f"fifo|{old_dir / f'{first}.lock'}|"]
            argv = [*nobody_argv(), "/usr/bin/python3", "-I", "-c", PLANTER, *specs]
            subprocess.run(argv, cwd="/", env={"PATH": "/usr/bin:/bin"}, capture_output=True, timeout=10, check=True)
        monkeypatch.setenv("TMPDIR", str(nobody_tmp))
        started_at = time.monotonic()
        block = portblocks.free_block(job, 2)
        took = time.monotonic() - started_at
        block.release()
    finally:
        for path in reversed(planted):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif os.path.lexists(path):
                path.unlink()
    assert took < 2
    assert "locked until the job ends" in block.notes[-1]
    assert not any("locks off" in note or "holds its lock" in note for note in block.notes), block.notes
    after = target.stat()
    assert (after.st_mode, after.st_uid, after.st_size, after.st_mtime_ns) == (
        before.st_mode, before.st_uid, before.st_size, before.st_mtime_ns)
    assert target.read_text() == "root's\n"
    assert not missing.exists()


def test_port_blocks_do_not_overlap_and_hold_every_port():
    first, second = portblocks.node_ports(20000), portblocks.node_ports(20000 + portblocks.UNIT)
    assert not set(first.all()) & set(second.all())
    assert len(set(first.all())) == portblocks.UNIT


@pytest.mark.parametrize("cpus, gpus, units", [
    (1, 0, 1), (2, 0, 1), (26, 0, 1),  # today's small nodes: 92 worker ports, as before
    (28, 0, 1), (36, 0, 2), (64, 0, 2), (104, 0, 3), (104, 4, 3), (128, 8, 4), (192, 0, 5),
])
def test_a_nodes_block_grows_with_its_cpus_and_gpus(cpus, gpus, units):
    assert portblocks.node_units(cpus, gpus) == units
    ports = portblocks.node_ports(20000, units=units)
    workers = ports.max_worker - ports.min_worker + 1 - portblocks.HEAD_EXTRAS  # what a head has left for workers
    assert workers >= 2 * cpus + 2 * gpus  # a worker per CPU, and as many idle ones Ray keeps and prestarts
    assert len(set(ports.all())) == units * portblocks.UNIT


def test_a_hosts_nodes_lie_one_after_the_other_each_with_its_own_size():
    head, big, small = portblocks.host_ports(20000, [1, 3, 1], gcs_port=6380)
    assert (head.gcs, head.node_manager, head.max_worker) == (6380, 20001, 20099)
    assert (big.gcs, big.min_worker, big.max_worker) == (20100, 20108, 20399)
    assert (small.node_manager, small.max_worker) == (20401, 20499)


def test_candidate_blocks_depend_on_the_job_and_stay_in_range():
    a = portblocks.candidate_bases("job-1", 4)
    b = portblocks.candidate_bases("job-2", 4)
    assert a[0] != b[0]
    assert sorted(a) == sorted(b)
    assert all(portblocks.PORT_RANGE[0] <= base and base + 4 * portblocks.UNIT <= portblocks.PORT_RANGE[1] for base in a)
