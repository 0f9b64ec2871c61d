"""The command line's front end: rank 0 runs the driver command as a subprocess, the others serve.

(The library's front end, library.py, runs the driver in-process instead: the calling script.)
"""

from __future__ import annotations

import os
import subprocess
import sys

from mpiray import commands, lifecycle, mpi, processes, signals
from mpiray.config import Config
from mpiray.deadline import Deadline
from mpiray.errors import ConfigError
from mpiray.logs import Tee, job_log_dir
from mpiray.mpi import EVENT, Comm
from mpiray.lifecycle import DRIVER_POLL, RAY_STOP_GRACE, Rank
from mpiray.reports import Report

TIME_LIMIT_EXIT = 124  # as timeout(1)
HEAD_LOST_EXIT = 1
TEE_CLOSE = 5.0  # the most the driver's output may take to drain into driver.log after it exited


def run(config: Config, comm: Comm | None = None) -> int:
    """The whole job of this rank; every rank returns the same exit code (the driver's)."""
    me = lifecycle.setup(config, comm)
    code = lifecycle.outcome(me, lambda: drive(me, lifecycle.lead(me)) if me.rank == 0 else lifecycle.serve(me))
    code = lifecycle.finish(me, code)
    if not me.all_met:
        mpi.abandon(code)
    signals.ignore_from_now_on()  # MPI_Finalize is all that is left
    return code


def driver_env(me: Rank, nodes: list[Report]) -> dict[str, str]:
    """What a driver needs to find and use the cluster: RAY_ADDRESS, the token, MPIRAY_*."""
    config, session = me.config, me.session
    env = commands.node_env(dict(os.environ), None, str(me.node.token_path) if me.node.token_path else None)
    env.update(
        RAY_ADDRESS=session.gcs_address,
        MPIRAY_JOB_ID=session.job_id,
        MPIRAY_LOG_DIR=str(config.log_dir),
        MPIRAY_NUM_NODES=str(len(nodes)),
        MPIRAY_TOTAL_CPUS=str(int(sum(r.resources.get("CPU", 0) for r in nodes))),
        MPIRAY_TOTAL_GPUS=str(int(sum(r.resources.get("GPU", 0) for r in nodes))),
        MPIRAY_HEAD_IP=session.head_ip,
        MPIRAY_STOP_GRACE=f"{config.stop_grace:g}",  # how long the driver has after SIGTERM
    )
    return env


def drive(me: Rank, nodes: list[Report]) -> int:
    """Run the driver with the cluster in its environment; its exit code is the job's."""
    config, session = me.config, me.session
    if config.dry_run:
        me.log.step(f"Dry run: no Ray was started, and no driver runs ({' '.join(config.driver)})")
        return 0
    env = driver_env(me, nodes)
    out_path = job_log_dir(config.log_dir, session.job_id) / "driver.log"
    try:
        me.driver = processes.start(config.driver, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as error:
        raise ConfigError(f"cannot start the driver {list(config.driver)}: {error.strerror}") from None
    me.log.step(f"Driver started (pid {me.driver.pid}): {' '.join(config.driver)}; output also in {out_path}")
    tee = Tee.to_file(out_path)
    tee.pump(me.driver.stdout, sys.stdout.buffer)
    tee.pump(me.driver.stderr, sys.stderr.buffer)
    limit = Deadline.after(config.time_limit) if config.time_limit else None
    code = None
    while code is None:
        try:
            returncode = me.driver.wait(timeout=DRIVER_POLL)
            code = processes.exit_code(returncode)
            me.log.step(f"Driver exited with code {code}")
        except subprocess.TimeoutExpired:
            pass
        if code is None and me.stop.signum is not None:
            me.log.warning(f"signal {me.stop.signum}: SIGTERM to the driver, {config.stop_grace:g} s to finish")
            processes.stop_group(me.driver, config.stop_grace)
            code = 128 + me.stop.signum
        if code is None and limit is not None and limit.expired():
            me.log.error(
                f"the driver ran past --time-limit {config.time_limit:g} s: SIGTERM, then SIGKILL "
                f"after {config.stop_grace:g} s"
            )
            processes.stop_group(me.driver, config.stop_grace)
            code = TIME_LIMIT_EXIT
        if code is None and me.node.exited():
            me.log.error(
                f"the head's Ray node exited (code {me.node.exit_code()}, see {me.node.output_path}): "
                f"stopping the driver"
            )
            # Without its GCS the driver cannot checkpoint through Ray, and ray.shutdown() hangs.
            processes.stop_group(me.driver, min(config.stop_grace, RAY_STOP_GRACE))
            code = HEAD_LOST_EXIT
        event = me.comm.poll(tag=EVENT)
        if event is not None:
            me.log.warning(f"rank {event[0]}: {event[2]}")
    tee.close(TEE_CLOSE)
    if tee.error or tee.dropped:
        me.log.warning(
            f"driver.log is incomplete ({tee.error or 'its writes stalled'}; {tee.dropped} lines not written): "
            f"the driver's output went to this job's stdout/stderr only"
        )
    return code
