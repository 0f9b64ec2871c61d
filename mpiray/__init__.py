"""mpiray: a Ray cluster over MPI ranks. `start_ray.py` (the command line) or, in your own script, `mpiray.init()`."""

__version__ = "0.1.0"

from mpiray.errors import ConfigError, LaunchError
from mpiray.library import ClusterInfo, cluster, init, shutdown

__all__ = ["ClusterInfo", "ConfigError", "LaunchError", "cluster", "init", "shutdown"]
