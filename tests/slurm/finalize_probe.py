"""Under srun: every rank meets, then every rank but 0 leaves without MPI_Finalize (as one whose own exit crashed),
and rank 0 ends through mpiray's mpi.Comm.finalize_within(SECONDS, CODE): its MPI_Finalize waits in the closing PMI
barrier for ranks that will never come, so rank 0 exits with CODE after SECONDS; it exits 0 if MPI_Finalize returned.

    srun -N2 python tests/slurm/finalize_probe.py SECONDS CODE
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's mpiray, as start_ray.py finds it

from mpiray.rank.mpi import Comm  # noqa: E402  (MPI_Init)

seconds, code = float(sys.argv[1]), int(sys.argv[2])
comm = Comm()
if not comm.barrier(60):
    sys.exit("finalize_probe: the ranks did not meet within 60 s")
if comm.rank != 0:
    os._exit(0)
comm.finalize_within(seconds, code)
sys.exit(0)
