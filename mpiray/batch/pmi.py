"""A rank's own connection to its process manager, where mpiray must speak on it itself: PMI-1's finalize to Hydra.

MPICH sends PMI's finalize only from a C exit handler (src/util/mpir_pmi.c: "to prevent an abnormal exit to show up
as a normal exit"). A rank that must leave by os._exit (mpiray.init()'s rank 0, with its script stuck in Ray's C++
client: rank/mpi.py Comm.exit_now) skips it, and Hydra's proxy then takes its exit for a crash: it SIGKILLs the
ranks of its host still on their way out, and mpirun returns 9 (or 1, with their statuses set to 0). Sending that
finalize first makes the exit the rank's own. srun's PMI-2 needs none (srun ends no task for a missing finalize).
"""

from __future__ import annotations

import os
import socket
from typing import Mapping, NamedTuple

ACK_WAIT = 5.0  # seconds for Hydra's proxy to answer the finalize (it answers at once: measured in ms)


class PmiSocket(NamedTuple):
    """The socket to Hydra's proxy as MPI_Init left it: its fd, and the file it was, so that a number reused by
    another file by the time of the exit is never written to."""

    fd: int
    device: int
    inode: int


def hydra_fd(environ: Mapping[str, str]) -> int | None:
    """The fd MPICH speaks PMI-1 to a Hydra proxy on (PMI_FD; Hydra's proxies also set MPI_LOCALNRANKS), where this
    process has one: not srun's PMI_FD (PMI-2), not one where the user chose PMI-2."""
    if "MPI_LOCALNRANKS" not in environ or not environ.get("PMI_FD", "").isdigit():
        return None
    if "2" in (environ.get("PMI_VERSION"), environ.get("MPIR_CVAR_PMI_VERSION")):
        return None
    return int(environ["PMI_FD"])


def identify(fd: int | None) -> PmiSocket | None:
    if fd is None:
        return None
    try:
        stat = os.fstat(fd)
    except OSError:
        return None
    return PmiSocket(fd, stat.st_dev, stat.st_ino)


def hydra_socket(environ: Mapping[str, str]) -> PmiSocket | None:
    """This process's PMI-1 socket to Hydra, taken once MPI_Init is done (None: it has none)."""
    return identify(hydra_fd(environ))


def finalize(pmi: PmiSocket | None) -> None:
    """PMI-1's `cmd=finalize` on the socket, and its answer awaited (MPI finalized: MPICH no longer speaks on it):
    the proxy then closes it as a finalized process's. Nothing where the fd is no longer that socket (an MPICH
    that sent the finalize itself and closed it), and nothing but ACK_WAIT lost where the proxy does not answer."""
    if pmi is None or identify(pmi.fd) != pmi:
        return
    try:
        with socket.socket(fileno=os.dup(pmi.fd)) as connection:
            connection.settimeout(ACK_WAIT)
            connection.sendall(b"cmd=finalize\n")
            connection.recv(256)  # cmd=finalize_ack rc=0
    except OSError:
        pass
