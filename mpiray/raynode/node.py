"""One Ray node's whole life on a rank: private dir, token, `ray start`, watch, stop, kept logs.

The safety rules of a shared node live here:
- The rank owns a private dir (private.py: 0700, made with mkdir, so nothing planted before can be
  reused); Ray gets its child `ray/`. Ray chmods the dir it is given (and its session, sockets and
  logs dirs) to 0777: harmless below a 0700 parent, which no other user can enter. The token lives
  beside `ray/`, not in it.
- A guard process (host/guard.py) removes that dir, and kills the node's process group, if the rank dies.
  When the batch system SIGKILLs every process of a job step, the guard goes too: the dir records
  its owner (host, PID, start time), and the next rank of this user on the host removes it.
- Ray's logs are kept beside the rank's own log with no group/other write bits, under a new name
  if a run with the same job id kept some there before.
- Files the rank writes in the log dir are opened without following symlinks (logs/files.py's open_append).

The other end of the protocol with `ray start` is starter.py: it waits for release(), then
prints the node's GCS record once ALIVE into the node's output, which wait_alive() reads.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from mpiray.deadline import Deadline, poll_until
from mpiray.errors import ConfigError, ForeignGcs, GcsOverloaded, LaunchError, NodeStartFailed, StartupTimeout
from mpiray.host import processes
from mpiray.host.guard import keep_ray_logs, remove_container, start_time
from mpiray.logs.files import open_append
from mpiray.raynode.gcs import NodeInfo
from mpiray.raynode.output import NodeOutput
from mpiray.raynode.private import GUARD_FILE, PrivateDir, remove_stale

if TYPE_CHECKING:
    from mpiray.raynode.commands import NodeSpec

STARTUP_POLL = 0.02  # seconds between looks at the node's output (in memory) while it starts: on the critical path
STACK_DUMP_WAIT = 0.5


class RayNode:
    """This rank's Ray node: prepare() -> start() -> release() -> wait_alive() -> ... -> stop() -> close()."""

    def __init__(self, private: PrivateDir, guard: processes.Guard, output_path: Path, kept_logs: Path,
                 *, token_path: Path | None = None, swept: Sequence[Path] = ()):
        self.private = private
        self.guard = guard
        self.output_path = output_path
        self.kept_logs = kept_logs
        self.token_path = token_path  # the cluster's token, in the private dir (None: --no-auth)
        self.proc: subprocess.Popen | None = None
        self.output: NodeOutput | None = None
        self.alive = False  # seen ALIVE in the GCS
        self.kept: Path | None = None  # where close() kept Ray's logs
        self.swept = list(swept)  # stale private dirs of killed ranks, removed by prepare()
        self.spec: NodeSpec | None = None  # what start() was asked to start
        self.times: dict[str, float] = {}  # time.time() of each start-up phase: started, released, alive, settled
        self.described = False  # its manifest was logged
        self.node_id: str | None = None  # Ray's, once ALIVE
        self.spill_dir: Path | None = None  # the job's spill dir on this host (spill.py), if it has one
        self.remove_container: list[str] = []  # removes its container by name after a stop (podman's), if any
        self.container_monitor: Path | None = None  # where that container's monitor wrote its PID

    @classmethod
    def prepare(cls, temp_root: Path, label: str, output_path: Path, kept_logs: Path, *, token: str | None) -> RayNode:
        """The private dir (with the token) and its guard, before anything of Ray's runs; first,
        the dirs of this user's ranks that were killed before they could remove theirs."""
        swept = remove_stale(temp_root)
        private = PrivateDir.create(temp_root, label)
        try:
            guard = processes.Guard(private.path, kept_logs)
            private._write(GUARD_FILE, f"{guard.proc.pid} {start_time(guard.proc.pid)}\n")
            token_path = private.write_token(token) if token else None
        except BaseException:
            shutil.rmtree(private.path, ignore_errors=True)
            raise
        return cls(private, guard, output_path, kept_logs, token_path=token_path, swept=swept)

    @property
    def environment(self) -> dict[str, str]:
        """The environment its `ray start` was given ({} before start())."""
        return dict(getattr(self, "_env", {}))

    @property
    def ray_dir(self) -> Path:
        return self.private.ray_dir

    @property
    def started_process(self) -> subprocess.Popen:
        """Its `ray start` process, for the steps that come after start()."""
        if self.proc is None:
            raise RuntimeError("this Ray node's `ray start` was not started")
        return self.proc

    @property
    def started_output(self) -> NodeOutput:
        """What its `ray start` said, for the steps that come after start()."""
        if self.output is None:
            raise RuntimeError("this Ray node's `ray start` was not started")
        return self.output

    def start(self, argv: Sequence[str], env: dict[str, str], affinity: Sequence[int] = (), spec: NodeSpec | None = None,
              *, spill_dir: Path | None = None, container: tuple[list[str], Path | None] | None = None) -> None:
        """Run starter.py, which imports Ray's CLI now and runs `ray start` once released; all
        of the node's processes on the CPUs in affinity, if given. spec: the NodeSpec argv was made of; spill_dir:
        the job's on this host, which the guard empties of this node's objects if the rank dies; container: argv
        runs in one (the command that removes it by name, [] for none; where its monitor writes its PID)."""
        if spill_dir is not None:
            self.spill_dir = spill_dir
            self.guard.spill_dir(spill_dir, None)
        if container is not None:
            self.remove_container, self.container_monitor = list(container[0]), container[1]
        self._start(argv, env, affinity, spec)

    def _start(self, argv: Sequence[str], env: dict[str, str], affinity: Sequence[int], spec: NodeSpec | None) -> None:
        self._argv, self._env, self._affinity, self.spec = list(argv), dict(env), tuple(affinity), spec
        self.times["started"] = time.time()
        try:
            out = open_append(self.output_path)
        except OSError as error:
            raise ConfigError(f"cannot write {self.output_path}: {error}") from None
        self.output = output = NodeOutput(self.output_path)
        self.proc = proc = processes.start(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                           stdin=subprocess.PIPE, affinity=affinity)
        assert proc.stdout is not None  # piped just above
        output.copy(proc.stdout, out)
        self.guard.watch_group(proc)
        if self.remove_container:
            self.guard.remove_container(self.remove_container, self.container_monitor)

    def restart(self, grace: float) -> processes.StopReport:
        """After a failed start: stop what is left of it, start `ray start` again and let it go. Returns what was
        stopped."""
        stopped = self.stop(grace)
        self._start(self._argv, self._env, self._affinity, self.spec)
        self.release()
        return stopped

    def release(self) -> None:
        """Let `ray start` go (see starter.py)."""
        self.times["released"] = time.time()
        stdin = self.started_process.stdin
        assert stdin is not None  # start() pipes it
        try:
            stdin.write(b"go\n")
            stdin.close()
        except BrokenPipeError:
            pass  # it already exited: the wait that follows reports why

    def exited(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def exit_code(self) -> int:
        return processes.exit_code(self.started_process.returncode)

    def check_running(self) -> None:
        if self.exited():
            output = self.started_output
            failed = GcsOverloaded if output.startup_timed_out else NodeStartFailed
            raise failed(f"`ray start` exited with code {self.exit_code()} before its node joined: "
                         f"{output.tail()} (full output: {self.output_path})")

    def wait_alive(self, deadline: Deadline, between: Callable[[], None], gcs_address: str, timeout: float) -> NodeInfo:
        """This node as the GCS shows it once ALIVE: starter.py prints that line into the node's output."""

        output = self.started_output

        def alive():
            if output.watch_failed is not None:
                refused = any(sign in output.watch_failed for sign in ("InvalidAuthToken", "Authentication"))
                raise (ForeignGcs if refused else LaunchError)(
                    f"the watch for this rank's Ray node failed: {output.watch_failed} (see {self.output_path})")
            self.check_running()
            return output.alive

        record = poll_until(alive, deadline, STARTUP_POLL, between)
        if record is None:
            self._dump_stacks()
            raise StartupTimeout(
                f"this rank's Ray node was not ALIVE at {gcs_address} within --startup-timeout {timeout:g} s "
                f"(`ray start` output: {output.tail(settle=0)}; its threads' stacks are at the end of {self.output_path})"
            )
        self.alive = True
        self.times["alive"] = time.time()
        info = NodeInfo(**record)
        self.node_id = info.node_id  # its spilled objects' dir is named by it (spill.py)
        if self.spill_dir is not None:
            self.guard.spill_dir(self.spill_dir, info.node_id)
        return info

    def first_description(self) -> bool:
        """Whether its manifest is yet to be logged: True once, then False."""
        first, self.described = not self.described, True
        return first

    def _dump_stacks(self) -> None:
        """Ask starter.py (only that process: Ray's own would die of SIGUSR1) to print its threads' stacks."""
        try:
            os.kill(self.started_process.pid, signal.SIGUSR1)
        except ProcessLookupError:
            return
        time.sleep(STACK_DUMP_WAIT)

    def ray_started(self) -> bool:
        """`ray start` is done starting (or gone): stopping it now is an orderly stop."""
        done = self.started_output.ray_started or self.exited()
        if done and "settled" not in self.times:
            self.times["settled"] = time.time()
        return done

    def settle(self, deadline: Deadline) -> None:
        """Before stopping an ALIVE node, let its `ray start` finish starting (until the deadline).

        The node is ALIVE ~0.3-0.9 s before `ray start` is done; signalled in between (a driver that
        ends at once), it has no handler of its own yet, and its processes were seen to need SIGKILL.
        """
        poll_until(self.ray_started, deadline, STARTUP_POLL)

    def pids(self) -> list[int]:
        return processes.descendant_pids(frozenset([self.guard.proc.pid]))

    def stop(self, grace: float) -> processes.StopReport:
        """Stop `ray start` (an orderly stop in ~1 s), then whatever this rank still runs but its guard; then its
        container by name, where its runtime keeps containers apart from their client (podman's conmon)."""
        try:
            return processes.stop_descendants([self.proc] if self.proc else [], grace,
                                              keep=frozenset([self.guard.proc.pid]))
        finally:
            if self.remove_container:
                remove_container(self.remove_container, self.container_monitor)

    def close(self) -> list[str]:
        """Keep Ray's logs, remove the private dir, let the guard go; each step runs whatever the others did.

        Returns what failed, for the rank's log; self.kept is where Ray's logs went (None: nowhere).
        """
        problems = []
        try:
            self.kept = keep_ray_logs(self.ray_dir, self.kept_logs)
        except Exception as error:
            problems.append(f"could not keep Ray's logs in {self.kept_logs}: {error!r}")
        try:
            self.private.remove()
        except FileNotFoundError:
            pass
        except Exception as error:
            problems.append(f"could not remove {self.private.path}: {error!r}")
        try:
            self.guard.release()
        except Exception as error:
            problems.append(f"could not release the guard (pid {self.guard.proc.pid}): {error!r}")
        return problems

