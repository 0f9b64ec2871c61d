"""The trainer on the oldest Ray that setup.cfg allows (Ray 2.52, in .envs/ray-2.52: bash tests/envs.sh ray-2.52),
under the real launcher: one iteration, and what its RLlib cannot do refused with the reason. Ray 2.52's RLlib
lacks custom_resources_for_main_process and custom_resources_per_learner, and puts all learners in one bundle."""

from __future__ import annotations

import sys

import pytest

from helpers import launch

pytestmark = [pytest.mark.train, pytest.mark.smoke_ray]
pytest.importorskip("ray.rllib", reason="the trainer needs RLlib (the train extra)")
TINY = ["--env", "BasicEnv", "--train-batch-size", "200", "--fcnet-hiddens", "16"]


def test_one_iteration_of_the_trainer_on_this_ray(tmp_path):
    run = launch(tmp_path, 2, driver=[sys.executable, "-m", "train", *TINY, "--stop-iters", "1", "--storage-path",
                                      str(tmp_path / "results")], timeout=300, tag="oldest")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "[train] learners: 1 on 1 nodes:" in run.stderr  # the local learner, in the algorithm's process
    assert " iter 1 |" in run.stderr


def test_learners_this_rays_rllib_cannot_place_are_refused_before_ray_waits(tmp_path):
    # 2 ranks on this host, 1 CPU each: two learners of one CPU need two CPUs on one node under Ray 2.52's
    # one-bundle RLlib, and one per node (a learner slot each) under 2.60's; more than that never fits.
    run = launch(tmp_path, 2, driver=[sys.executable, "-m", "train", *TINY, "--num-learners", "3", "--stop-iters", "1",
                                      "--storage-path", str(tmp_path / "results")], timeout=300, tag="refused")
    assert run.returncode == 2, run.stderr[-3000:]
    assert "3 learners" in run.stderr and ("one bundle" in run.stderr or "can hold 1:" in run.stderr)
