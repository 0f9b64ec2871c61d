"""What OpenPBS 23.06.06 printed on the project's 3-host PBS testbed on 2026-11-25, kept as data for the
fast tests (tests/unit/batch/test_pbs_records.py, tests/unit/batch/test_batch_pbs.py), which run where no PBS is installed.

The testbed (tests/pbs/): server `mpiray-pbs-server` (10.78.0.1), moms `mpiray-pbs1..3` (10.78.0.11-13),
`ncpus=4` each, the queue `workq` with `kill_delay` 30, job history kept, jobs run as the user `mpiraypbs`.

Assembled, not captured whole: no file of PBS's raw output was kept on that day. Each record below is put
together from what the project wrote down then, and its comment says from where and which fields are as
recorded; the rest are filled in from the same job's request (its qsub -l options, its script's #PBS
lines) or from qstat's documented layout (../shared/PBS-TESTBED.md, "How OpenPBS behaves (measured)").
The sources: the qstat records of tests/unit/batch/test_batch_pbs.py (commits 74abb24, 6ab10cc), the assertions the
PBS tests made on qstat's fields (tests/real/pbs/: test_pbs.py, test_pbs_testbed.py, test_pbs_elastic.py),
the measured facts of tests/pbs/README.md and ../shared/PBS-TESTBED.md, and the commit messages of that
day (git log -- tests/pbs tests/real/pbs; the tests were tests/test_pbs*.py then). Abridged: fields nobody
recorded are left out (of the JSON records: resources_used, every time but RUNNING's stime, comment,
Variable_List, ...). Job ids other than the recorded ones (12, 2, 3) are of the testbed's form, not the recorded
numbers.
"""

from __future__ import annotations

import json

PBS_VERSION = "23.06.06"
RECORDED_ON = "2026-11-25"
SERVER = "mpiray-pbs-server"
MOMS = ("mpiray-pbs1", "mpiray-pbs2", "mpiray-pbs3")
USER = "mpiraypbs"
OWNER = f"{USER}@{SERVER}"  # Job_Owner, as the DSV record below has it
# qstat -F json's "timestamp" (seconds since 1970): not recorded; 2026-11-25 03:05:36 UTC.
TIMESTAMP = 1795575936
EXIT_WALLTIME = -29  # Exit_status of a job PBS killed at its walltime (JOB_EXEC_KILL_WALLTIME)
EXIT_QDEL = 256 + 15  # Exit_status of a job whose script PBS ended with SIGTERM (qdel): 271


def qstat_json(jobs: dict[str, dict], server: str = SERVER) -> str:
    """`qstat -f -F json [-x] IDS` as OpenPBS prints it: the envelope PBS-TESTBED.md records around jobs."""
    return json.dumps({"timestamp": TIMESTAMP, "pbs_version": PBS_VERSION, "pbs_server": server, "Jobs": jobs},
                      indent=4) + "\n"


def three_chunks(cpus: int, index: int = 0) -> dict:
    """exec_host and exec_vnode of a place=scatter job of 3 chunks of `cpus` CPUs, one per mom, in the
    layout recorded in RUNNING below ("mpiray-pbs1/0*2+..."; "a/0+b/0" for 1 CPU, PBS-TESTBED.md)."""
    per_host = f"*{cpus}" if cpus > 1 else ""
    return {"exec_host": "+".join(f"{mom}/{index}{per_host}" for mom in MOMS),
            "exec_vnode": "+".join(f"({mom}:ncpus={cpus})" for mom in MOMS)}


def three_hosts_request(cpus: int, walltime: str | None = None) -> dict:
    """Resource_List of `qsub -l select=3:ncpus=C -l place=scatter [-l walltime=W]`, as RUNNING has it."""
    resources = {"ncpus": 3 * cpus, "nodect": 3, "place": "scatter", "select": f"3:ncpus={cpus}"}
    return {**resources, "walltime": walltime} if walltime else resources


# 23.06.06, 2026-11-25: a running 3-host job, `qstat -f -F json 12.pbs-server`, as recorded in
# tests/unit/batch/test_batch_pbs.py (74abb24, written down abridged there), every field as recorded; its server was
# then named pbs-server. The job of jobs/pbs_multi_node.sh that the launcher read: select 3:ncpus=2,
# walltime 5 min, rank 0's qstat.
RUNNING_ID = "12.pbs-server"
RUNNING = {
    "Job_Name": "ray", "Job_Owner": "mpiraypbs@pbs-server", "job_state": "R", "queue": "workq",
    "exec_host": "mpiray-pbs1/0*2+mpiray-pbs2/0*2+mpiray-pbs3/0*2",
    "exec_vnode": "(mpiray-pbs1:ncpus=2)+(mpiray-pbs2:ncpus=2)+(mpiray-pbs3:ncpus=2)",
    "Resource_List": {"ncpus": 6, "nodect": 3, "place": "scatter", "select": "3:ncpus=2", "walltime": "00:05:00"},
    "stime": "Wed Nov 25 03:05:06 2026", "run_count": 1, "substate": 42,
}

# 23.06.06, 2026-11-25: tests/real/pbs/test_pbs.py's 3-host job whose driver exits 3 (59723fb: "qsub -> finished
# 8.1-9.5 s ... Exit_status 3, one Ray node per host with select's 2 CPUs"). As recorded: job_state F,
# Exit_status 3, run_count 1, select 3:ncpus=2, walltime 300 s, 2 CPUs on each of the three moms in order.
# Filled in: Job_Name (the script's #PBS -N), the rest of Resource_List from its qsub -l options,
# exec_host in RUNNING's layout, substate 92 (finished, PBS-TESTBED.md).
DRIVER_EXIT_3_ID = f"14.{SERVER}"
DRIVER_EXIT_3 = {
    "Job_Name": "ray-multi-node", "Job_Owner": OWNER, "job_state": "F", "queue": "workq", **three_chunks(2),
    "Resource_List": three_hosts_request(2, "00:05:00"), "run_count": 1, "substate": 92, "Exit_status": 3,
}

# 23.06.06, 2026-11-25: tests/real/pbs/test_pbs.py's two jobs of one user at once (59723fb), each waiting for the
# other's cluster. As recorded: Exit_status 0 for both, and their exec_host on the same three moms, the
# first's "mpiray-pbs1/0*2+...", the second's "mpiray-pbs1/1*2+..." (the test's comment). Filled in as above.
TWO_AT_ONCE = {
    f"{number}.{SERVER}": {"Job_Name": "ray-multi-node", "Job_Owner": OWNER, "job_state": "F", "queue": "workq",
                           **three_chunks(2, index), "Resource_List": three_hosts_request(2, "00:05:00"),
                           "run_count": 1, "substate": 92, "Exit_status": 0}
    for number, index in ((20, 0), (21, 1))
}

# 23.06.06, 2026-11-25: a select without ncpus, `qsub -l select=3 -l place=scatter jobs/pbs_multi_node.sh`
# (tests/real/pbs/test_pbs.py, 59723fb), as rank 0 read it while it ran. As recorded: select "3", as asked (rank 0
# named the cause select_without_ncpus from it), 1 CPU per chunk (NCPUS=1, tests/pbs/README.md). Filled in:
# exec_host/exec_vnode in the 1-CPU layout, the rest of Resource_List, substate 42 (running).
SELECT_WITHOUT_NCPUS_ID = f"22.{SERVER}"
SELECT_WITHOUT_NCPUS = {
    "Job_Name": "ray-multi-node", "Job_Owner": OWNER, "job_state": "R", "queue": "workq", **three_chunks(1),
    "Resource_List": {"ncpus": 3, "nodect": 3, "place": "scatter", "select": "3"}, "run_count": 1, "substate": 42,
}

# 23.06.06, 2026-11-25: jobs/pbs_polaris.sh as submitted to Polaris but for its queue and size
# (`qsub -q workq -l select=3:system=polaris:ncpus=2`, tests/real/pbs/test_pbs.py, 59723fb). As recorded:
# Exit_status 0, three Ray nodes. Filled in: the select as asked, the script's other #PBS -l lines
# (place, walltime, filesystems), the rest as above.
POLARIS_ID = f"15.{SERVER}"
POLARIS = {
    "Job_Name": "ray-polaris", "Job_Owner": OWNER, "job_state": "F", "queue": "workq", **three_chunks(2),
    "Resource_List": {"filesystems": "home:eagle", "ncpus": 6, "nodect": 3, "place": "scatter",
                      "select": "3:system=polaris:ncpus=2", "walltime": "01:00:00"},
    "run_count": 1, "substate": 92, "Exit_status": 0,
}

# 23.06.06, 2026-11-25: a qdel'ed job, tests/real/pbs/test_pbs_testbed.py (88e7bac: "qdel ends every process on
# every host (10.5 s, Exit_status 271)"): select=3:ncpus=1, place=scatter, `sleep 300` on each host
# through pbs_tmrsh. As recorded: job_state F, Exit_status 271 (256 + SIGTERM), substate 91 (finished
# after qdel, PBS-TESTBED.md). Filled in: exec_host/exec_vnode in the 1-CPU layout, Resource_List from its
# qsub -l options (no walltime asked).
QDELETED_ID = f"6.{SERVER}"
QDELETED = {
    "Job_Name": "sleep.sh", "Job_Owner": OWNER, "job_state": "F", "queue": "workq", **three_chunks(1),
    "Resource_List": three_hosts_request(1), "run_count": 1, "substate": 91, "Exit_status": EXIT_QDEL,
}

# 23.06.06, 2026-11-25: a qrerun'd training job (tests/real/pbs/test_pbs.py, 311cc4f: "qrerun after the second
# checkpoint ...: run_count 2, the training continued ..., Exit_status 0"). As recorded: Exit_status 0,
# run_count 2, under the same id. Filled in as DRIVER_EXIT_3.
RERUN_ID = f"31.{SERVER}"
RERUN = {
    "Job_Name": "ray-multi-node", "Job_Owner": OWNER, "job_state": "F", "queue": "workq", **three_chunks(2),
    "Resource_List": three_hosts_request(2, "00:05:00"), "run_count": 2, "substate": 92, "Exit_status": 0,
}

# 23.06.06, 2026-11-25: a job PBS killed at its walltime (tests/real/pbs/test_pbs_testbed.py, 88e7bac: "a 15 s
# walltime kills a job with no warning (finished after 38.4 s, Exit_status -29)"), select=1:ncpus=1. As
# recorded: job_state F, Exit_status -29, walltime 15 s. Which mom ran it was not recorded: no exec_host.
WALLTIME_KILLED_ID = f"8.{SERVER}"
WALLTIME_KILLED = {
    "Job_Name": "walltime.sh", "Job_Owner": OWNER, "job_state": "F", "queue": "workq",
    "Resource_List": {"ncpus": 1, "nodect": 1, "select": "1:ncpus=1", "walltime": "00:00:15"}, "run_count": 1,
    "Exit_status": EXIT_WALLTIME,
}
# 23.06.06: the words PBS wrote to such a job's stderr, as ../shared/PBS-TESTBED.md quotes them (a 20 s
# limit hit at 26 s, measured on the same OpenPBS before the 3-host testbed); part of the line, verbatim.
WALLTIME_STDERR = "job killed: walltime 26 exceeded limit 20"

# 23.06.06, 2026-11-25: an elastic worker job that drained before its own walltime (tests/real/pbs/test_pbs_elastic.py,
# aa3bbf9): its template's `#PBS -l walltime=00:01:40`, one CPU (WORKER_CPUS=1). As recorded: Exit_status 124
# (the worker job's rank stopped itself, not PBS's -29). Filled in: the name's cluster and node number
# (mpiray-CLUSTER-wN), the select mpiray/batch/pbs.py writes; the mom was not recorded.
WORKER_DRAINED_ID = f"40.{SERVER}"
WORKER_DRAINED = {
    "Job_Name": "mpiray-37-w3", "Job_Owner": OWNER, "job_state": "F", "queue": "workq",
    "Resource_List": {"ncpus": 1, "nodect": 1, "select": "1:ncpus=1", "walltime": "00:01:40"}, "run_count": 1,
    "Exit_status": 124,
}

# 23.06.06, 2026-11-25: `qstat -x -f -F dsv 2.mpiray-pbs-server 3.mpiray-pbs-server`, two jobs, one line
# each, as recorded in tests/unit/batch/test_batch_pbs.py (6ab10cc), cut short there; -F json would print the first
# alone (OpenPBS 23.06). Job 3 is an elastic worker job (mpiray-7-w2). The second job_state of the first
# line is inside its Variable_List's value.
DSV_TWO_JOBS = (
    "Job Id: 2.mpiray-pbs-server|Job_Name=STDIN|Job_Owner=mpiraypbs@mpiray-pbs-server|resources_used.ncpus=1|"
    "job_state=F|queue=workq|exec_vnode=(mpiray-pbs1:ncpus=1)|Variable_List=PBS_O_HOME=/home/u,X=a|job_state=R\n"
    "Job Id: 3.mpiray-pbs-server|Job_Name=mpiray-7-w2|job_state=R|queue=workq\n"
)
# 23.06.06, 2026-11-25: what qsub printed for a worker job: its id, ending in the server's name
# (tests/real/pbs/test_pbs_elastic.py asserts that of every job_submitted; the id is DSV_TWO_JOBS' worker job).
QSUB_WORKER = "3.mpiray-pbs-server\n"
# 23.06.06: qstat of a job the server does not know (tests/real/pbs/test_pbs_testbed.py asked for 999999.nowhere
# beside two running jobs, 6ab10cc; mpiray/batch/pbs.py reads these words). The line's exact form and qstat's
# exit code were not recorded: the words mpiray matches, in PBS's "qstat: MESSAGE ID" form; 1 for non-zero.
UNKNOWN_JOB = "999999.nowhere"
QSTAT_UNKNOWN_STDERR = f"qstat: Unknown Job Id {UNKNOWN_JOB}\n"
QSTAT_UNKNOWN_CODE = 1

# 23.06.06, 2026-11-25: `pbsnodes -a -F json` on the testbed up (tests/real/pbs/test_pbs_testbed.py: the three moms
# "free"). As recorded: the names and state free; ncpus 4 and system polaris as the testbed set them
# (qmgr). The envelope as qstat's; other fields (pcpus, Mom, ports, ...) not recorded, left out.
PBSNODES = json.dumps({
    "timestamp": TIMESTAMP, "pbs_version": PBS_VERSION, "pbs_server": SERVER,
    "nodes": {mom: {"state": "free", "resources_available": {"host": mom, "ncpus": 4, "system": "polaris",
                                                             "vnode": mom}} for mom in MOMS},
}, indent=4) + "\n"

# 23.06.06, 2026-11-25: `qstat -Qf workq`, abridged to what is known: kill_delay 30 as the testbed set it
# (qmgr; qdel's SIGTERM reached the driver 0.2 s after the qdel and the job was finished 24 s later, within
# it: 59723fb), an execution queue that took and ran jobs. qstat -Qf's "name = value" layout.
QUEUE_WORKQ = """Queue: workq
    queue_type = Execution
    kill_delay = 30
    enabled = True
    started = True
"""
PBS_DEFAULT_KILL_DELAY_S = 10  # a queue without kill_delay set (PBS-TESTBED.md)
