"""Training that survives the batch system: which experiment a (requeued) job continues, from Tune's
files; the algorithm placed on the head node. Real requeues and lost nodes: tests/real/slurm/test_slurm_training.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

from train import storage


def make_experiment(path: Path, *statuses: str, job_id: str | None = None) -> Path:
    """An experiment dir as Tune leaves it: tuner.pkl, and experiment_state-*.json once trials ran."""
    path.mkdir(parents=True)
    (path / storage.TUNER_STATE).write_bytes(b"pickle")
    if statuses:
        trials = [[json.dumps({"trial_id": f"t{n}", "status": status}), "{}"] for n, status in enumerate(statuses)]
        (path / "experiment_state-2026-11-23_10-00-00.json").write_text(json.dumps({"trial_data": trials}))
    storage.tag_experiment(path, job_id)
    return path


def test_an_experiment_is_finished_only_when_every_trial_terminated(tmp_path):
    assert storage.experiment_status(tmp_path / "none") is None
    assert storage.experiment_status(make_experiment(tmp_path / "new")) == "unstarted"
    assert storage.experiment_status(make_experiment(tmp_path / "done", "TERMINATED", "TERMINATED")) == "finished"
    # A job stopped by SIGTERM or a requeue is saved with its trial RUNNING; Tune restores it as PENDING.
    assert storage.experiment_status(make_experiment(tmp_path / "stopped", "TERMINATED", "RUNNING")) == "unfinished"
    assert storage.experiment_status(make_experiment(tmp_path / "paused", "PAUSED")) == "unfinished"
    assert storage.experiment_status(make_experiment(tmp_path / "failed", "ERROR", "TERMINATED")) == "errored"


def test_the_newest_state_file_counts_and_an_unreadable_one_is_left_to_tune(tmp_path):
    path = make_experiment(tmp_path / "x", "RUNNING")
    newer = {"trial_data": [[json.dumps({"status": "TERMINATED"}), "{}"]]}
    (path / "experiment_state-2026-11-23_11-00-00.json").write_text(json.dumps(newer))
    assert storage.experiment_status(path) == "finished"
    (path / "experiment_state-2026-11-23_12-00-00.json").write_text("{not json")
    assert storage.experiment_status(path) == "unfinished"


def test_a_requeued_job_finds_the_experiment_it_started(tmp_path):
    old = make_experiment(tmp_path / "PPO_CartPole-v1_1", "RUNNING", job_id="4242")
    make_experiment(tmp_path / "PPO_CartPole-v1_2", "RUNNING", job_id="4243")
    make_experiment(tmp_path / "untagged", "RUNNING")
    assert storage.experiment_of_job(tmp_path, "4242") == old
    assert storage.experiment_of_job(tmp_path, "9999") is None
    newer = make_experiment(tmp_path / "PPO_CartPole-v1_3", "RUNNING", job_id="4242")
    os.utime(old, (1, 1))
    assert storage.experiment_of_job(tmp_path, "4242") == newer
    # Another algorithm or env in the same job is another experiment.
    assert storage.experiment_of_job(tmp_path, "4242", "DQN_CartPole-v1_") is None
    assert storage.experiment_of_job(tmp_path, "4242", "PPO_CartPole-v1_") == newer


def test_resume_picks_the_newest_unfinished_experiment_never_a_finished_one(tmp_path):
    unfinished = make_experiment(tmp_path / "PPO_CartPole-v1_20261101-000000", "RUNNING")
    finished = make_experiment(tmp_path / "PPO_CartPole-v1_20261102-000000", "TERMINATED")
    os.utime(unfinished, (1, 1))
    assert storage.latest_experiment(tmp_path, "PPO_CartPole-v1_") == unfinished
    assert finished.exists()
    assert storage.latest_experiment(tmp_path, "DQN_") is None


def test_slurm_says_when_a_job_is_a_restart():
    job = {"SLURM_JOB_ID": "77"}
    assert storage.restart_of({**job, "SLURM_RESTART_COUNT": "2"}) == "restart 2 (SLURM_RESTART_COUNT)"
    assert storage.restart_of({**job, "SLURM_RESTART_COUNT": "0"}) is None
    assert storage.restart_of(job) is None
    assert storage.restart_of({"PBS_JOBID": "77.server"}) is None  # PBS keeps its id on qrerun, says no count


def test_the_algorithm_goes_to_the_head_and_its_learners_take_learner_slots_anywhere():
    from train import cluster, config

    def bundles(algorithm_config):
        return algorithm_config.algo_class.default_resource_request(algorithm_config).bundles

    ppo = config.default_algorithm_config("PPO").env_runners(num_env_runners=3)
    three_nodes = cluster.ClusterInfo(None, 3, 6.0, 0.0, head_cpus=2.0, head_gpus=0.0)
    assert cluster.head_problem(ppo, three_nodes) is None
    assert config.pin_to_head(ppo)
    placed = bundles(ppo)
    assert placed[0] == {"CPU": 1, cluster.HEAD_RESOURCE: 0.001}  # the algorithm with its local learner
    assert all(cluster.HEAD_RESOURCE not in bundle for bundle in placed[1:])  # env runners anywhere

    # A head without CPUs for it (--head-cpus 0): nothing is pinned, the caller says what that risks.
    no_head_cpus = cluster.ClusterInfo(None, 3, 4.0, 0.0, head_cpus=0.0, head_gpus=0.0)
    problem = cluster.head_problem(config.default_algorithm_config("PPO"), no_head_cpus)
    assert problem == "the head node has 0 CPUs and 0 GPUs, the algorithm's main process needs 1 and 0"

    # Two GPU learners: the main process on the head, each learner a learner slot on any node, with what the
    # user asked of them kept (RLlib replaces the whole dict: mpiray merges).
    two_learners = config.default_algorithm_config("PPO").env_runners(num_env_runners=2).learners(
        num_learners=2, num_gpus_per_learner=1, custom_resources_per_learner={"accel": 1})
    assert config.pin_to_head(two_learners) and config.spread_learners(two_learners)
    placed = bundles(two_learners)
    assert [cluster.HEAD_RESOURCE in bundle for bundle in placed] == [True, False, False, False, False]
    assert placed[-2:] == [{"GPU": 1, "accel": 1, cluster.LEARNER_SLOT: 1}] * 2
    assert not config.spread_learners(config.default_algorithm_config("PPO"))  # no remote learner: nothing to spread


def options(*argv: str):
    from train import cli

    return cli.train_options(cli.build_train_parser({}).parse_args(list(argv)))


def test_which_experiment_a_run_continues(tmp_path):
    from train.run import _experiment_to_continue

    job = make_experiment(tmp_path / "PPO_CartPole-v1_20261123-100000", "RUNNING", job_id="77")
    requeued = {"MPIRAY_JOB_ID": "77", "SLURM_JOB_ID": "77", "SLURM_RESTART_COUNT": "1"}
    assert _experiment_to_continue(options(), "PPO", tmp_path, requeued) == (
        job, "job 77 started it; this is its restart 1 (SLURM_RESTART_COUNT)")
    # The same job id without a restart (two runs in one salloc allocation): a new experiment.
    assert _experiment_to_continue(options(), "PPO", tmp_path, {"MPIRAY_JOB_ID": "77"}) == (None, "")
    # A requeued job whose command trains something else does not continue this one.
    assert _experiment_to_continue(options("--run", "DQN"), "DQN", tmp_path, requeued) == (None, "")
    assert _experiment_to_continue(options("--name", "x"), "PPO", tmp_path, requeued) == (tmp_path / "x", "--name x")
    assert _experiment_to_continue(options("--resume"), "PPO", tmp_path, {}) == (job, "--resume: the newest unfinished one")


def test_a_restart_on_a_smaller_cluster_fails_at_once_instead_of_waiting_for_nodes(tmp_path):
    import pytest

    from train import cluster

    saved = {"num_cpus_for_main_process": 1, "num_env_runners": 5, "num_cpus_per_env_runner": 1,
             "num_learners": 0, "num_gpus_per_learner": 0, "custom_resources_for_main_process": {cluster.HEAD_RESOURCE: 0.001}}
    three_nodes = cluster.ClusterInfo(None, 3, 6.0, 0.0, head_cpus=2.0)
    cluster.check_saved_resources(saved, three_nodes, "exp")  # as it started: fine
    two_nodes = cluster.ClusterInfo(None, 2, 4.0, 0.0, head_cpus=2.0)
    with pytest.raises(cluster.ResourceError, match="exp was started on a bigger cluster: its saved config needs "
                       "6 CPUs and 0 GPUs; the cluster has 4 and 0"):
        cluster.check_saved_resources(saved, two_nodes, "exp")
    no_head_cpus = cluster.ClusterInfo(None, 3, 6.0, 0.0, head_cpus=0.0)
    with pytest.raises(cluster.ResourceError, match="1 CPUs on the head node, which has 0"):
        cluster.check_saved_resources(saved, no_head_cpus, "exp")
    # The trial dirs' params.json files are what Tune restores.
    experiment = make_experiment(tmp_path / "e", "RUNNING")
    (experiment / "PPO_trial_0").mkdir()
    (experiment / "PPO_trial_0" / "params.json").write_text(json.dumps(saved))
    assert storage.saved_params(experiment) == [saved]


def test_a_restore_needs_a_learner_slot_for_each_spread_learner():
    """Three learners spread one per node (train/config.py spread_learners): two nodes' slots cannot hold them,
    though the CPUs would: Tune would wait forever for the third node."""
    from train import cluster

    saved = {"num_cpus_for_main_process": 1, "num_env_runners": 0, "num_learners": 3, "num_cpus_per_learner": 1,
             "custom_resources_per_learner": {cluster.LEARNER_SLOT: 1}}
    slot = {cluster.LEARNER_SLOT: 1.0}
    assert cluster.saved_resource_problems(saved, cluster.ClusterInfo(None, 3, 12.0, 0.0, 4.0, nodes=(slot,) * 3)) == []
    assert cluster.saved_resource_problems(saved, cluster.ClusterInfo(None, 2, 12.0, 0.0, 4.0, nodes=(slot,) * 2)) == [
        "3 learner slots (one node each); the cluster's nodes hold 2"]
    unspread = {**saved, "custom_resources_per_learner": {}}  # a Ray that cannot spread them: CPUs alone count
    assert cluster.saved_resource_problems(unspread, cluster.ClusterInfo(None, 2, 12.0, 0.0, 4.0, nodes=(slot,) * 2)) == []


def test_gpu_learners_ask_no_cpu_of_their_own_as_rllib_sizes_them():
    """num_cpus_per_learner "auto" (RLlib's default, saved as text): 0 CPUs beside a GPU, 1 without; aggregator
    actors 1 CPU each. Counting 1 for a GPU learner would refuse (and, in a restore, give up on) a cluster that
    holds the run."""
    from train import cluster

    saved = {"num_cpus_for_main_process": 1, "num_env_runners": 3, "num_cpus_per_env_runner": 1, "num_learners": 4,
             "num_cpus_per_learner": "auto", "num_gpus_per_learner": 1}
    four_gpus = cluster.ClusterInfo(None, 1, 4.0, 4.0, 4.0)
    assert cluster.saved_resource_problems(saved, four_gpus) == []
    assert cluster.saved_resource_problems({**saved, "num_gpus_per_learner": 0}, four_gpus) == [
        "8 CPUs and 0 GPUs; the cluster has 4 and 4"]
    assert cluster.saved_resource_problems({**saved, "num_aggregator_actors_per_learner": 1}, four_gpus) == [
        "8 CPUs and 4 GPUs; the cluster has 4 and 4"]
    role = {"num_learners": 2, "custom_resources_per_learner": {"mpiray_role_gpu": 0.001}}
    assert cluster.saved_resource_problems(role, cluster.ClusterInfo(None, 1, 4.0, 0.0, 4.0, nodes=({"CPU": 4.0},))) == [
        "0.002 of mpiray_role_gpu (--learners-on); the cluster's nodes hold 0"]
