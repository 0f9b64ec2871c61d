"""The kinds of option values (mpiray/values.py), as one table: what each kind takes (the text of a flag or
variable, or an init() keyword's value as it is) and what it makes of it, and what it refuses with the words
the user reads (after the flag, variable or keyword's name)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mpiray import values
from mpiray.errors import BadValue
from mpiray.options import OPTIONS

TAKEN = [
    (values.seconds, "300", 300.0), (values.seconds, "0", 0.0), (values.seconds, "1e7", 1e7),
    (values.positive_seconds, "0.5", 0.5),
    (values.fraction, "0", 0.0), (values.fraction, "0.25", 0.25),
    (values.count, "0", 0), (values.count, "1000000", 10**6),
    (values.positive_count, "1", 1),
    (values.port, "0", 0), (values.port, "65535", 65535),
    (values.parse_bytes, "1000", 1000), (values.parse_bytes, "2G", 2 * 2**30), (values.parse_bytes, "512M", 512 * 2**20),
    (values.parse_bytes, "1.5g", int(1.5 * 2**30)), (values.parse_bytes, "64KiB", 64 * 1024),
    (values.object_store_size, "75M", 75 * 2**20),
    (values.path, "logs", Path("logs")),
    (values.resources, '{"b": 1, "a": 2.5}', '{"a": 2.5, "b": 1}'),  # sorted: the same resources, the same text
    (values.bounds, "1:8", "1:8"),
    (values.labels, "zone=b, team=rl", "team=rl,zone=b"),  # sorted: the same labels, the same text
    (values.role, "rollout", "rollout"),
    (values.market_type, "spot", "spot"),
    (values.interface, "ib0", "ib0"),
    (values.address_rule, "{host}.hsn.cm.polaris.alcf.anl.gov", "{host}.hsn.cm.polaris.alcf.anl.gov"),
    (values.address_rule, " {host}i", "{host}i"),
    (values.container, "apptainer:/images/ray.sif", "apptainer:/images/ray.sif"),
    (values.container, "podman:localhost/ray:2.60", "podman:localhost/ray:2.60"),
    (values.shell_words, "--nv --bind /scratch", "--nv --bind /scratch"),
    (values.job_id, "1234_5_.pbs01+a-b", "1234_5_.pbs01+a-b"),
    (values.boolean, "yes", True), (values.boolean, " Off ", False), (values.boolean, "1", True),
    (values.command, "python my.py --x 'a b'", ["python", "my.py", "--x", "a b"]),
    # init() keywords, as the caller wrote them
    (values.seconds, 300, 300.0), (values.positive_seconds, 0.5, 0.5), (values.count, 4, 4), (values.port, 7000, 7000),
    (values.parse_bytes, 2**31, 2**31), (values.object_store_size, 2e9, 2 * 10**9),
    (values.path, Path("/l"), Path("/l")),
    (values.resources, {"b": 1, "a": 2.5}, '{"a": 2.5, "b": 1}'),  # the same text as the flag's
    (values.job_id, 4711, "4711"),
    (values.boolean, False, False),
]

REFUSED = [
    (values.seconds, "soon", "not a number: 'soon' (give a number, e.g. 300)"),
    (values.seconds, "-1", "must be >= 0 seconds, got -1"),
    (values.seconds, "nan", "must be a finite number, got 'nan'"),
    (values.seconds, "1e400", "must be a finite number, got '1e400'"),
    (values.seconds, "1e8", "must be at most 10000000 seconds (~115 days), got 1e8"),
    (values.positive_seconds, "0", "must be > 0 seconds, got 0"),
    (values.fraction, "1", "must be a fraction from 0 up to (not including) 1, e.g. 0.25, got 1"),
    (values.fraction, "-0.1", "must be a fraction from 0 up to (not including) 1, e.g. 0.25, got -0.1"),
    (values.count, "1.5", "not a number: '1.5' (give a whole number, e.g. 4)"),
    (values.count, "-1", "must be >= 0, got -1"),
    (values.count, "1000001", "must be at most 1000000, got 1000001"),
    (values.positive_count, "0", "must be at least 1, got 0"),
    (values.port, "70000", "not a TCP port: 70000 (use 1-65535, or 0 for a free one)"),
    (values.port, "http", "not a number: 'http' (give a whole number, e.g. 4)"),
    (values.parse_bytes, "lots", "not a size: 'lots' (use e.g. 2G, 512M or bytes)"),
    (values.parse_bytes, "inf", "not a size: 'inf' (a size must be finite, e.g. 2G)"),
    (values.parse_bytes, "0", "size must be positive, got '0'"),
    (values.object_store_size, "10M", "'10M' is below the 75M that Ray needs at least"),
    (values.path, " ", "empty path: give a directory"),
    (values.resources, "accel=2", "not JSON: 'accel=2' (give an object, e.g. '{\"accel\": 2}')"),
    (values.resources, '{"accel": -1}', "'{\"accel\": -1}': give an object of names and amounts >= 0, e.g. '{\"accel\": 2}'"),
    (values.resources, '{"accel": true}', "'{\"accel\": true}': give an object of names and amounts >= 0, e.g. '{\"accel\": 2}'"),
    (values.resources, "[2]", "'[2]': give an object of names and amounts >= 0, e.g. '{\"accel\": 2}'"),
    (values.labels, "team", "'team' is not KEY=VALUE (e.g. team=rl,pool=rollout)"),
    (values.market_type, "a b", "--market-type 'a b': at most 63 letters, digits, '-', '_' and '.', a letter or digit "
                                "at both ends"),
    (values.role, "roll out", "role 'roll out': at most 63 letters, digits, '-', '_' and '.', a letter or digit at both ends"),
    (values.bounds, "8", "not MIN:MAX: '8' (e.g. 1:8: at least 1 node, at most 8)"),
    (values.bounds, "3:1", "'3:1': MIN must be at least 1 and at most MAX"),
    (values.interface, "", "empty interface name: give one, e.g. ib0, or leave it out"),
    (values.container, "docker:ray", "'docker' is no container runtime mpiray knows: give one of apptainer, singularity, "
                                     "charliecloud, shifter, podman, podman-hpc, enroot"),
    (values.container, "/images/ray.sif", "not KIND:IMAGE: '/images/ray.sif' (e.g. apptainer:/path/ray.sif or "
                                          "podman:localhost/ray:2.60)"),
    (values.shell_words, "--bind '/x", "No closing quotation (it is split like a shell command line: close the quote "
                                       "or escape it)"),
    (values.address_rule, "{node}-hsn", "'{node}-hsn' names {node}: write the host's short name as {host} or its whole "
                                         "name as {hostname}, e.g. {host}.hsn.cm.polaris.alcf.anl.gov or {host}i"),
    (values.address_rule, "{host", "'{host': expected '}' before end of string (write the hostname as {host}, e.g. "
                                   "{host}.hsn.cm.polaris.alcf.anl.gov)"),
    (values.job_id, "../x", "not a job id: '../x' (use up to 100 letters, digits and . _ + -, not '.' or '..'; "
                            "it names a directory under --log-dir)"),
    (values.boolean, "maybe", "'maybe' is not a boolean: use 1/0, true/false, yes/no"),
    (values.command, "python -c 'x", "No closing quotation (it is split like a shell command line: close the quote "
                                     "or escape it)"),
    # init() keywords, as the caller wrote them
    (values.count, 4.0, "not a number: 4.0 (give a whole number, e.g. 4)"),
    (values.count, True, "not a number: True (give a whole number, e.g. 4)"),
    (values.count, -1, "must be >= 0, got -1"),
    (values.seconds, float("nan"), "must be a finite number, got nan"),
    (values.seconds, 10**400, f"must be a finite number, got {10**400!r}"),
    (values.seconds, [5], "not a number: [5] (give a number, e.g. 300)"),
    (values.parse_bytes, True, "not a size: True (use e.g. 2G, 512M or bytes)"),
    (values.path, 3, "not a path: 3 (give a directory, e.g. 'logs')"),
    (values.resources, {"accel": -1}, "{'accel': -1}: give an object of names and amounts >= 0, e.g. '{\"accel\": 2}'"),
    (values.resources, [("accel", 2)], "[('accel', 2)]: give an object of names and amounts >= 0, e.g. '{\"accel\": 2}'"),
    (values.bounds, (1, 8), "not text: (1, 8) (give e.g. '1:8')"),
    (values.interface, 0, "not text: 0 (give e.g. 'ib0')"),
    (values.job_id, 47.11, "not text: 47.11 (give e.g. '4711')"),
    (values.boolean, 1, "1 is not a boolean: use True or False"),
]


def _id(case) -> str:
    return f"{case[0].__name__}-{case[1]!r}"[:60]


@pytest.mark.parametrize("kind, given, expected", TAKEN, ids=map(_id, TAKEN))
def test_each_kind_takes_its_values(kind, given, expected):
    assert kind(given) == expected


@pytest.mark.parametrize("kind, given, message", REFUSED, ids=map(_id, REFUSED))
def test_each_kind_refuses_with_what_was_wrong_and_what_to_give(kind, given, message):
    with pytest.raises(BadValue) as error:
        kind(given)
    assert str(error.value) == message


def test_the_table_covers_every_kind_an_option_has():
    kinds = {option.parse for option in OPTIONS if option.parse} | {values.boolean, values.command}
    assert kinds <= {case[0] for case in TAKEN} and kinds <= {case[0] for case in REFUSED}
