"""Pools Ray can address, on the 3-host Slurm testbed, by jobs/recipes/rl_pools.py's sbatch lines run as printed: a
trainer job on the two hosts of one leaf switch (sw1) and a rollout job that joins its cluster on the third (sw2), or
one heterogeneous job of a trainer and a rollout component. Every node carries its labels (job, batch job, role,
switch, ...); the learners' placement group packed by switch lands on the trainer nodes, one each; the rollout actors
placed by role land on the rollout nodes; and the rollouts improve the learners' policies."""

from __future__ import annotations

import time

import pytest

from mpiray.elastic.registry import Registry

from helpers import JOB_TIMEOUT_S, ROOT, driver_report
from slurm import testbed
from slurm.recipes import finished, recipe_lines, submit_printed

RECIPE = ROOT / "jobs" / "recipes" / "rl_pools.py"


def test_the_recipe_prints_a_trainer_job_a_rollout_job_joining_it_and_the_hetjob_form():
    assert recipe_lines(RECIPE) == [
        "MPIRAY_ROLE=trainer sbatch -N 2 --switches=1 jobs/slurm_multi_node.sh python jobs/recipes/rl_pools.py",
        "MPIRAY_JOIN=JOB_ID MPIRAY_ROLE=rollout MPIRAY_DRIVER= sbatch -N 1 jobs/slurm_multi_node.sh",
        "sbatch jobs/slurm_hetjob.sh python jobs/recipes/rl_pools.py",
    ]


def wait_for_cluster(registry: Registry, job_id: str) -> None:
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while job_id not in [entry.job_id for entry in registry.running()]:
        if time.monotonic() > deadline:
            pytest.fail(f"job {job_id}'s cluster never showed up in the registry")
        time.sleep(0.5)


@pytest.mark.timeout(JOB_TIMEOUT_S * 3)
def test_a_trainer_pool_packed_by_switch_and_a_joined_rollout_pool_land_where_their_labels_say(
        slurm_testbed, jobs, tmp_path, private_registry):
    bed = slurm_testbed
    trainer_line, rollout_line, _ = recipe_lines(RECIPE)
    head = submit_printed(bed, jobs, tmp_path, trainer_line)
    wait_for_cluster(Registry(private_registry), head)
    joined = submit_printed(bed, jobs, tmp_path, rollout_line.replace("JOB_ID", head))
    report = driver_report(finished(bed, tmp_path, head, "ray-multi-node"), "RECIPE")
    finished(bed, tmp_path, joined, "ray-multi-node")  # it left with the cluster, exit 0
    sw1 = [name for name in bed.node_names if testbed.switch_of(bed, name) == "sw1"]
    (rollout_host,) = set(bed.node_names) - set(sw1)
    # Every node's labels, the joined job's with its own batch job and role.
    assert sorted((labels["mpiray.io/host"], labels["mpiray.io/job"], labels["mpiray.io/batch-job"],
                   labels["mpiray.io/role"], labels["mpiray.io/switch"], labels["mpiray.io/partition"])
                  for labels in report["labels"]) == sorted(
        (name, head, joined if name == rollout_host else head, "rollout" if name == rollout_host else "trainer",
         testbed.switch_of(bed, name), bed.partition) for name in bed.node_names)
    assert report["packed_by_switch"] is True
    assert sorted(learner["host"] for learner in report["learners"]) == sw1  # one on each, under one switch
    assert {(r["host"], r["role"], r["batch_job"]) for r in report["rollouts"]} == {(rollout_host, "rollout", joined)}
    assert all(after >= before for before, after in report["returns"])
    for job_id in (head, joined):
        jobs.wait_until_gone(job_id)


@pytest.mark.timeout(JOB_TIMEOUT_S * 2)
def test_the_same_recipe_as_a_hetjob_puts_the_learner_on_the_trainer_component_and_rollouts_on_the_other(
        slurm_testbed, jobs, tmp_path):
    bed = slurm_testbed
    *_, hetjob_line = recipe_lines(RECIPE)
    job_id = submit_printed(bed, jobs, tmp_path, hetjob_line)
    report = driver_report(finished(bed, tmp_path, job_id, "ray-hetjob"), "RECIPE")
    roles = {labels["mpiray.io/host"]: labels["mpiray.io/role"] for labels in report["labels"]}
    assert sorted(roles.values()) == ["rollout", "rollout", "trainer"]
    assert [learner["host"] for learner in report["learners"]] == [h for h, role in roles.items() if role == "trainer"]
    assert sorted(r["host"] for r in report["rollouts"]) == sorted(h for h, role in roles.items() if role == "rollout")
    jobs.wait_until_gone(job_id)
