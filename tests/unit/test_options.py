"""Options (mpiray/options.py): flags, MPIRAY_* defaults, the driver after '--', clear errors for bad input;
and the command line saying them once."""

import os
import shlex
import sys
from pathlib import Path

import pytest

from mpiray.batch.environment import safe_job_id
from mpiray.cli import run
from mpiray.config import DEFAULT_DRIVER
from mpiray.errors import ConfigError
from mpiray.leaders.dryrun import DryRunLeader
from mpiray.options import OTHER_VARIABLES, build_parser, parse_args
from mpiray.rank import preflight
from mpiray.raynode import raycompat


def test_defaults_run_the_trainer():
    config = parse_args([], environ={})
    assert config.driver == DEFAULT_DRIVER == (sys.executable, "-m", "train")
    assert config.log_dir == Path("logs")
    assert config.startup_timeout == 120
    assert config.port == 0
    assert config.auth and not config.dashboard
    assert config.temp_dir == Path("/tmp")
    assert config.stop_grace == 30


def test_driver_after_double_dash_keeps_its_own_options():
    config = parse_args(["--port", "7000", "--", "python", "x.py", "--port", "1"], environ={})
    assert config.port == 7000
    assert config.driver == ("python", "x.py", "--port", "1")


def test_environment_supplies_defaults_and_flags_win():
    environ = {"MPIRAY_STARTUP_TIMEOUT": "300", "MPIRAY_NUM_CPUS": "4", "MPIRAY_AUTH": "0",
               "MPIRAY_DRIVER": "python my_driver.py --fast", "TMPDIR": "/scratch/t"}
    config = parse_args(["--num-cpus", "2"], environ=environ)
    assert config.startup_timeout == 300
    assert config.num_cpus == 2
    assert config.auth is False
    assert config.driver == ("python", "my_driver.py", "--fast")
    assert config.temp_dir == Path("/scratch/t")


@pytest.mark.parametrize("argv, expected", [
    (["--startup-timeout", "-5"], "must be >= 0"),
    (["--startup-timeout", "0"], "must be > 0"),
    (["--startup-timeout", "nan"], "must be a finite number"),
    (["--startup-timeout", "inf"], "must be a finite number"),
    (["--startup-timeout=-inf"], "must be a finite number"),
    (["--startup-timeout", "1e400"], "must be a finite number"),  # float('1e400') is inf
    (["--startup-timeout", "1e8"], "must be at most 10000000 seconds"),
    (["--startup-timeout", "soon"], "not a number: 'soon'"),
    (["--stop-grace", "nan"], "must be a finite number"),
    (["--stop-grace", "-1"], "must be >= 0"),
    (["--time-limit", "nan"], "must be a finite number"),
    (["--time-limit", "inf"], "must be a finite number"),
    (["--time-limit", "0"], "must be > 0"),
    (["--port", "70000"], "not a TCP port"),
    (["--port", "-1"], "not a TCP port"),
    (["--port", "http"], "not a number"),
    (["--num-cpus", "two"], "not a number"),
    (["--num-cpus", "-1"], "must be >= 0"),
    (["--num-cpus", "1.5"], "not a number: '1.5' (give a whole number"),
    (["--num-cpus", "10000001"], "must be at most 1000000"),
    (["--num-cpus", "9" * 400], "must be at most 1000000"),
    (["--num-gpus", "nan"], "not a number"),
    (["--head-cpus", "-2"], "must be >= 0"),
    (["--object-store-memory", "lots"], "not a size"),
    (["--object-store-memory", "inf"], "not a size"),
    (["--object-store-memory", "nan"], "not a size"),
    (["--object-store-memory", "1e400"], "not a size"),
    (["--object-store-memory", "0"], "size must be positive"),
    (["--object-store-memory=-1G"], "size must be positive"),
    (["--object-store-memory", "10M"], "below the 75M that Ray needs"),
    (["--job-id", "../x"], "not a job id: '../x'"),
    (["--job-id", ".."], "not a job id"),
    (["--job-id", "."], "not a job id"),
    (["--job-id", "a/b"], "not a job id"),
    (["--job-id", ""], "not a job id"),
    (["--job-id", "1234[5]"], "not a job id"),
    (["--job-id", "x" * 101], "up to 100 letters"),
    (["--log-dir", ""], "empty path"),
    (["--temp-dir", " "], "empty path"),
    (["--interface", ""], "empty interface name"),
    (["--ray-node-per", "socket"], "invalid choice"),
    (["--port"], "expected one argument"),
    (["--gcs-restarts", "-1"], "must be >= 0"),
    (["--gcs-restarts", "x"], "not a number: 'x'"),
])
def test_bad_options_exit_2_naming_the_option(argv, expected):
    with pytest.raises(ConfigError) as error:
        parse_args(argv, environ={})
    message = str(error.value)
    assert error.value.exit_code == 2
    assert argv[0].split("=")[0] in message and expected in message
    assert "\n" not in message


@pytest.mark.parametrize("argv, expected", [
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["my_driver.py"], "goes after '--'"),
    (["--"], "nothing after '--'"),
])
def test_misplaced_arguments_exit_2_with_a_message(argv, expected):
    with pytest.raises(ConfigError, match=expected) as error:
        parse_args(argv, environ={})
    assert error.value.exit_code == 2


def test_edge_values_that_are_valid():
    config = parse_args(["--stop-grace", "0", "--num-cpus", "0", "--num-gpus", "0", "--head-cpus", "0",
                         "--port", "65535", "--startup-timeout", "1e7", "--time-limit", "0.5",
                         "--object-store-memory", "75M", "--job-id", "1234_5_.pbs01+a-b"], environ={})
    assert (config.stop_grace, config.num_cpus, config.num_gpus, config.head_cpus) == (0, 0, 0, 0)
    assert (config.port, config.startup_timeout, config.time_limit) == (65535, 1e7, 0.5)
    assert config.object_store_memory == 75 * 2**20
    assert config.job_id == "1234_5_.pbs01+a-b"


@pytest.mark.parametrize("name, value, expected", [
    ("MPIRAY_RAY_NODE_PER", "node", "MPIRAY_RAY_NODE_PER='node': invalid choice (choose from rank, host)"),
    ("MPIRAY_STARTUP_TIMEOUT", "nan", "MPIRAY_STARTUP_TIMEOUT='nan': must be a finite number"),
    ("MPIRAY_STARTUP_TIMEOUT", "1e400", "MPIRAY_STARTUP_TIMEOUT='1e400': must be a finite number"),
    ("MPIRAY_STARTUP_TIMEOUT", "0", "MPIRAY_STARTUP_TIMEOUT='0': must be > 0"),
    ("MPIRAY_STOP_GRACE", "nan", "MPIRAY_STOP_GRACE='nan': must be a finite number"),
    ("MPIRAY_TIME_LIMIT", "inf", "MPIRAY_TIME_LIMIT='inf': must be a finite number"),
    ("MPIRAY_PORT", "70000", "MPIRAY_PORT='70000': not a TCP port"),
    ("MPIRAY_NUM_CPUS", "-1", "MPIRAY_NUM_CPUS='-1': must be >= 0"),
    ("MPIRAY_NUM_GPUS", "one", "MPIRAY_NUM_GPUS='one': not a number"),
    ("MPIRAY_HEAD_CPUS", "1.5", "MPIRAY_HEAD_CPUS='1.5': not a number"),
    ("MPIRAY_OBJECT_STORE_MEMORY", "inf", "MPIRAY_OBJECT_STORE_MEMORY='inf': not a size"),
    ("MPIRAY_JOB_ID", "../x", "MPIRAY_JOB_ID='../x': not a job id"),
    ("MPIRAY_DRIVER", "python -c 'print(1)", "MPIRAY_DRIVER=\"python -c 'print(1)\": No closing quotation"),
    ("MPIRAY_AUTH", "maybe", "MPIRAY_AUTH='maybe' is not a boolean"),
    ("MPIRAY_DASHBOARD", "2", "MPIRAY_DASHBOARD='2' is not a boolean"),
])
def test_bad_environment_value_exits_2_naming_the_variable(name, value, expected):
    with pytest.raises(ConfigError) as error:
        parse_args(["--", "python", "x.py"], environ={name: value})
    assert error.value.exit_code == 2
    assert str(error.value).startswith(expected)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("flag, value", [
    ("--startup-timeout", "nan"), ("--stop-grace", "-3"), ("--time-limit", "0"), ("--port", "65536"),
    ("--num-cpus", "x"), ("--num-gpus", "-1"), ("--head-cpus", "2e9"), ("--object-store-memory", "1K"),
    ("--job-id", "a b"), ("--ray-node-per", "node"),
])
def test_environment_and_flag_are_checked_alike(flag, value):
    name = "MPIRAY_" + flag[2:].replace("-", "_").upper()
    with pytest.raises(ConfigError) as from_flag:
        parse_args([flag, value], environ={})
    with pytest.raises(ConfigError) as from_env:
        parse_args([], environ={name: value})
    reason = str(from_env.value).removeprefix(f"{name}={value!r}: ")
    assert reason != str(from_env.value)  # the variable is named first
    if flag != "--ray-node-per":  # argparse words its own choices message differently
        assert f"argument {flag}: {reason} (see mpiray run --help)" == str(from_flag.value)


def test_every_option_reads_its_variable_with_the_flags_conversion():
    environ = {"MPIRAY_LOG_DIR": "/l", "MPIRAY_JOB_ID": "j-1", "MPIRAY_STARTUP_TIMEOUT": "1.5",
               "MPIRAY_PORT": "7000", "MPIRAY_NUM_CPUS": "3", "MPIRAY_NUM_GPUS": "1", "MPIRAY_HEAD_CPUS": "0",
               "MPIRAY_OBJECT_STORE_MEMORY": "2G", "MPIRAY_STOP_GRACE": "5", "MPIRAY_TIME_LIMIT": "60",
               "MPIRAY_INTERFACE": "ib0", "MPIRAY_TEMP_DIR": "/t", "MPIRAY_RAY_NODE_PER": "host",
               "MPIRAY_AUTH": "yes", "MPIRAY_DASHBOARD": "on", "MPIRAY_METRICS": "off", "MPIRAY_PROGRESS": "on"}
    config = parse_args([], environ=environ)
    assert config.log_dir == Path("/l") and config.temp_dir == Path("/t")
    assert (config.job_id, config.startup_timeout, config.port) == ("j-1", 1.5, 7000)
    assert (config.num_cpus, config.num_gpus, config.head_cpus) == (3, 1, 0)
    assert (config.object_store_memory, config.stop_grace, config.time_limit) == (2 * 2**30, 5.0, 60.0)
    assert (config.interface, config.ray_node_per, config.auth, config.dashboard) == ("ib0", "host", True, True)
    assert (config.metrics, config.progress) == (False, "on")
    assert parse_args([], environ={}).metrics and not parse_args(["--no-metrics"], environ={}).metrics


def test_a_bad_variable_is_an_error_even_when_the_flag_overrides_it():
    with pytest.raises(ConfigError, match="MPIRAY_PORT='http'"):
        parse_args(["--port", "7000"], environ={"MPIRAY_PORT": "http"})


@pytest.mark.parametrize("blank", ["", "  "])
def test_a_blank_variable_counts_as_unset(blank, capsys):
    names = [action.dest.upper() for action in build_parser({})._actions if action.option_strings]
    environ = {f"MPIRAY_{name}": blank for name in names if name not in ("HELP", "REDIS_PASSWORD")}
    environ["MPIRAY_DRIVER"] = blank
    assert "MPIRAY_AUTH" in environ and "MPIRAY_RAY_NODE_PER" in environ
    assert parse_args([], environ=environ) == parse_args([], environ={})  # e.g. MPIRAY_AUTH= keeps auth on
    assert capsys.readouterr().err == ""


def test_misspelled_variable_warns_with_the_closest_name(capsys):
    config = parse_args([], environ={"MPIRAY_STARTUP_TIMEOT": "300", "mpiray_port": "7000", "MPIRAY_ZQXJ": "1"})
    assert config.startup_timeout == 120 and config.port == 0  # ignored, but said so
    assert capsys.readouterr().err.splitlines() == [
        "mpiray: warning: MPIRAY_STARTUP_TIMEOT is not a setting of mpiray (did you mean MPIRAY_STARTUP_TIMEOUT?)",
        "mpiray: warning: MPIRAY_ZQXJ is not a setting of mpiray (see mpiray run --help)",
        "mpiray: warning: mpiray_port is not a setting of mpiray (did you mean MPIRAY_PORT?)",
    ]


def test_names_mpiray_reads_or_sets_are_known(capsys):
    environ = {name: "" for name in OTHER_VARIABLES}
    environ.update(MPIRAY_NUM_NODES="4", MPIRAY_TOTAL_CPUS="8", MPIRAY_HEAD_IP="10.0.0.1", MPIRAY_DIR="/x")
    environ.update(MPIRAYTEST_KEEP_TESTBED="1", MPIRAYTEST_PBS_USER="mpiraytest")  # the harness's: no setting
    parse_args([], environ=environ)
    assert capsys.readouterr().err == ""
    assert {"MPIRAY_DRIVER", "MPIRAY_SITE_MPI"} <= set(OTHER_VARIABLES)
    assert not [name for name in OTHER_VARIABLES if "TEST" in name]  # production lists none of the harness's


@pytest.mark.parametrize("text, expected", [
    ("1234", "1234"), ("1234[5]", "1234_5_"), ("12.pbs01+a-b_c", "12.pbs01+a-b_c"), ("../x", ".._x"),
    ("a b/c", "a_b_c"), (".", "_"), ("..", "__"), ("", "_"), ("x" * 150, "x" * 100), ("é", "_"),
])
def test_safe_job_id_makes_a_scheduler_id_a_valid_job_id(text, expected):
    assert safe_job_id(text) == expected
    assert parse_args(["--job-id", expected], environ={}).job_id == expected


MPICH_RANK_1 = {"MPI_LOCALNRANKS": "4", "PMI_RANK": "1", "PMI_SIZE": "4"}


def _environ(monkeypatch, extra):
    for name in list(os.environ):
        if name.upper().startswith("MPIRAY_") or name.startswith(("PMI_", "OMPI_", "SLURM_", "PALS_", "ALPS_")):
            monkeypatch.delenv(name)
    for name, value in extra.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("extra", [{}, {**MPICH_RANK_1, "PMI_RANK": "0"}], ids=["no-launcher", "rank-0"])
def test_main_prints_one_error_line_on_the_first_task(monkeypatch, capsys, extra):
    _environ(monkeypatch, {**extra, "MPIRAY_RAY_NODE_PER": "node"})
    assert run(["--", "python", "x.py"]) == 2
    assert capsys.readouterr().err == (
        "mpiray: error: MPIRAY_RAY_NODE_PER='node': invalid choice (choose from rank, host)\n"
    )


def test_main_on_other_tasks_exits_2_silently(monkeypatch, capsys):
    _environ(monkeypatch, {**MPICH_RANK_1, "MPIRAY_STARTUP_TIMEOT": "5"})
    assert run(["--startup-timeout", "nan", "--redis-password", "x", "--", "python", "x.py"]) == 2
    assert capsys.readouterr().err == ""


def test_bad_boolean_in_environment_is_named():
    with pytest.raises(ConfigError, match="MPIRAY_AUTH='maybe'"):
        parse_args([], environ={"MPIRAY_AUTH": "maybe"})


@pytest.mark.parametrize("version", ["2.51.2", "2.10.0", "1.13.1"])
def test_a_ray_without_token_auth_is_refused_in_one_line_unless_no_auth(monkeypatch, capsys, version):
    _environ(monkeypatch, {})
    monkeypatch.setattr(raycompat, "ray_version", lambda: version)
    assert run(["--", "python", "x.py"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert f"Ray {version} has no token authentication (Ray 2.52 and later do)" in error and "--no-auth" in error
    preflight.check_ray_install(auth=False)  # --no-auth: then it starts (and warns that anyone may join)


@pytest.mark.parametrize("version, refused", [
    ("2.51.2", True), ("2.52.0", False), ("2.55.1", False), ("2.60.0", False), ("3.0.0.dev0", False),
    ("not installed", False)])
def test_exactly_the_rays_without_token_auth_are_refused(monkeypatch, version, refused):
    """Each version decides: the refused ones raise with the reason, the others return (and start)."""
    monkeypatch.setattr(raycompat, "ray_version", lambda: version)
    if refused:
        with pytest.raises(ConfigError, match=f"Ray {version} has no token authentication"):
            preflight.check_ray_install(auth=True)
    else:
        assert preflight.check_ray_install(auth=True) is None


def test_redis_password_is_accepted_and_explained(capsys):
    config = parse_args(["--redis-password", "5241590000000000"], environ={})
    assert config.driver == DEFAULT_DRIVER
    assert "Ray no longer uses Redis" in capsys.readouterr().err


def test_the_default_driver_without_the_trainers_packages_is_a_clear_error_before_mpi(monkeypatch):
    from mpiray import cli

    real = cli.importlib.util.find_spec
    monkeypatch.setattr(cli.importlib.util, "find_spec", lambda name: None if name == "gymnasium" else real(name))
    with pytest.raises(ConfigError, match=r"needs gymnasium, not installed here: pip install '\.\[train\]' in the mpiray"):
        cli.check_default_driver(parse_args([], environ={}))
    cli.check_default_driver(parse_args(["--", "python", "mine.py"], environ={}))  # a driver of one's own: fine
    assert isinstance(cli.leader_for(parse_args(["--dry-run"], environ={})), DryRunLeader)  # no driver runs: no check


def test_a_joining_job_cannot_autoscale_the_cluster_it_joins():
    with pytest.raises(ConfigError, match="--autoscale and --join do not go together"):
        parse_args(["--join", "4711", "--autoscale", "1:3"], environ={})


def test_a_tmpdir_too_long_for_rays_sockets_gives_way_to_tmp_with_a_note(capsys):
    pbs_tmpdir = "/var/tmp/pbs.1234567.polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov"  # as PBS sets it
    assert parse_args([], environ={"TMPDIR": pbs_tmpdir}).temp_dir == Path("/tmp")
    assert f"TMPDIR={pbs_tmpdir} is too long for Ray's socket paths" in capsys.readouterr().err
    assert parse_args([], environ={"TMPDIR": "/var/tmp/j7"}).temp_dir == Path("/var/tmp/j7")  # short enough
    assert capsys.readouterr().err == ""


def test_a_container_and_an_elastic_cluster_are_refused_together():
    """The autoscaler's node provider would run inside the image, where the batch system's commands are not."""
    with pytest.raises(ConfigError, match="--autoscale and --container do not go together"):
        parse_args(["--container", "podman:ray", "--autoscale", "1:3", "--", "true"], {})


@pytest.mark.parametrize("flags, words", [
    (["--container-flags", "--nv"], ["--nv"]),  # docs/containers.md's form, as a user copies it
    (["--container-flags", "--gpu"], ["--gpu"]),
    (["--container-flags", "--rocm"], ["--rocm"]),
    (["--container-flags", "--module=gpu,nccl-plugin"], ["--module=gpu,nccl-plugin"]),
    (["--container-flags", "--nv --writable-tmpfs"], ["--nv", "--writable-tmpfs"]),
    (["--container-flags=--nv"], ["--nv"]),
])
def test_container_flags_take_a_value_that_starts_with_a_dash_in_every_form_the_pages_give(flags, words):
    config = parse_args(["--container", "apptainer:/images/ray.sif", *flags, "--", "python", "x.py"], environ={})
    assert shlex.split(config.container_flags) == words
    assert list(config.driver) == ["python", "x.py"]


def test_container_flags_at_the_end_without_a_value_is_a_clear_error():
    with pytest.raises(ConfigError, match="argument --container-flags: expected one argument"):
        parse_args(["--container", "apptainer:/images/ray.sif", "--container-flags"], environ={})
