"""Option parsing: flags, MPIRAY_* defaults, the driver after '--', clear errors for bad input."""

import sys
from pathlib import Path

import pytest

from mpiray.cli import parse_args, parse_bytes
from mpiray.config import DEFAULT_DRIVER
from mpiray.errors import ConfigError


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
    (["--port", "70000"], "not a TCP port"),
    (["--num-cpus", "two"], "not a number"),
    (["--object-store-memory", "lots"], "not a size"),
    (["--ray-node-per", "socket"], "invalid choice"),
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["my_driver.py"], "goes after '--'"),
    (["--"], "nothing after '--'"),
])
def test_bad_options_exit_2_with_a_message(argv, expected, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv, environ={})
    assert exit_info.value.code == 2
    assert expected in capsys.readouterr().err


def test_bad_boolean_in_environment_is_named():
    with pytest.raises(ConfigError, match="MPIRAY_AUTH='maybe'"):
        parse_args([], environ={"MPIRAY_AUTH": "maybe"})


def test_redis_password_is_accepted_and_explained(capsys):
    config = parse_args(["--redis-password", "5241590000000000"], environ={})
    assert config.driver == DEFAULT_DRIVER
    assert "Ray no longer uses Redis" in capsys.readouterr().err


@pytest.mark.parametrize("text, expected", [
    ("1000", 1000), ("2G", 2 * 2**30), ("512M", 512 * 2**20), ("1.5g", int(1.5 * 2**30)), ("64KiB", 64 * 1024),
])
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected
