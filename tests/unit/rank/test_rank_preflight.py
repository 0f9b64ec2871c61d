"""The pre-flight across the job, in one process (each rank a thread over the in-memory communicator, --dry-run):
every rank's versions and every host's findings reach rank 0 before any `ray start`, which refuses a job that
cannot work with exit 2 and says where and what."""

from __future__ import annotations

import socket
from dataclasses import replace

from mpiray.rank import preflight

from memory_comm import Job, ScriptedLeader


def test_ranks_that_run_other_versions_stop_the_job_before_anything_starts(tmp_path, config, monkeypatch):
    real = preflight.versions

    def versions(me):  # rank 2 started from another environment: another numpy
        found = real(me)
        return {**found, "numpy": "1.26.4"} if me.rank == 2 else found

    monkeypatch.setattr(preflight, "versions", versions)
    job = Job(tmp_path, 3, ScriptedLeader(), config, hosts=["n1", "n1", "n2"])
    assert job.wait() == {0: 2, 1: 2, 2: 2}
    (failed,) = job.events(0, "failed")
    message = failed["fields"]["message"]
    assert failed["fields"]["cause"] == "version_skew"
    host = socket.gethostname()  # every thread's (the in-memory world groups the ranks by the hosts given)
    assert "numpy 2" in message and f"but 1.26.4 on 1 host ({host}; ranks 2)" in message
    (table,) = job.events(0, "preflight")
    assert [row["ranks"] for row in table["fields"]["groups"]] == [[0, 1], [2]]
    assert not job.events(0, "head_alive")  # the head's `ray start` never went


def test_a_hosts_unwritable_spill_dir_is_refused_naming_the_host(tmp_path, config):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    job = Job(tmp_path, 3, ScriptedLeader(), config, hosts=["n1", "n2", "n2"],
              configs={1: replace(config, spill_dir=blocked / "spill"), 2: replace(config, spill_dir=blocked / "spill")})
    assert job.wait() == {0: 2, 1: 2, 2: 2}
    (failed,) = job.events(0, "failed")
    assert failed["fields"]["cause"] == "dir_unwritable"
    assert failed["fields"]["message"].startswith(f"on {socket.gethostname()}: the spill dir {blocked / 'spill'} is "
                                                  "not writable here")
