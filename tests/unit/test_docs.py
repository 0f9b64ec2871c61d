"""The documentation says what the code does: the options table is the declaration's, every event and
every failure cause is documented, every link resolves, and the README stays a front door."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import re
import signal
from pathlib import Path

import pytest

from mpiray.config import Config
from mpiray.errors import ConfigError, Interrupted
from mpiray.logs.events import KINDS
from mpiray.logs.report.classify import CAUSES
from mpiray.options import OPTIONS, library_config
from mpiray.rank.timings import HEAD_LOST_EXIT, TIME_LIMIT_EXIT
from train import events as trainer_events

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def test_the_options_page_shows_the_table_the_declaration_makes():
    spec = importlib.util.spec_from_file_location("options_table", DOCS / "options_table.py")
    assert spec is not None and spec.loader is not None
    renderer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(renderer)
    page = (DOCS / "options.md").read_text()
    shown = re.search(r"<!-- options table[^\n]*-->\n(.*?)\n<!-- end of options table -->", page, re.S).group(1)
    assert shown == renderer.options_table(), "rewrite docs/options.md's table: python docs/options_table.py"
    for option in OPTIONS:
        assert f"`{option.flag}`" in shown and f"`{option.variable}`" in shown
        assert (f"`{option.name}=`" in shown) != bool(option.not_a_keyword), option.name


def test_what_the_options_page_calls_no_init_keyword_init_refuses_with_the_reason():
    refused = [option for option in OPTIONS if option.not_a_keyword]
    assert [option.name for option in refused] == ["container", "container_flags", "dry_run"]
    for option in refused:
        with pytest.raises(ConfigError, match=f"mpiray.init\\(\\) does not take {option.name}=.*"
                                              f"{re.escape(option.not_a_keyword)}"):
            library_config({option.name: True}, {})
        example = {"container": "apptainer:/images/ray.sif", "container_flags": "--nv"}.get(option.name, "1")
        with pytest.raises(ConfigError, match=f"{option.variable} is set, which mpiray.init\\(\\) does not take"):
            library_config({}, {option.variable: example})


def test_config_has_exactly_the_declared_options_with_their_defaults():
    fields = {field.name: field.default for field in dataclasses.fields(Config)}
    assert set(fields) == {option.name for option in OPTIONS} | {"driver"}
    for option in OPTIONS:
        assert fields[option.name] == option.default, option.name


def test_every_event_is_documented_with_its_level():
    """mpiray's events and the trainer's own (train/events.py declares them, as any driver may its own)."""
    page = (DOCS / "logs.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| (info|warning|error) \|", page, re.M))
    assert rows == {name: kind.level for name, kind in {**KINDS, **trainer_events.KINDS}.items()}


def test_every_failure_cause_has_its_section_in_troubleshooting():
    page = (DOCS / "troubleshooting.md").read_text()
    assert re.findall(r"^## `(\w+)`$", page, re.M) == list(CAUSES)
    # the causes the trainer declares in its own log, after mpiray's
    declared = [name for name, kind in trainer_events.KINDS.items() if kind.cause]
    assert re.findall(r"^### `(\w+)` \(the trainer's\)$", page, re.M) == declared


# The pages a user reads: every relative link in them must resolve, and every #anchor into a page must
# name one of its headings.
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted(DOCS.glob("*.md")), ROOT / "train" / "README.md",
         ROOT / "jobs" / "README.md"]


def anchors(page: Path) -> set[str]:
    """The #anchors GitHub makes of a page's headings (outside code blocks): lower case, punctuation
    but - and _ dropped, spaces as -, a repeated one suffixed -1, -2, ..."""
    found: set[str] = set()
    fenced = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (heading := re.match(r"#{1,6} (.*)", line)):
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
            unique, n = slug, 0
            while unique in found:
                n += 1
                unique = f"{slug}-{n}"
            found.add(unique)
    return found


def test_every_relative_link_in_the_docs_resolves():
    for page in PAGES:
        for target, anchor in re.findall(r"\]\(([^)#:]*)(?:#([^)]*))?\)", page.read_text()):
            linked = page.parent / target if target else page
            assert linked.exists(), f"{page.relative_to(ROOT)} links to {target}, which does not exist"
            if anchor and linked.suffix == ".md":
                assert anchor in anchors(linked), f"{page.relative_to(ROOT)} links to {target}#{anchor}: no such heading"


def test_the_readme_is_a_front_door():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 160
    for page in DOCS.glob("*.md"):
        assert f"docs/{page.name}" in readme, f"README does not link docs/{page.name}"


def test_every_module_has_its_row_in_contributing():
    page = (ROOT / "CONTRIBUTING.md").read_text()
    for module in (ROOT / "mpiray").rglob("*.py"):
        path = module.relative_to(ROOT).as_posix()
        if module.name not in ("__init__.py", "__main__.py") and f"`{path}`" not in page:
            assert f"`{module.parent.relative_to(ROOT).as_posix()}/`" in page, f"CONTRIBUTING.md's table has no row for {path}"
    assert not re.findall(r"`(test_\w+\.py)`", page), "name a test by its path (tests/unit/..., tests/real/...)"


def test_every_path_under_tests_that_a_page_names_exists():
    """The tests move between folders (the folder is the tier): a page naming one names where it is now."""
    pages = [*PAGES, *(ROOT / "tests").glob("*/README.md"), ROOT / "CONTRIBUTING.md", ROOT / "jobs" / "README.md",
             ROOT / "train" / "README.md", ROOT / "tests" / "run.sh", ROOT / "tests" / "envs.sh"]
    for page in pages:
        for path in re.findall(r"(?<![\w./-])(tests/[\w/.-]*\w/?)", page.read_text()):
            if "*" not in path and "<" not in path:
                assert (ROOT / path).exists(), f"{page.relative_to(ROOT)} names {path}, which does not exist"


def test_every_test_the_promise_table_names_exists():
    """CONTRIBUTING.md's promises -> tests: a test cut or renamed without its row would drop a promise silently."""
    page = (ROOT / "CONTRIBUTING.md").read_text()
    named = re.findall(r"(tests/[\w/]+\.py)::(\w+)", page)
    assert len(named) > 100, "the promise table is gone"
    for path, name in named:
        assert re.search(rf"^def {name}\(", (ROOT / path).read_text(), re.MULTILINE), \
            f"CONTRIBUTING.md's promise table names {path}::{name}, which does not exist"


def exit_code_constants() -> set[int]:
    """Every exit code the launcher's code sets: LaunchError classes' exit_code, the *_EXIT constants, and
    exit_code=N given to a failure."""
    found = set()
    for path in (ROOT / "mpiray").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and \
                    isinstance(node.value.value, int) and not isinstance(node.value.value, bool):
                names = [ast.unparse(t) for t in node.targets]
                if names == ["exit_code"] or any(name.endswith("_EXIT") for name in names):
                    found.add(node.value.value)
            elif isinstance(node, ast.keyword) and node.arg == "exit_code" and isinstance(node.value, ast.Constant):
                found.add(node.value.value)
    return found


def test_the_exit_code_table_has_every_code_the_launcher_sets():
    page = (DOCS / "options.md").read_text()
    table = re.search(r"<!-- exit codes[^\n]*-->\n(.*?)\n<!-- end of exit codes -->", page, re.S).group(1)
    rows = {line.split("|")[1].strip(): line for line in table.splitlines()[2:]}
    numbers = {int(code) for code in rows if code.isdigit()}
    assert exit_code_constants() | {0} == numbers
    assert TIME_LIMIT_EXIT == 124 and HEAD_LOST_EXIT == 1 and ConfigError.exit_code == 2
    assert "128+N" in rows and f"{Interrupted(signal.SIGTERM).exit_code} for SIGTERM" in rows["128+N"]
    assert f"{Interrupted(signal.SIGINT).exit_code} for Ctrl-C" in rows["128+N"]
    assert "the driver's" in rows


def test_each_cause_has_one_failure_class_and_one_exit_code_which_the_exit_code_table_gives():
    from mpiray import errors

    classes = errors.failure_classes()
    causes = [cls.cause for cls in classes]
    assert len(causes) == len(set(causes))  # one class a cause
    assert set(causes) <= set(CAUSES)  # each one `mpiray logs` explains
    page = (DOCS / "options.md").read_text()
    table = re.search(r"<!-- exit codes[^\n]*-->\n(.*?)\n<!-- end of exit codes -->", page, re.S).group(1)
    rows = {line.split("|")[1].strip(): line for line in table.splitlines()[2:]}
    for cls in classes:
        if cls.exit_code == 2:  # bad input: the row names every such cause
            assert f"`{cls.cause}`" in rows["2"], f"docs/options.md's exit code 2 row does not name {cls.cause}"
        else:
            assert f"`{cls.cause}`" not in rows["2"], f"{cls.cause} exits {cls.exit_code}, not 2"


def test_the_troubleshooting_symptoms_come_first_and_link_causes_the_classifier_knows():
    page = DOCS / "troubleshooting.md"
    text = page.read_text()
    assert re.findall(r"^## (.*)$", text, re.M)[0] == "By symptom: what you see"
    section = text.split("\n## By symptom: what you see\n", 1)[1].split("\n## ", 1)[0]
    linked = re.findall(r"\[`(\w+)`\]\(#([^)]*)\)", section)
    for cause, anchor in linked:
        assert cause in CAUSES, f"docs/troubleshooting.md's symptoms name `{cause}`, which mpiray logs does not know"
        assert anchor == cause, f"the symptoms' link to `{cause}` goes to #{anchor}"
    for cause in ("port_in_use", "ports_per_host", "walltime", "signal", "mpi_init", "version_skew",
                  "startup_timeout", "driver_failed"):
        assert (cause, cause) in linked, f"the symptoms no longer link `{cause}`"
    headings = anchors(page)
    for anchor in re.findall(r"\]\(#([^)]*)\)", section):
        assert anchor in headings, f"docs/troubleshooting.md's symptoms link #{anchor}: no such heading"


def test_no_page_shows_a_path_of_the_machine_that_recorded_it():
    """Examples come from real runs; a user's machine has no /work/main, /root or pytest's temporary dirs."""
    recorded = re.compile(r"/work/main\b|/root/|/tmp/pytest-of-")
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        found = recorded.search(page.read_text())
        assert found is None, f"{page.name} shows {found.group(0)!r}: write a path a user has (~/mpiray/, logs/)"


def test_each_cause_a_pre_flight_refuses_with_is_a_bad_input_exit_2():
    """rank/preflight.py raises errors.by_cause(finding.check): a refusing check's cause must name a ConfigError
    (exit 2, as options.md says of bad input), or the job would end with 1 as if something had failed."""
    from mpiray import errors

    source = (ROOT / "mpiray" / "host" / "findings.py").read_text()
    refused = {node.args[1].value for node in ast.walk(ast.parse(source))
               if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Finding" and len(node.args) > 1
               and getattr(node.args[0], "id", "") == "REFUSE" and isinstance(node.args[1], ast.Constant)}
    assert {"dir_full", "dir_network"} <= refused  # what the pre-flight refuses, read from its code
    assert [cause for cause in sorted(refused) if not issubclass(errors.by_cause(cause), errors.ConfigError)] == []
