"""The command line's leader step: rank 0 runs the driver command as a subprocess.

Its output goes to the job's stdout/stderr and, line by line, to LOG_DIR/JOB_ID/driver.log; its exit
code is the job's. (The library's leader step, script.py, hands the cluster to the calling script.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from mpiray import package
from mpiray.errors import DriverNotFound
from mpiray.host import processes
from mpiray.host.guard import remove_container
from mpiray.logs.files import driver_log_path
from mpiray.rank.messages import Cluster
from mpiray.rank.nodestart import in_image
from mpiray.rank.state import Rank
from mpiray.raynode import container as containers

if TYPE_CHECKING:
    from mpiray.logs.tee import Tee

TEE_CLOSE = 5.0  # the most the driver's output may take to drain into driver.log after it exited


class CommandLeader:
    """rank.state.Leader: the driver command, with the cluster in its environment."""

    def __init__(self, command: Sequence[str], box: containers.Container | None = None):
        self.command = list(command)
        self.box = box  # --container: the driver runs in the image, as the nodes do
        self.proc: subprocess.Popen | None = None
        self.tee: Tee | None = None  # the driver's output into driver.log
        self.me: Rank | None = None  # once started
        self.container = ""  # the driver's container's name, in the image
        self.monitor: Path | None = None  # where podman's monitor of it wrote its PID

    def start(self, me: Rank, cluster: Cluster) -> None:
        self.me = me
        out_path = driver_log_path(cluster.log_dir)
        try:
            env = package.driver_env(cluster.driver_env(dict(os.environ)), self.command)
            command = self.command if self.box is None else self.in_image(cluster, env)
            self.proc = processes.start(command, env=env,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError as error:
            raise DriverNotFound(f"cannot start the driver {self.command}: {error.strerror}") from None
        me.log.event("driver_started", pid=self.proc.pid, command=" ".join(self.command), output=str(out_path))
        from mpiray.logs.tee import Tee  # rank 0's alone, once its driver runs: off every rank's start

        self.tee = tee = Tee.to_file(out_path)
        assert self.proc.stdout is not None and self.proc.stderr is not None  # piped just above
        tee.pump(self.proc.stdout, sys.stdout.buffer)
        tee.pump(self.proc.stderr, sys.stderr.buffer)

    def in_image(self, cluster: Cluster, env: dict[str, str]) -> list[str]:
        """The driver command run in the image: the default driver with the image's Python, the token and RAY_TMPDIR
        (rank 0's private dir), the logs and results/, and mpiray's and the trainer's code bound as its node has
        them (env: PYTHONPATH)."""
        box = self.box
        assert box is not None and cluster.private_dir is not None  # a real cluster's rank 0 has its node's dir
        command = [box.python, *self.command[1:]] if self.command[:1] == [sys.executable] else self.command
        private = Path(cluster.private_dir)
        env["PYTHONPATH"] = str(private / containers.CODE_DIR)
        self.container = containers.container_name(cluster.session.job_id, 0) + "-driver"
        self.monitor = box.monitor_pidfile(private, self.container)
        if box.named and self.me is not None:  # if rank 0 dies: its guard removes it
            self.me.own_node.remove_container_on_death(box.remove_command(self.container), self.monitor)
        return box.command(command, in_image(private, None, cluster.log_dir), env, self.container, monitor_pidfile=self.monitor)

    def poll(self, timeout: float) -> int | None:
        assert self.proc is not None and self.me is not None, "poll() before start()"
        try:
            returncode = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        code = processes.exit_code(returncode)
        self.me.log.event("driver_exited", code=code)
        return code

    def stop(self, grace: float, code: int) -> None:
        if self.proc is None or self.me is None or self.proc.poll() is not None:
            return
        if processes.stop_group(self.proc, grace) is None:
            self.me.log.event("driver_not_ended", pid=self.proc.pid)
        if self.box is not None and self.box.named:  # its client is gone; podman's conmon keeps the container
            remove_container(self.box.remove_command(self.container), self.monitor)

    def close(self, me: Rank) -> None:
        if self.tee is None:
            return
        self.tee.close(TEE_CLOSE)
        if self.tee.error or self.tee.dropped:
            me.log.event("driver_log_incomplete", problem=self.tee.error or "its writes stalled",
                         dropped=self.tee.dropped)
