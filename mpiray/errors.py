"""Every failure the launcher explains to the user: one class per cause, each with the exit code it ends every
rank with and its cause, a key of logs/report/classify.py's table (which says what to do about it). A raise
site gives only the message; the class says the rest (tests/unit/test_docs.py: one exit code per cause, and the exit
code table of docs/options.md says the same)."""

from __future__ import annotations


class LaunchError(Exception):
    """A failure with a message meant for the user; ends every rank with `exit_code`."""

    exit_code = 1
    cause = ""

    def __init__(self, message: str, exit_code: int | None = None, cause: str | None = None):
        super().__init__(message)
        if exit_code is not None:  # a relay of another rank's failure (WorkerFailed) or a signal's code
            self.exit_code = exit_code
        if cause is not None:
            self.cause = cause

    def event(self) -> tuple[str, dict]:
        """How the rank log records it: an event's name and fields (events.KINDS)."""
        return "failed", {"message": str(self), "cause": self.cause}


# ---- bad input, said before any Ray node starts: exit code 2 ---------------------------------------------


class ConfigError(LaunchError):
    """Bad input: an option, a path, an interface or a port the user gave."""

    exit_code = 2
    cause = "config"


class ImageFailed(ConfigError):
    """--container: the runtime or the image does not run on a host (the pre-flight's probe, before any node)."""

    cause = "image_failed"


class PortInUse(ConfigError):
    cause = "port_in_use"


class PortsPerHost(ConfigError):
    cause = "ports_per_host"


class SocketPathTooLong(ConfigError):
    cause = "socket_path_too_long"


class TempDirFailed(ConfigError):
    """The rank's private dir could not be made under the temp dir."""

    cause = "temp_dir"


class DirUnwritable(ConfigError):
    """The pre-flight: a temp or spill dir that cannot be written, or a spill dir that is not this user's."""

    cause = "dir_unwritable"


class DirFull(ConfigError):
    """The pre-flight: a temp or spill dir too full (host/findings.py's dir_full finding, raised by by_cause)."""

    cause = "dir_full"


class DirOnNetwork(ConfigError):
    """The pre-flight: a temp dir on a network file system (its dir_network finding, raised by by_cause)."""

    cause = "dir_network"


class SlowLink(ConfigError):
    """The pre-flight's link check: a host far slower than its peers, or that none reached (rank/linkcheck.py)."""

    cause = "slow_link"


class TooFewNodes(ConfigError):
    """--bad-nodes exclude: the hosts the pre-flight refused leave fewer Ray nodes than --min-nodes."""

    cause = "too_few_nodes"


class VersionSkew(ConfigError):
    """Ranks, a joining job or an attached driver that run other versions than the cluster."""

    cause = "version_skew"


class NoSuchCluster(ConfigError):
    """The cluster is not in the registry, or its entry is stale (its job ended), or its GCS does not answer."""

    cause = "no_such_cluster"


class TrainerMissing(ConfigError):
    cause = "trainer_missing"


class DriverNotFound(ConfigError):
    cause = "driver_not_found"


# ---- the start-up failed: exit code 1 ----------------------------------------------------------------------


class StartupTimeout(LaunchError):
    """A node did not come up within --startup-timeout."""

    cause = "startup_timeout"


class WorkersMissing(StartupTimeout):
    """Some workers did not report within --startup-timeout: missing is [{rank, host, log}]."""

    def __init__(self, missing: list[dict], timeout: float):
        text = "; ".join(f"rank {m['rank']} on {m['host']} (log: {m['log']})" if m["host"] else
                         f"rank {m['rank']} (never received the session; host unknown)" for m in missing)
        super().__init__(f"{len(missing)} worker(s) did not join within --startup-timeout {timeout:g} s: {text}")
        self.fields = {"missing": missing, "missing_count": len(missing), "missing_text": text, "timeout": timeout,
                       "cause": self.cause}

    def event(self) -> tuple[str, dict]:
        return "startup_timeout", self.fields


class DriverFailed(LaunchError):
    """The driver failed by itself: under mpiray.init(), the script could not connect to the cluster it started."""

    cause = "driver_failed"


class MpiSingletons(LaunchError):
    """The launcher started N tasks, but MPI sees a world of one in each."""

    cause = "mpi_singletons"


class ForeignGcs(LaunchError):
    """A node reached a GCS that is not its cluster's, or that refused its token."""

    cause = "foreign_gcs"


class NodeStartFailed(LaunchError):
    """`ray start` exited before its node was ALIVE."""

    retryable = False


class GcsOverloaded(NodeStartFailed):
    """`ray start` failed as an overloaded GCS makes it fail (Ray gives a raylet 30 s to register): retried."""

    cause = "gcs_overloaded"
    retryable = True


class WorkerFailed(LaunchError):
    """A worker reported a failure: the job ends with its code and cause (a relay: they are the worker's)."""

    def __init__(self, rank: int, host: str, error: str, log: str, *, exit_code: int, cause: str):
        super().__init__(f"rank {rank} on {host} failed: {error} (log: {log})", exit_code or 1, cause)
        self.fields = {"peer": rank, "peer_host": host, "message": error, "log": log, "cause": cause}

    def event(self) -> tuple[str, dict]:
        return "worker_failed", self.fields


# ---- how a rank ends otherwise ---------------------------------------------------------------------------


class Interrupted(LaunchError):
    """SIGTERM/SIGINT reached the rank; ends with 128 + signal."""

    def __init__(self, signum: int):
        super().__init__(f"interrupted by signal {signum}", 128 + signum)
        self.signum = signum


class Shutdown(LaunchError):
    """Rank 0 told this rank to stop (the reason is in rank 0's log); ends with the code rank 0 sent."""


class CommandFailed(Exception):
    """A scheduler's command (sbatch, qsub, qstat, ...) failed or did not answer; the message has its words."""


# ---- failures of one step, caught by its caller, which says what they mean (never a rank's end) --------


class BadValue(ValueError):
    """A value its option cannot take; the message says why, and what to give instead (values.py). The front
    doors turn it into a ConfigError that names the option."""


class QueryHung(Exception):
    """A GCS query of `ray start`'s holder ran past its deadline in its thread, abandoned there (starter.py)."""


class NoSuchJob(Exception):
    """`mpiray logs JOB`: no job dir of that name (logs/report/jobdir.py); the message lists what there is."""


class NoMatplotlib(Exception):
    """`mpiray logs --png`: matplotlib is not installed (logs/report/timeline.py)."""


def failure_classes() -> list[type[LaunchError]]:
    """Every failure class with a cause of its own (for the pre-flight's refusals by name, and the tests)."""
    found: list[type[LaunchError]] = []
    todo: list[type[LaunchError]] = [LaunchError]
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.cause and cls.cause not in {known.cause for known in found}:
            found.append(cls)
    return found


def by_cause(cause: str) -> type[LaunchError]:
    """The failure class of a cause (LaunchError where none names it)."""
    return next((cls for cls in failure_classes() if cls.cause == cause), LaunchError)
