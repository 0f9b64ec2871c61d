"""The PBS testbed itself (tests/pbs/): three free hosts, a job's chunks on all three, MPI across them
through PBS's TM interface, and what PBS does at qdel and at the walltime. Timings are printed."""

from __future__ import annotations

import json
import time
from pathlib import Path

from helpers import PYTHON, ROOT, show_timings
from pbs import testbed

JOB_TIMEOUT_S = 120
SCATTER = ("-l", "select=3:ncpus=1", "-l", "place=scatter")


def script(workdir: Path, name: str, body: str) -> Path:
    path = workdir / name
    path.write_text('#!/bin/bash\ncd "$PBS_O_WORKDIR" || exit 1\n' + body)  # a PBS job starts in $HOME
    path.chmod(0o755)
    return path


def output(workdir: Path, name: str) -> str:
    return (workdir / name).read_text()


def test_three_moms_are_free_and_each_is_a_host_of_its_own(pbs_testbed):
    assert pbs_testbed.node_states() == dict.fromkeys(pbs_testbed.node_names, "free")


def test_a_job_gets_three_hosts_and_its_script_exit_code_is_its_exit_status(pbs_testbed, pbs_jobs, capsys, request):
    # A task's output goes to the job's output file, not pbs_tmrsh's: each writes a file of its own.
    probe = ("import json, os, socket, sys; open(sys.argv[1], 'w').write(json.dumps([socket.gethostname(), "
             "os.environ['NCPUS']]))")
    job = script(pbs_jobs.workdir, "hosts.sh", f"""
sort -u "$PBS_NODEFILE" > nodes.txt
for host in $(cat nodes.txt); do pbs_tmrsh "$host" {PYTHON} -c "{probe}" "$PWD/seen-$host.json"; done
exit 7
""")
    submitted = time.monotonic()
    job_id = pbs_jobs.submit(job, *SCATTER, "-j", "oe")
    record = pbs_testbed.wait_for_job(job_id, JOB_TIMEOUT_S)
    show_timings(capsys, request, qsub_to_finished=time.monotonic() - submitted)
    assert record["Exit_status"] == 7
    assert output(pbs_jobs.workdir, "nodes.txt").split() == pbs_testbed.node_names
    seen = [json.loads(output(pbs_jobs.workdir, f"seen-{name}.json")) for name in pbs_testbed.node_names]
    assert seen == [[name, "1"] for name in pbs_testbed.node_names]  # each on its host, with its chunk's CPUs


def test_mpich_spans_the_three_hosts_through_pbs_tmrsh(pbs_testbed, pbs_jobs):
    venv = Path(PYTHON).parent
    probe = "from mpi4py import MPI; import socket; c = MPI.COMM_WORLD; print(c.Get_rank(), c.Get_size(), socket.gethostname())"
    job = script(pbs_jobs.workdir, "mpi.sh", f"""
export MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=tcp  # a bare mpi4py program on the MPICH wheel (the launcher chooses them by itself)
{venv}/mpiexec -launcher rsh -launcher-exec {ROOT}/jobs/pbs_tmrsh.sh -f "$PBS_NODEFILE" -n 3 {PYTHON} -c "{probe}" > ranks.txt
""")
    job_id = pbs_jobs.submit(job, *SCATTER, "-j", "oe", variables=pbs_jobs.variables())
    assert pbs_testbed.wait_for_job(job_id, JOB_TIMEOUT_S)["Exit_status"] == 0
    ranks = sorted(line.split() for line in output(pbs_jobs.workdir, "ranks.txt").splitlines())
    assert ranks == [[str(rank), "3", name] for rank, name in enumerate(pbs_testbed.node_names)]


def test_qdel_ends_every_process_of_the_job_on_every_host(pbs_testbed, pbs_jobs, capsys, request):
    job = script(pbs_jobs.workdir, "sleep.sh", """
for host in $(sort -u "$PBS_NODEFILE"); do pbs_tmrsh "$host" sleep 300 & done
touch started; wait
""")
    job_id = pbs_jobs.submit(job, *SCATTER, "-j", "oe")
    pbs_testbed.wait_for_state(job_id, "R", JOB_TIMEOUT_S)
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while len(testbed.job_processes(pbs_testbed, job_id)) < 4 and time.monotonic() < deadline:
        time.sleep(0.2)  # the script and a sleep on each host
    deleted = time.monotonic()
    assert pbs_testbed.run(["qdel", job_id], timeout=30).returncode == 0
    record = pbs_testbed.wait_for_job(job_id, JOB_TIMEOUT_S)
    finished = time.monotonic()
    pbs_jobs.wait_until_gone(job_id)
    show_timings(capsys, request, qdel_to_finished=finished - deleted, qdel_to_no_process=time.monotonic() - deleted)
    assert record["Exit_status"] == 256 + 15  # ended by SIGTERM


def test_pbs_kills_a_job_at_its_walltime_without_a_warning(pbs_testbed, pbs_jobs, capsys, request):
    job = script(pbs_jobs.workdir, "walltime.sh", "trap 'echo TERM $SECONDS > signal.txt; exit 143' TERM\nsleep 300 & wait\n")
    job_id = pbs_jobs.submit(job, "-l", "select=1:ncpus=1", "-l", "walltime=00:00:15", "-j", "oe")
    started = time.monotonic()
    record = pbs_testbed.wait_for_job(job_id, JOB_TIMEOUT_S)
    show_timings(capsys, request, run_to_finished=time.monotonic() - started)
    assert record["Exit_status"] == -29  # JOB_EXEC_KILL_WALLTIME
    assert int(output(pbs_jobs.workdir, "signal.txt").split()[1]) >= 15  # the first word from PBS: at the limit


def test_several_jobs_states_come_back_in_one_qstat(pbs_testbed, pbs_jobs):
    """The node provider asks for all its worker jobs at once (OpenPBS's qstat -F json shows only the first)."""
    job = script(pbs_jobs.workdir, "sleep.sh", "sleep 60\n")
    ids = [pbs_jobs.submit(job, "-l", "select=1:ncpus=1") for _ in range(2)]
    for job_id in ids:
        pbs_testbed.wait_for_state(job_id, "R", JOB_TIMEOUT_S)
    ask = f"import json; from mpiray.batch.pbs import Pbs; print(json.dumps(Pbs().states({[*ids, '999999.nowhere']})))"
    result = pbs_testbed.run([PYTHON, "-c", ask], timeout=60, cwd=ROOT)
    assert json.loads(result.stdout) == {ids[0]: "running", ids[1]: "running", "999999.nowhere": "gone"}, result.stderr
