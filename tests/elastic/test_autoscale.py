"""The autoscaler's bounds and the worker jobs it still has to cancel (mpiray/elastic/autoscale.py)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from mpiray.batch import jobs
from mpiray.config import Config
from mpiray.elastic.autoscale import Autoscale, active_jobs, parse_bounds
from mpiray.errors import ConfigError
from mpiray.host.resources import Share


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


def head_rank(tmp_path, ranks: int, hosts: int | None, **options) -> SimpleNamespace:
    """What Autoscale reads of rank 0: its config, scheduler, ranks and hosts, and a log."""
    config = Config(registry=tmp_path / "registry", autoscale="1:3", **options)
    return SimpleNamespace(config=config, env=SimpleNamespace(scheduler="slurm"), comm=SimpleNamespace(size=ranks),
                           hosts=hosts, log=SimpleNamespace(event=lambda *args, **fields: None))


SHARE = Share(cpus=2, gpu_ids=(), memory=2**30, object_store=2**28)


def test_min_and_max_count_ray_nodes_one_per_host_under_ray_node_per_host(tmp_path):
    # 4 ranks on 1 host, one Ray node per host: the job has 1 node of its own, so 2 worker jobs may come.
    autoscale = Autoscale(head_rank(tmp_path, 4, 1, ray_node_per="host"), "7", tmp_path / "logs" / "7")
    ray_config = json.loads(Path(autoscale.write_config(SHARE)).read_text())
    assert (autoscale.own_nodes, ray_config["max_workers"]) == (1, 2)
    assert ray_config["available_node_types"]["mpiray.worker"]["min_workers"] == 0
    # The same job with one Ray node per rank already has 4 nodes: more than MAX.
    with pytest.raises(ConfigError, match="this job alone has 4 nodes, more than the maximum 3"):
        Autoscale(head_rank(tmp_path, 4, None), "8", tmp_path / "logs" / "8").write_config(SHARE)
