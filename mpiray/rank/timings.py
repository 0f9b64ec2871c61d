"""The timings and exit codes the rank's steps share: how often they poll, how long a Ray node gets to stop, and
the codes the job ends with for a time limit and a lost head."""

DRIVER_POLL = 0.2  # seconds between checks while the leader runs: ~0% CPU for waiting ranks
STARTUP_POLL = 0.02  # seconds between checks while nodes start (a file read or an MPI probe): on the critical path
RAY_STOP_GRACE = 5.0  # the most a Ray node gets to stop in order: healthy ones take ~1 s
EXIT_LIMIT = 10.0  # seconds for MPI_Finalize and Python's exit after it: 0.03-0.06 s measured (3 hosts x 2 ranks, srun
# --mpi=pmi2, both MPICH builds); past it a rank exits with the job's code without them (mpi.Comm.finalize_within)
TIME_LIMIT_EXIT = 124  # as timeout(1)
HEAD_LOST_EXIT = 1
