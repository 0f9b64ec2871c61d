"""mpiray: start a Ray cluster over MPI ranks, run a driver, end cleanly."""

__version__ = "0.1.0"
