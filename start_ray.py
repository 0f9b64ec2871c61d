#!/usr/bin/env python3
"""Start a Ray cluster over MPI ranks, run the driver, exit with its code.

    mpirun -np 4 python start_ray.py [options] [-- DRIVER COMMAND ...]

See `python start_ray.py --help` and README.md.
"""

import sys

from mpiray.cli import main

if __name__ == "__main__":
    sys.exit(main())
