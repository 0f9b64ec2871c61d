"""mpiray.init()'s keywords: the command line's options, checked the same way and refused with the same words."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from mpiray.errors import ConfigError
from mpiray.options import library_config, parse_args

from helpers import (
    ROOT,
)


def test_options_are_the_command_lines_checked_the_same_way():
    config = library_config({"startup_timeout": 60, "auth": False, "log_dir": "/tmp/x", "num_cpus": None}, {})
    assert (config.startup_timeout, config.auth, str(config.log_dir), config.num_cpus) == (60.0, False, "/tmp/x", None)
    assert config.driver == ()
    assert library_config({"time_limit": 5}, {}).time_limit == 5.0
    assert library_config({}, {"MPIRAY_STARTUP_TIMEOUT": "30"}).startup_timeout == 30.0
    with pytest.raises(ConfigError, match="no option 'startup_timeot' .did you mean startup_timeout"):
        library_config({"startup_timeot": 6}, {})
    with pytest.raises(ConfigError, match="--startup-timeout: must be a finite number"):
        library_config({"startup_timeout": float("nan")}, {})
    with pytest.raises(ConfigError, match="invalid choice"):
        library_config({"ray_node_per": "node"}, {})
    with pytest.raises(ConfigError, match="--time-limit: must be > 0"):
        library_config({"time_limit": 0}, {})


@pytest.mark.parametrize("keywords, argv", [
    ({"resources": {"accel": 2}}, ["--resources", '{"accel": 2}']),
    ({"resources": {"b": 1, "a": 0.5}}, ["--resources", '{"a": 0.5, "b": 1}']),
    ({"log_dir": Path("/l"), "temp_dir": Path("/t")}, ["--log-dir", "/l", "--temp-dir", "/t"]),
    ({"startup_timeout": 300, "stop_grace": 0, "time_limit": 0.5}, ["--startup-timeout", "300", "--stop-grace", "0",
                                                                    "--time-limit", "0.5"]),
    ({"num_cpus": 4, "object_store_memory": 2 * 2**30, "port": 7000}, ["--num-cpus", "4", "--object-store-memory", "2G",
                                                                        "--port", "7000"]),
    ({"job_id": 4711, "join": 4712}, ["--job-id", "4711", "--join", "4712"]),
    ({"auth": False, "metrics": False, "ray_node_per": "host"}, ["--no-auth", "--no-metrics", "--ray-node-per", "host"]),
])
def test_keywords_as_typed_values_give_the_command_lines_config(keywords, argv):
    command_line = parse_args([*argv, "--", "python", "x.py"], environ={})
    assert library_config(keywords, {}) == replace(command_line, driver=())


@pytest.mark.parametrize("keywords, message", [
    ({"resources": {"accel": -1}}, "argument --resources: {'accel': -1}: give an object of names and amounts >= 0"),
    ({"num_cpus": 2.5}, "argument --num-cpus: not a number: 2.5 (give a whole number, e.g. 4)"),
    ({"auth": "maybe"}, "argument --auth: 'maybe' is not a boolean"),
    ({"log_dir": 3}, "argument --log-dir: not a path: 3 (give a directory, e.g. 'logs')"),
    ({"ray_node_per": "node"}, "argument --ray-node-per: invalid choice (choose from rank, host)"),
])
def test_a_bad_typed_keyword_names_its_option_and_what_to_give(keywords, message):
    with pytest.raises(ConfigError) as error:
        library_config(keywords, {})
    assert str(error.value).startswith(message) and error.value.exit_code == 2


def test_init_refuses_a_ray_without_token_auth_before_mpi_starts(monkeypatch):
    import mpiray
    from mpiray.rank import life
    from mpiray.raynode import raycompat

    for name in [name for name in os.environ if name.upper().startswith("MPIRAY_")]:
        monkeypatch.delenv(name)
    monkeypatch.setattr(raycompat, "ray_version", lambda: "2.51.2")
    monkeypatch.setattr(life, "early_log", lambda config: pytest.fail("init() went on to start the rank"))
    with pytest.raises(ConfigError, match=r"Ray 2\.51\.2 has no token authentication .*--no-auth"):
        mpiray.init()


def test_the_library_never_imports_the_command_line():
    code = ("import sys, mpiray, mpiray.library, mpiray.rank; "
            "print(sorted(m for m in sys.modules if m in ('mpiray.cli', 'mpiray.driver')))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "[]", result.stderr
