"""The autoscaler's bounds and the worker jobs it still has to cancel (mpiray/elastic/autoscale.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mpiray.batch import jobs
from mpiray.config import Config
from mpiray.elastic.autoscale import Autoscale, active_jobs, parse_bounds
from mpiray.errors import ConfigError, StartupTimeout
from mpiray.host.resources import Share
from mpiray.logs.events import RankLog
from mpiray.rank.head import own_node_count


def test_autoscale_bounds_count_every_node_and_bad_ones_say_so():
    assert parse_bounds("1:3") == (1, 3) and parse_bounds("4:4") == (4, 4)
    for text in ("3", "0:2", "3:1", "a:b", "1:"):
        with pytest.raises(ValueError):
            parse_bounds(text)


def test_the_jobs_still_to_cancel_are_those_not_known_to_have_ended():
    state = {"jobs": {"1": {"job": "11", "state": jobs.RUNNING}, "2": {"job": "12", "state": jobs.GONE},
                      "3": {"job": "13", "state": jobs.PENDING}}}
    assert active_jobs(json.loads(json.dumps(state))) == {"1": "11", "3": "13"}
    assert active_jobs({}) == {}


def autoscale(tmp_path, own_nodes: int, job_id: str, scheduler: str = "slurm") -> Autoscale:
    """The head job's autoscaler, as rank 0 makes it: the job's config and scheduler, its own Ray nodes, a log."""
    config = Config(registry=tmp_path / "registry", autoscale="1:3")
    return Autoscale(config, scheduler, own_nodes, job_id, job_dir=tmp_path / "logs" / job_id, log=RankLog(0, "n1"))


SHARE = Share(cpus=2, gpu_ids=(), memory=2**30, object_store=2**28)


def test_min_and_max_count_the_jobs_own_ray_nodes(tmp_path):
    # 4 ranks on 1 host, one Ray node per host: the job has 1 node of its own, so 2 worker jobs may come.
    own = own_node_count(Config(ray_node_per="host"), ranks=4, hosts=1)
    scaler = autoscale(tmp_path, own, "7")
    ray_config = json.loads(Path(scaler.write_config(SHARE)).read_text())
    assert (scaler.own_nodes, ray_config["max_workers"]) == (1, 2)
    assert ray_config["available_node_types"]["mpiray.worker"]["min_workers"] == 0
    # The same job with one Ray node per rank already has 4 nodes: more than MAX.
    own = own_node_count(Config(ray_node_per="rank"), ranks=4, hosts=None)
    with pytest.raises(ConfigError, match="this job alone has 4 nodes, more than the maximum 3"):
        autoscale(tmp_path, own, "8").write_config(SHARE)


def test_a_job_whose_ranks_did_not_all_count_their_hosts_has_no_count_of_its_nodes():
    with pytest.raises(StartupTimeout, match="did not all count their hosts"):
        own_node_count(Config(ray_node_per="host"), ranks=4, hosts=None)


def test_autoscaling_needs_a_batch_scheduler_to_submit_to(tmp_path):
    with pytest.raises(ConfigError, match="this job runs under none"):
        autoscale(tmp_path, 1, "9", scheduler="none")
    assert not (tmp_path / "registry").exists()  # refused before anything was made
