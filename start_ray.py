#!/usr/bin/env python3
"""Start a Ray cluster over MPI ranks, run the driver, exit with its code: `mpiray run`, from a checkout.

    mpirun -np 4 python start_ray.py [options] [-- DRIVER COMMAND ...]

See `python start_ray.py --help`, `mpiray --help` and README.md.
"""

import sys

from mpiray.cli import run

if __name__ == "__main__":
    sys.exit(run(sys.argv[1:], prog="start_ray.py"))
