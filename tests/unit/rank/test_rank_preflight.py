"""The pre-flight across the job, in one process (each rank a thread over the in-memory communicator, --dry-run):
every rank's versions and every host's findings reach rank 0 before any `ray start`, which refuses a job that
cannot work with exit 2 and says where and what."""

from __future__ import annotations

import socket
from dataclasses import replace

import pytest

from mpiray.rank import preflight

from memory_comm import Job, ScriptedLeader


def test_ranks_that_run_other_versions_stop_the_job_before_anything_starts(tmp_path, config, monkeypatch, names):
    real = preflight.versions

    def versions(me):  # rank 2 started from another environment: another numpy
        found = real(me)
        return {**found, "numpy": "1.26.4"} if me.rank == 2 else found

    monkeypatch.setattr(preflight, "versions", versions)
    job = Job(tmp_path, 3, ScriptedLeader(), config, hosts=["n1", "n1", "n2"], names=names)
    assert job.wait() == {0: 2, 1: 2, 2: 2}
    (failed,) = job.events(0, "failed")
    message = failed["fields"]["message"]
    assert failed["fields"]["cause"] == "version_skew"
    assert "numpy 2" in message and "but 1.26.4 on 1 host (n2; ranks 2)" in message
    (table,) = job.events(0, "preflight")
    assert [row["ranks"] for row in table["fields"]["groups"]] == [[0, 1], [2]]
    assert not job.events(0, "head_alive")  # the head's `ray start` never went


def test_a_hosts_unwritable_spill_dir_is_refused_naming_the_host(tmp_path, config, names):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    job = Job(tmp_path, 3, ScriptedLeader(), replace(config, bad_nodes="refuse"), hosts=["n1", "n2", "n2"], names=names,
              configs={1: replace(config, bad_nodes="refuse", spill_dir=blocked / "spill"),
                       2: replace(config, bad_nodes="refuse", spill_dir=blocked / "spill")})
    assert job.wait() == {0: 2, 1: 2, 2: 2}
    (failed,) = job.events(0, "failed")
    assert failed["fields"]["cause"] == "dir_unwritable"
    assert failed["fields"]["message"].startswith(f"on n2: the spill dir {blocked / 'spill'} is not writable here")


def test_hosts_that_share_a_hostname_are_refused_before_anything_starts_naming_their_ranks(tmp_path, config):
    # Two hosts as MPI splits the ranks, both called as this machine is (containers that share one name): mpiray,
    # which tells hosts apart by name, would take them for one (its link check then failed with a KeyError).
    job = Job(tmp_path, 4, ScriptedLeader(), config, hosts=["n1", "n1", "n2", "n2"])
    assert job.wait() == {0: 2, 1: 2, 2: 2, 3: 2}
    (failed,) = job.events(0, "failed")
    assert failed["fields"]["cause"] == "config"
    assert failed["fields"]["message"] == (
        f"hosts that MPI tells apart share a hostname: {socket.gethostname()!r} is the hostname of 2 hosts (ranks 0-3, "
        "their first ranks 0, 2); mpiray tells hosts apart by name: give each host its own (a container's --hostname, "
        "or the node's own name)")
    assert not job.events(0, "head_alive") and not job.events(0, "link_check")


def bad_spill(tmp_path, config):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    return replace(config, spill_dir=blocked / "spill")


def test_a_refused_workers_host_is_left_out_and_the_job_runs_on_the_others(tmp_path, config, names):
    leader = ScriptedLeader()
    job = Job(tmp_path, 4, leader, config, hosts=["n1", "n2", "n3", "n3"], names=names,
              configs={2: bad_spill(tmp_path, config), 3: bad_spill(tmp_path, config)})
    assert job.wait() == {0: 0, 1: 0, 2: 0, 3: 0}
    assert sorted(node.rank for node in leader.cluster.nodes) == [0, 1]  # n3's two ranks run no Ray
    (left_out,) = job.events(0, "nodes_excluded")
    fields = left_out["fields"]
    assert (fields["hosts"], fields["nodes"], fields["requested"]) == ("n3", 2, 4)
    assert fields["checks"] == {"n3": ["dir_unwritable"]} and "the spill dir" in fields["why"]
    assert fields["exclude"] == "leave n3 out of the MPI launcher's hosts (--hosts, the hostfile)"
    assert all(job.events(rank, "host_refused") for rank in (2, 3))
    assert not job.events(2, "node_starting") and not job.events(2, "dry_run_node")
    lines = (job.job_dir / preflight.EXCLUDED_FILE).read_text().splitlines()
    assert lines[0].startswith("n3\tdir_unwritable\tthe spill dir ") and lines[-1].startswith("# for the next")


def test_bad_nodes_refuse_ends_the_job_naming_every_refused_host(tmp_path, config, names):
    refuse = replace(config, bad_nodes="refuse")
    job = Job(tmp_path, 3, ScriptedLeader(), refuse, hosts=["n1", "n2", "n3"], names=names,
              configs={1: bad_spill(tmp_path, refuse), 2: bad_spill(tmp_path, refuse)})
    assert job.wait() == {0: 2, 1: 2, 2: 2}
    (failed,) = job.events(0, "failed")
    assert failed["fields"]["cause"] == "dir_unwritable"
    assert failed["fields"]["message"].startswith("on n2: the spill dir")
    assert failed["fields"]["message"].endswith("(and on n3: see the log)")
    assert not job.events(0, "head_alive")


def test_leaving_out_fewer_than_min_nodes_is_refused_in_one_line(tmp_path, config, names):
    job = Job(tmp_path, 3, ScriptedLeader(), replace(config, min_nodes=3), hosts=["n1", "n2", "n3"], names=names,
              configs={2: bad_spill(tmp_path, config)})
    assert job.wait() == {0: 2, 1: 2, 2: 2}
    (failed,) = job.events(0, "failed")
    assert failed["fields"]["cause"] == "too_few_nodes"
    assert failed["fields"]["message"].startswith("the pre-flight refused 1 host(s), which leaves 2 of the 3 Ray nodes, "
                                                  "fewer than --min-nodes 3: n3: dir_unwritable: the spill dir")
    assert not job.events(0, "head_alive")


def test_rank_0s_own_host_is_never_left_out(tmp_path, config, names):
    job = Job(tmp_path, 3, ScriptedLeader(), bad_spill(tmp_path, config), hosts=["n1", "n2", "n3"], names=names)
    assert job.wait() == {0: 2, 1: 2, 2: 2}
    (failed,) = job.events(0, "failed")
    assert failed["fields"]["cause"] == "dir_unwritable" and failed["fields"]["message"].startswith("on n1: ")


def test_min_nodes_above_the_jobs_nodes_is_bad_input_in_one_line(tmp_path, config):
    job = Job(tmp_path, 2, ScriptedLeader(), replace(config, min_nodes=3))
    assert job.wait() == {0: 2, 1: 2}
    (failed,) = job.events(0, "failed")
    assert failed["fields"]["cause"] == "config"
    assert failed["fields"]["message"] == ("--min-nodes 3 is more than this job's 2 Ray nodes: give at most 2 (or 0: 2, "
                                           "or every node of a smaller job)")


@pytest.mark.parametrize("scheduler, line", [
    ("slurm", "sbatch --exclude=n2,n7"),
    ("pbs", "leave n2,n7 out of qsub's -l select (host=NAME per chunk)"),
    ("none", "leave n2,n7 out of the MPI launcher's hosts (--hosts, the hostfile)")])
def test_the_exclude_line_is_the_schedulers(scheduler, line):
    assert preflight.exclude_line(scheduler, ["n2", "n7"]) == line
