"""Node labels (mpiray/raynode/labels.py): mpiray's from the machine and the job, the user's as Ray takes them."""

import pytest

from mpiray.batch.environment import cray_switch, detect, leaf_switch, read_cray_name
from mpiray.errors import ConfigError
from mpiray.options import parse_args
from mpiray.raynode import labels


def test_a_nodes_labels_name_its_job_batch_job_host_rank_role_partition_and_switch_and_keep_the_users():
    found = labels.node_labels(job="4711", batch_job="4712", host="x1000c0s1b0n0", rank=3, role="rollout",
                               partition="gpu", switch="leaf3", user={"team": "rl"})
    assert found == {"mpiray.io/job": "4711", "mpiray.io/batch-job": "4712", "mpiray.io/host": "x1000c0s1b0n0",
                     "mpiray.io/rank": "3", "mpiray.io/role": "rollout", "mpiray.io/partition": "gpu",
                     "mpiray.io/switch": "leaf3", "team": "rl"}
    assert labels.text(found).startswith("mpiray.io/batch-job=4712,mpiray.io/host=x1000c0s1b0n0,")


def test_machine_words_are_fitted_to_rays_rules_and_a_missing_one_is_left_out():
    found = labels.node_labels(job="20261128-205824-21090", batch_job=None, host="node 7:(a)", rank=0, role="main",
                               partition=None, switch=None, user={})
    assert found["mpiray.io/host"] == "node-7-a"
    assert "mpiray.io/batch-job" not in found and "mpiray.io/switch" not in found
    assert labels.fitted("x" * 80) == "x" * 63
    assert labels.fitted("_-.") == ""


@pytest.mark.parametrize("given, said", [
    ("team", "is not KEY=VALUE"),
    ("a=b=c", "is not KEY=VALUE"),
    ("-team=rl", "label key '-team'"),
    ("team=r l", "label 'team''s value 'r l'"),
    ("team=" + "x" * 64, "at most 63"),
    ("mpiray.io/role=x", "set by them, not by --labels"),
    ("ray.io/node-id=x", "set by them, not by --labels"),
    ("team=a,team=b", "given twice"),
])
def test_a_label_ray_would_refuse_is_refused_with_what_was_wrong(given, said):
    with pytest.raises(ValueError, match=None) as error:
        labels.parse(given)
    assert said in str(error.value)


def test_a_bad_label_option_is_a_config_error_before_anything_starts():
    with pytest.raises(ConfigError) as error:
        parse_args(["--labels", "team=r l"], {})
    assert "--labels" in str(error.value) and "'r l'" in str(error.value)
    with pytest.raises(ConfigError):
        parse_args(["--role", "roll out"], {})


def test_the_options_give_the_users_labels_sorted_and_the_role():
    config = parse_args(["--labels", "zone=b, team=rl", "--role", "rollout"], {})
    assert (config.labels, config.role) == ("team=rl,zone=b", "rollout")
    assert parse_args([], {}).role == "main"


def test_a_role_per_rank_range_gives_each_rank_the_first_that_names_it_and_main_to_the_rest():
    given = "trainer=0-1,rollout=2-,odd=9"
    assert [labels.role_of(given, rank) for rank in range(5)] == ["trainer", "trainer", "rollout", "rollout", "rollout"]
    assert [labels.role_of("learner=1", rank) for rank in range(3)] == ["main", "learner", "main"]
    assert labels.role_of("rollout", 7) == "rollout"
    assert parse_args(["--role", "trainer=0-1,rollout=2-"], {}).role == "trainer=0-1,rollout=2-"


@pytest.mark.parametrize("given, said", [
    ("trainer=a-b", "is not NAME=RANKS"),
    ("trainer=0-1,rollout", "'rollout' is not NAME=RANKS"),
    ("trainer=3-1", "runs backwards"),
    ("roll out=0", "role 'roll out'"),
])
def test_a_bad_role_range_is_a_config_error_saying_which_part(given, said):
    with pytest.raises(ConfigError) as error:
        parse_args(["--role", given], {})
    assert said in str(error.value) and "--role" in str(error.value)


def test_a_role_for_ranks_the_job_does_not_have_is_named_with_the_jobs_ranks():
    assert labels.roles_problem("trainer=0-1,rollout=2-", 3) is None
    assert labels.roles_problem("trainer=0-1,rollout=2-", 2) == (
        "--role rollout=2-: this job has 2 ranks (0-1); name ranks it has, or start more ranks")
    assert labels.roles_problem("a=0,b=5", 4).startswith("--role b=5: this job has 4 ranks (0-3)")
    assert labels.roles_problem("a=0,b=1-9", 4).startswith("--role b=1-9: this job has 4 ranks (0-3)")
    assert labels.roles_problem("rollout", 1) is None


@pytest.mark.parametrize("addr, pattern, switch", [
    ("spine1.leaf3.node17", "switch.switch.node", "leaf3"),
    ("leaf3.node17", None, "leaf3"),
    ("node17", "node", None),
    (None, None, None),
    ("a.b", "switch.switch.node", None),  # the pattern does not fit the address: no guess
])
def test_the_leaf_switch_is_the_part_before_the_node_in_slurms_topology_address(addr, pattern, switch):
    assert leaf_switch(addr, pattern) == switch


@pytest.mark.parametrize("name, switch", [
    ("x1000c3s5b0n1", "x1000c3"),  # HPE Cray EX's xname: cabinet x1000, chassis c3
    ("c0-0c2s7n1", "c0-0c2"),  # Cray XC's cname
    ("nid001234", None),
    (None, None),
])
def test_a_cray_nodes_switch_group_is_its_cabinet_and_chassis(name, switch):
    assert cray_switch(name) == switch


def test_the_cray_name_is_read_from_the_first_file_that_holds_one(tmp_path):
    (tmp_path / "xname").write_text("x1000c3s5b0n1\n")
    assert read_cray_name((str(tmp_path / "none"), str(tmp_path / "xname"))) == "x1000c3s5b0n1"
    assert read_cray_name((str(tmp_path / "none"),)) is None


def test_the_batch_environment_reads_the_partition_queue_and_switch():
    slurm = detect({"SLURM_JOB_ID": "7", "SLURM_JOB_PARTITION": "gpu", "SLURM_TOPOLOGY_ADDR": "s0.s2.n1",
                    "SLURM_TOPOLOGY_ADDR_PATTERN": "switch.switch.node"})
    assert (slurm.partition, slurm.switch) == ("gpu", "s2")
    assert detect({"PBS_JOBID": "7.pbs", "PBS_QUEUE": "debug"}).partition == "debug"
