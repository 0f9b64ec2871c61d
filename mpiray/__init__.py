"""mpiray: a Ray cluster over MPI ranks. The `mpiray` command (or `start_ray.py`), or, in your own script,
`mpiray.init()`.

`import mpiray` is cheap (no Ray, no MPI_Init, no launcher): the library's names below load its modules
on first use, so that the helper processes that run an mpiray module by name (package.py) and a script
that only imports mpiray pay nothing for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mpiray.errors import ConfigError, LaunchError

__version__ = "0.1.0"
__all__ = ["ClusterInfo", "ConfigError", "LaunchError", "cluster", "init", "jobs_client", "shutdown"]
_LIBRARY = ("ClusterInfo", "cluster", "init", "shutdown")

if TYPE_CHECKING:
    from mpiray.elastic.submit import jobs_client
    from mpiray.library import ClusterInfo, cluster, init, shutdown


def __getattr__(name: str):
    if name in _LIBRARY:
        from mpiray import library

        return getattr(library, name)
    if name == "jobs_client":  # a login node's: Ray's Jobs API with the cluster's token
        from mpiray.elastic.submit import jobs_client

        return jobs_client
    raise AttributeError(f"module 'mpiray' has no attribute {name!r}")
