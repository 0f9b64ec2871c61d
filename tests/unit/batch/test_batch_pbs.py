"""PBS as mpiray reads it (mpiray/batch/pbs.py): a job's facts from qstat's JSON, and a worker job's script.
qstat's output is OpenPBS 23.06.06's as recorded on the testbed (tests/support/pbs_records.py)."""

from __future__ import annotations

import shlex
import time

import pytest

from mpiray.batch import pbs

from pbs_records import DSV_TWO_JOBS, RUNNING, RUNNING_ID


def command_of(script: str) -> list[str]:
    (line,) = [line for line in script.splitlines() if line.startswith("exec ")]
    return shlex.split(line[len("exec "):])


def test_a_pbs_worker_job_asks_for_one_chunk_of_the_nodes_shape(worker_job):
    script = pbs.pbs_script(worker_job, 3)
    lines = script.splitlines()
    assert "#PBS -N mpiray-1234-w3" in lines and "#PBS -l select=1:ncpus=4:ngpus=1" in lines
    assert "#PBS -q debug" in lines and "#SBATCH --partition=debug" not in script
    assert command_of(script)[:3] == ["mpiexec", "-n", "1"] and "--join" in command_of(script)


def test_a_jobs_facts_are_read_from_qstats_json():
    facts = pbs.job_facts(RUNNING, RUNNING_ID)
    assert facts.hosts == ("mpiray-pbs1", "mpiray-pbs2", "mpiray-pbs3")
    assert facts.cpus == {"mpiray-pbs1": 2, "mpiray-pbs2": 2, "mpiray-pbs3": 2}
    assert (facts.walltime, facts.run_count, facts.exit_status, facts.state) == (300.0, 1, None, "R")
    assert facts.ends_at == facts.started + 300 and time.localtime(facts.started)[:6] == (2026, 11, 25, 3, 5, 6)
    finished = pbs.job_facts({**RUNNING, "job_state": "F", "Exit_status": 271, "run_count": 2}, RUNNING_ID)
    assert (finished.exit_status, finished.run_count) == (271, 2)


@pytest.mark.parametrize("exec_vnode, cpus", [
    ("(n1:ncpus=2)+(n2:ncpus=2:mem=1048576kb)", {"n1": 2, "n2": 2}),
    ("(n1:ncpus=1)+(n1:ncpus=1)", {"n1": 2}),  # two chunks on one host (place=pack)
    ("(n1[0]:ncpus=32+n1[1]:ncpus=32)", {"n1": 64}),  # one chunk across a host's vnodes
    ("(n1:mem=1gb)", {"n1": 0}),
    ("", {}),
])
def test_cpus_per_host_come_from_exec_vnode(exec_vnode, cpus):
    assert pbs.vnode_cpus(exec_vnode) == cpus


def test_select_chunks_and_durations():
    assert pbs.select_chunks("3:ncpus=2+ngpus=4:ncpus=8") == [(3, {"ncpus": "2"}), (1, {"ngpus": "4", "ncpus": "8"})]
    assert pbs.select_chunks("2") == [(2, {})]
    assert [pbs.duration(t) for t in ("01:00:00", "10:00", "90", "", None, "1:x")] == [3600, 600, 90, None, None, None]


def test_worker_job_states_are_read_for_every_job_from_qstats_dsv():
    assert pbs.dsv_states(DSV_TWO_JOBS) == {"2.mpiray-pbs-server": "F", "3.mpiray-pbs-server": "R"}
    assert pbs.dsv_states("") == {}
