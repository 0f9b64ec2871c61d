"""mpiray.init()'s leader step: rank 0's calling script is the driver (library.py is the front door).

rank.life.run runs in a thread of its own, the agent, while the main thread returns to the script. The
agent watches what the command line watches while the script runs (a stop signal, time_limit=, the
head's own node, lost worker nodes) and ends the script when it must: SIGTERM to the main thread, whose
handler raises SystemExit with the job's exit code; if the script has not ended after the grace (stuck
in C code), the agent tears down without it and ends the process (MPI_Finalize, then exit). The
script's own end (its last line, sys.exit(n), raise SystemExit(n), an uncaught exception, a signal)
gives the exit code that every rank exits with.
"""

from __future__ import annotations

import builtins
import signal
import socket
import sys
import threading

from mpiray.deadline import Deadline, poll_until
from mpiray.errors import DriverFailed, StartupTimeout
from mpiray.logs.events import ERROR, RankLog
from mpiray.rank import life
from mpiray.rank.messages import Cluster
from mpiray.rank.signals import HANDLED, StopRequest
from mpiray.rank.state import Rank

_REAL_SYSTEM_EXIT = builtins.SystemExit


class ExitWatch:
    """The exit code rank 0's script will end with, however it ends.

    sys.exit(n) and `raise SystemExit(n)` (the builtin name stands for a subclass while it watches)
    are recorded when made; one that reaches the top level has its traceback cleared by the
    interpreter, one that was caught keeps it, so only the former counts. An uncaught exception is
    seen by sys.excepthook (1; KeyboardInterrupt 130).
    """

    def __init__(self) -> None:
        self.last: _REAL_SYSTEM_EXIT | None = None  # the main thread's last SystemExit
        self.uncaught: int | None = None
        self._saved: tuple | None = None

    def install(self) -> None:
        watch = self
        saved_exit, saved_hook = sys.exit, sys.excepthook

        class SystemExit(_REAL_SYSTEM_EXIT):  # noqa: A001  (as the builtin it stands for)
            def __init__(self, *args):
                super().__init__(*args)
                if threading.current_thread() is threading.main_thread():
                    watch.saw(self)

        def exit(code=None):
            raise SystemExit(code)

        def excepthook(kind, value, traceback):
            watch.saw_uncaught(128 + signal.SIGINT if issubclass(kind, KeyboardInterrupt) else 1)
            saved_hook(kind, value, traceback)  # the traceback, shown once (rank 0 only)

        self._saved = (saved_exit, saved_hook)
        self.exit_type = SystemExit
        sys.exit, sys.excepthook, builtins.SystemExit = exit, excepthook, SystemExit  # type: ignore[misc]

    def saw(self, exit: _REAL_SYSTEM_EXIT) -> None:
        """A SystemExit made in the main thread: the last one counts, if it reaches the top level."""
        self.last = exit

    def saw_uncaught(self, code: int) -> None:
        """An uncaught exception reached sys.excepthook: the interpreter exits with code."""
        self.uncaught = code

    def uninstall(self) -> None:
        if self._saved is not None:
            (sys.exit, sys.excepthook), builtins.SystemExit = self._saved, _REAL_SYSTEM_EXIT  # type: ignore[misc]
            self._saved = None

    def code(self) -> tuple[int, str]:
        """(exit code, how the script ended), as the interpreter will exit."""
        if self.uncaught is not None:
            return self.uncaught, "an uncaught exception"
        if self.last is not None and self.last.__traceback__ is None:
            code = self.last.code
            return (0 if code is None else code if isinstance(code, int) else 1), "SystemExit"
        return 0, "the end of the script"


class ScriptSignals(StopRequest):
    """Rank 0's stop signals under mpiray.init(): a flag for the agent, and, once the script runs,
    SystemExit in the main thread (code 128+N, or the code the agent stops the script with)."""

    def __init__(self) -> None:
        super().__init__()
        self.raising = False  # while the script has the cluster
        self.pending: int | None = None  # the agent is stopping the script with this code
        self.exit_type = _REAL_SYSTEM_EXIT

    def _handle(self, signum, frame) -> None:
        if self.pending is not None and self.raising:  # the agent's own SIGTERM to this thread
            code, self.pending = self.pending, None
            raise self.exit_type(code)
        super()._handle(signum, frame)
        if self.raising:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt  # Ctrl-C, as usual (sys.excepthook: 130)
            raise self.exit_type(128 + signum)

    def raise_in_script(self, raising: bool, exit_type: type[SystemExit] | None = None) -> None:
        """Whether a stop signal now raises in the script's main thread (while it has the cluster), and as what
        (the exit watch's SystemExit, where one watches)."""
        self.raising = raising
        if exit_type is not None:
            self.exit_type = exit_type

    def stop_script(self, code: int) -> None:
        """The agent stops the script with code: its SIGTERM to the main thread raises SystemExit(code) there."""
        self.pending = code

    def take_back(self) -> None:
        """After ray.init(), which sets a SIGTERM handler of its own (sys.exit(15)): ours again."""
        for signum in HANDLED:
            signal.signal(signum, self._handle)

    def release(self, process_ends: bool) -> None:
        pass  # from the agent's thread, which may not touch signal handlers: put back by end()

    def put_back(self, process_ends: bool) -> None:
        super().release(process_ends)


class ScriptLeader:
    """rank.state.Leader for mpiray.init()'s rank 0: the calling script, in the main thread; life.run runs in
    the agent thread. The main thread's half: begin, connected, end, at_exit; the agent's: the Leader's
    start, poll, stop and close."""

    def __init__(self, config, comm, log: RankLog | None = None, *, watch_exit: bool = True) -> None:
        self.config, self.comm = config, comm
        self.log = log if log is not None else RankLog(0, socket.gethostname())  # life.setup's, made here to hear it
        self.failure: tuple[str, str] | None = None  # rank 0's first failure with a cause: (its message, the cause)
        self.log.listeners.append(self._heard)
        self.signals = ScriptSignals()
        self.exit_watch = ExitWatch() if watch_exit else None  # None: library.run_script sees the end itself
        self.returned: tuple[int, str] | None = None  # run_script's (code, how the script ended)
        self.handed_over = threading.Event()  # the agent: the cluster is up (or the agent ended)
        self.answered = threading.Event()  # the main thread: connected, or not
        self.ended = threading.Event()  # the script ended: its code in self.code
        self.cluster: Cluster | None = None
        self.connect_error: BaseException | None = None
        self.me: Rank | None = None
        self.code: int | None = None
        self.how = ""
        self.stuck = False  # the script did not end when told to: the agent ends the process
        self.result: int | None = None  # the job's exit code, once rank.run returned
        self.agent = threading.Thread(target=self._agent, name="mpiray-agent", daemon=True)

    def _heard(self, record: dict) -> None:
        """Rank 0's log, as it is written: its first failure with a cause is why the cluster did not start."""
        fields = record["fields"]
        if self.failure is None and record["level"] == ERROR and fields.get("cause"):
            self.failure = (str(fields.get("message") or record["event"]), str(fields["cause"]))

    # ---- the main thread ---------------------------------------------------------------------

    def begin(self):
        """Start the agent and wait until the cluster is up: the cluster (messages.Cluster), or None if it
        did not start (the agent has then torn it down)."""
        self.signals.install()
        self.main = threading.main_thread().ident or 0  # a running thread always has one
        self.agent.start()
        self.handed_over.wait()  # the agent's waits all have deadlines; it sets this however it ends
        if self.cluster is None:
            self.agent.join()
        return self.cluster

    def connected(self, error: BaseException | None) -> None:
        """The script's ray.init() is done (error: it failed, and the agent tears the cluster down)."""
        self.connect_error = error
        if error is None:
            if self.exit_watch is not None:
                self.exit_watch.install()
            self.signals.take_back()
            self.signals.raise_in_script(True, self.exit_watch.exit_type if self.exit_watch is not None else None)
        self.answered.set()

    def end(self, code: int, how: str, process_ends: bool) -> int:
        """The script is done (its end, or mpiray.shutdown()): stop the cluster on every rank; the job's code."""
        self.signals.raise_in_script(False)  # a signal now must not break this off
        if self.result is not None or not self.agent.is_alive():
            return self.result if self.result is not None else code
        if self.me is not None and self.me.own_node.ended() is None:
            import ray

            ray.shutdown()  # the driver's connection first, while the head is still there
        self.code, self.how = code, how
        self.ended.set()
        self.agent.join()
        if self.exit_watch is not None:
            self.exit_watch.uninstall()
        self.signals.put_back(process_ends)
        return self.result if self.result is not None else code

    def script_returned(self, code: int, how: str) -> None:
        """library.run_script's: the script's main body ended so (the exit hook stops the cluster with it, after
        the script's threads and its own exit hooks); a stop signal now only tells the agent."""
        self.returned = (code, how)
        self.signals.raise_in_script(False)

    def at_exit(self) -> None:
        """atexit (before mpi4py's MPI_Finalize): the script ended; every rank ends with its code."""
        if self.result is not None:
            return
        if self.returned is not None:
            code, how = self.returned
        else:
            code, how = self.exit_watch.code() if self.exit_watch is not None else (0, "the end of the process")
        head_lost = self.me is not None and self.me.own_node.ended() is not None
        result = self.end(code, how, process_ends=True)
        # Ray's own atexit ray.shutdown() would hang without the head; a code the agent chose (a time
        # limit the script caught) is not the interpreter's: end here, MPI finalized.
        if head_lost or result != code:
            self.comm.exit_now(result)

    # ---- the agent thread (rank.Leader) --------------------------------------------------------

    def _agent(self) -> None:
        try:
            self.result = life.run(self.config, self, self.comm, stop=self.signals, log=self.log)
        finally:
            self.handed_over.set()
        if self.stuck:
            self.comm.exit_now(self.result)

    def start(self, me: Rank, cluster: Cluster) -> None:
        self.me, self.cluster = me, cluster
        self.handed_over.set()
        if not poll_until(self.answered.is_set, Deadline.after(self.config.startup_timeout), 0.05, me.raise_if_stopped):
            raise StartupTimeout(f"the script did not connect to the cluster within {self.config.startup_timeout:g} s")
        if self.connect_error is not None:
            raise DriverFailed(f"could not connect this script to the cluster: {self.connect_error!r}")

    def poll(self, timeout: float) -> int | None:
        if not self.ended.wait(timeout):
            return None
        if self.me is not None:
            self.me.log.event("script_ended", code=self.code, how=self.how)
        return self.code

    def stop(self, grace: float, code: int) -> None:
        if self.ended.is_set() or self.stuck or self.cluster is None or not self.answered.is_set():
            return
        self.signals.stop_script(code)
        signal.pthread_kill(self.main, signal.SIGTERM)
        if not self.ended.wait(grace):
            self.stuck = True
            if self.me is not None:
                self.me.log.event("script_stuck", grace=grace)
        elif self.me is not None:
            self.me.log.event("script_ended", code=self.code, how=self.how)

    def close(self, me: Rank) -> None:
        pass
