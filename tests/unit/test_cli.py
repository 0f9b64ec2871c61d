"""The `mpiray` command (mpiray/cli.py): a bare `mpiray` says what it can do, once per job; a wrong command
is one line that names the right ones; `mpiray run --help` and the docs show every command and option."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mpiray import cli
from mpiray.options import OPTIONS, build_parser

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER_VARIABLES = ("PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS", "OMPI_COMM_WORLD_SIZE", "SLURM_STEP_ID", "PALS_RANKID")


@pytest.fixture(autouse=True)
def no_launcher(monkeypatch):
    for name in LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("argv", [[], ["--help"], ["-h"], ["help"]])
def test_a_bare_mpiray_lists_every_command_with_an_example(capsys, argv):
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    for name, (what, example, _) in cli.COMMANDS.items():
        assert f"  {name}  " in out or f"  {name} " in out, name
        assert what in out and example in out


def test_under_a_launcher_only_the_first_task_prints_it(monkeypatch, capsys):
    monkeypatch.setenv("MPI_LOCALNRANKS", "4")
    monkeypatch.setenv("PMI_SIZE", "4")
    monkeypatch.setenv("PMI_RANK", "2")
    assert cli.main([]) == 0
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("argv, hint", [
    (["frob"], "the commands are run, logs, list, attach, submit, jobs, dashboard"),
    (["--num-cpus", "4", "--", "python", "x.py"], "options belong to a command: mpiray run --num-cpus 4 -- python x.py"),
])
def test_a_wrong_command_is_one_line_that_names_the_right_ones(capsys, argv, hint):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and hint in err and "mpiray --help" in err


def test_run_help_names_its_command_and_every_option_with_its_variable():
    text = build_parser({}, "mpiray run").format_help()
    assert text.startswith("usage: mpirun -np N mpiray run [options] [-- DRIVER COMMAND ...]")
    assert build_parser({}, "start_ray.py").format_help().startswith("usage: mpirun -np N python start_ray.py")
    flat = " ".join(text.split())
    for option in OPTIONS:
        assert option.flag in flat and f"[env {option.variable}]" in flat, option.name
    assert flat.count("(default:") == len(OPTIONS)  # each shows its default once


def test_the_docs_show_every_command():
    docs = (ROOT / "README.md").read_text() + "".join(p.read_text() for p in (ROOT / "docs").glob("*.md"))
    for name in cli.COMMANDS:
        assert re.search(rf"`mpiray {name}\b", docs), f"no page shows `mpiray {name}`"
