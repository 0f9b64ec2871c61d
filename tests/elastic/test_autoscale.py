"""The autoscaler's bounds and the worker jobs it still has to cancel (mpiray/elastic/autoscale.py)."""

from __future__ import annotations

import json

import pytest

from mpiray.batch import jobs
from mpiray.elastic.autoscale import active_jobs, parse_bounds


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
