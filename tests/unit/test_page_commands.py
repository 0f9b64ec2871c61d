"""Every launcher command line the pages print, as a user copies it: each `start_ray.py ...` / `mpiray run ...` in
the docs, the READMEs, the job scripts' usage lines and the recipes' docstrings goes through mpiray's own parser.
Only what a page marks as a placeholder is filled in (PLACEHOLDERS: `KIND:IMAGE`, `JOB`, ...; a shell variable
`$X` stands for its value). A command that does not parse fails here, with the page and line that print it."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from mpiray.errors import ConfigError
from mpiray.options import parse_args

from helpers import ROOT

PAGES = sorted([ROOT / "README.md", ROOT / "jobs" / "README.md", ROOT / "train" / "README.md", *ROOT.glob("docs/*.md"),
                *ROOT.glob("jobs/*.sh"), *ROOT.glob("jobs/*.py"), *ROOT.glob("jobs/recipes/*.py")])
LAUNCHER = re.compile(r"(?:\bstart_ray\.py|\bmpiray run)(?=\s|$)(?P<rest>.*)")
PLACEHOLDERS = {"KIND:IMAGE": "apptainer:/images/ray.sif", "JOB": "4711", "JOB_ID": "4711", "DIR": "/scratch/x",
                "N": "2", "PORT": "6379"}
# Where a command ends: a shell comment, another command, a redirection.
END = re.compile(r"\s#\s|\s#$|\|\||&&|[|;>]|\)\s*$")


def logical_lines(text: str):
    """(number, line), a backslash-continued line joined to the next, numbered by its first line."""
    held, first = "", 0
    for number, line in enumerate(text.splitlines(), 1):
        first = first or number
        if line.rstrip().endswith("\\"):
            held += line.rstrip()[:-1] + " "
            continue
        yield first, held + line
        held, first = "", 0


def commands_on(page: Path):
    """(line number, the words after the launcher's name) of each launcher command page prints: in a Markdown page
    its code (blocks and spans), in a job script its usage comments, in a Python file its docstring's command
    lines."""
    text, in_block = page.read_text(), False
    for number, line in logical_lines(text):
        if page.suffix == ".md":
            if line.lstrip().startswith("```"):
                in_block = not in_block
                continue
            pieces = [line] if in_block else re.findall(r"`([^`]+)`", line)
        elif page.suffix == ".sh":
            pieces = [line[1:]] if line.startswith("#   ") else []
        else:
            pieces = [line] if line.startswith("    ") and re.match(r"\s+(mpirun|srun|sbatch|mpiexec|aprun|MPIRAY_)",
                                                                     line) else []
        for piece in pieces:
            piece = re.sub(r"\[[^]]*\]", "", re.split(r"\s#(?:\s|$)", piece)[0])  # no comment, no [optional] part
            found = LAUNCHER.search(piece)
            if found:
                yield number, END.split(found["rest"])[0]


def words_of(rest: str) -> list[str]:
    words = shlex.split(re.sub(r"\$\{?\w+\}?", "x", rest))
    return [PLACEHOLDERS.get(word, word) for word in words if word != "..."]


CASES = [pytest.param(page, number, rest, id=f"{page.relative_to(ROOT)}:{number}")
         for page in PAGES for number, rest in commands_on(page)]


def test_the_pages_print_launcher_commands():
    assert len(CASES) >= 30, [case.id for case in CASES]


@pytest.mark.parametrize("page, number, rest", CASES)
def test_each_launcher_command_a_page_prints_parses(page, number, rest):
    words = words_of(rest)
    options = words[:words.index("--")] if "--" in words else words
    if options in (["--help"], ["-h"]):
        return
    try:
        parse_args([*options, "--", "python", "driver.py"], environ={})
    except ConfigError as error:
        pytest.fail(f"{page.relative_to(ROOT)}:{number} prints a command mpiray refuses: {rest.strip()}\n  {error}")
