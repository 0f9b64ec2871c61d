"""A rank's own PMI-1 finalize to Hydra (mpiray/batch/pmi.py): when a rank has the socket, and what goes on it, over
a real socket pair (the test holds the proxy's end)."""

import os
import socket
import time

import pytest

from mpiray.batch import pmi

# The PMI variables of a rank, as seen (test_environment.py has them whole): the PyPI MPICH wheel's mpirun -np 3 on
# one host, rank 0; mpirun inside an sbatch job (Hydra's proxies in a step of their own); srun --mpi=pmi2.
HYDRA = {"MPI_LOCALNRANKS": "3", "MPI_LOCALRANKID": "0", "PMI_FD": "9", "PMI_RANK": "0", "PMI_SIZE": "3",
         "PMI_HOSTNAME": "vm"}
HYDRA_IN_SBATCH = {"MPI_LOCALNRANKS": "2", "MPI_LOCALRANKID": "1", "PMI_FD": "6", "PMI_HOSTNAME": "mpiray-node3",
                   "PMI_RANK": "5", "PMI_SIZE": "6", "SLURM_JOB_ID": "7", "SLURM_STEP_ID": "2"}
SRUN_PMI2 = {"PMI_FD": "11", "PMI_JOBID": "2.0", "PMI_RANK": "1", "PMI_SIZE": "3", "SLURM_JOB_ID": "2",
             "SLURM_MPI_TYPE": "pmi2", "SLURM_STEP_ID": "0"}


@pytest.mark.parametrize("environ, fd", [
    (HYDRA, 9),
    (HYDRA_IN_SBATCH, 6),  # Hydra's proxies, not srun's PMI
    (SRUN_PMI2, None),  # srun's PMI_FD speaks PMI-2, and srun ends no task for a missing finalize
    ({**HYDRA, "PMI_VERSION": "2"}, None),
    ({**HYDRA, "MPIR_CVAR_PMI_VERSION": "2"}, None),
    ({k: v for k, v in HYDRA.items() if k != "PMI_FD"}, None),  # PMI_PORT instead (a singleton's, or hydra's -pmi-port)
    ({**HYDRA, "PMI_FD": "x"}, None),
    ({}, None),
])
def test_the_rank_speaks_pmi_1_to_hydra_only_on_hydras_pmi_1_socket(environ, fd):
    assert pmi.hydra_fd(environ) == fd


@pytest.fixture
def proxy():
    """(the rank's end, as PMI_FD; the proxy's end)."""
    rank, proxy_end = socket.socketpair()
    yield rank, proxy_end
    rank.close()
    proxy_end.close()


def test_the_finalize_goes_on_the_socket_and_its_answer_is_awaited(proxy):
    rank, proxy_end = proxy
    proxy_end.sendall(b"cmd=finalize_ack rc=0\n")  # answered before it is asked: recv returns at once
    pmi.finalize(pmi.hydra_socket({**HYDRA, "PMI_FD": str(rank.fileno())}))
    assert proxy_end.recv(100) == b"cmd=finalize\n"
    rank.sendall(b"still open")  # the rank's own fd is left as it was (a dup was closed)
    assert proxy_end.recv(100) == b"still open"


def test_a_proxy_that_never_answers_costs_the_wait_and_no_more(proxy, monkeypatch):
    rank, proxy_end = proxy
    monkeypatch.setattr(pmi, "ACK_WAIT", 0.2)
    started = time.monotonic()
    pmi.finalize(pmi.identify(rank.fileno()))
    assert 0.2 <= time.monotonic() - started < 2
    assert proxy_end.recv(100) == b"cmd=finalize\n"


def test_nothing_is_written_to_another_socket_that_took_the_fd_number(proxy):
    rank, proxy_end = proxy
    taken = pmi.identify(rank.fileno())
    other, other_peer = socket.socketpair()  # as an MPICH that closed its PMI socket, and a Ray socket opened since
    try:
        os.dup2(other.fileno(), rank.fileno())
        pmi.finalize(taken)
        other_peer.setblocking(False)
        with pytest.raises(BlockingIOError):
            other_peer.recv(100)
    finally:
        other.close()
        other_peer.close()
    assert proxy_end.recv(100) == b""  # the PMI socket's rank end is gone, and nothing came before it


def test_a_closed_fd_is_no_socket_to_finalize():
    read, write = os.pipe()
    taken = pmi.identify(write)
    os.close(read)
    os.close(write)
    assert pmi.identify(write) is None
    pmi.finalize(taken)  # no error: there is nothing to finalize
