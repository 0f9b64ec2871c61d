"""Failures the launcher explains to the user, each with the exit code it ends with and, where known,
its cause: a key of joblogs/classify.py's table, which says what to do about it."""


class LaunchError(Exception):
    """A failure with a message meant for the user; ends every rank with `exit_code`."""

    exit_code = 1
    cause = ""

    def __init__(self, message: str, exit_code: int | None = None, cause: str | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code
        if cause is not None:
            self.cause = cause

    def event(self) -> tuple[str, dict]:
        """How the rank log records it: an event's name and fields (events.KINDS)."""
        return "failed", {"message": str(self), "cause": self.cause}


class ConfigError(LaunchError):
    """Bad input: an option, a path, an interface or a port the user gave."""

    exit_code = 2
    cause = "config"


class StartupTimeout(LaunchError):
    """A node did not come up within --startup-timeout."""

    cause = "startup_timeout"


class Interrupted(LaunchError):
    """SIGTERM/SIGINT reached the rank; ends with 128 + signal."""

    def __init__(self, signum: int):
        super().__init__(f"interrupted by signal {signum}", 128 + signum)
        self.signum = signum


class CommandFailed(Exception):
    """A scheduler's command (sbatch, qsub, qstat, ...) failed or did not answer; the message has its words."""
