"""The figures the pages quote come from the kept benchmark reports (docs/reports/*_report.md), and every report
a page quotes says what made it: the commit, machine and command (harness.run_facts), one `bash tests/benchmarks/run
all` regenerating them all. A figure is a number with a decimal point or a unit (s, ms, x, ×, %, MiB,
GiB) in a paragraph, list item or table row that links a report: its number must appear, as printed, in one of
the reports it links (its unit may stand in the report's table header)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "docs" / "reports"
PAGES = [ROOT / "docs" / "performance.md", ROOT / "docs" / "sizing.md", ROOT / "docs" / "elastic.md",
         ROOT / "docs" / "storage.md"]
REPORT_LINK = re.compile(r"reports/(\w+_report)\.md")
FIGURE = re.compile(r"(?<![\w.-])(\d+(?:\.\d+)?(?:\s?(?:ms|s|x|×|%|MiB|GiB)\b|x(?!\w))|\d+\.\d+(?![.\d]))")
# A version, not a figure: "Ray 2.60", "torch 2.13", "before 2.57", "OpenPBS 23.06".
VERSION_BEFORE = re.compile(r"(Ray|torch|Python|OpenPBS|Slurm|before|since|from)\s$")
NUMBER = re.compile(r"\d+(?:\.\d+)?")
FACTS = re.compile(r"^Measured (\S+ \S+ \S+) on commit ([0-9a-f]{7,40})", re.M)


def paragraphs(page: Path) -> list[str]:
    """The page's paragraphs, list items and table rows that link a report."""
    blocks = re.split(r"\n\s*\n|\n(?=- |\| )", page.read_text())
    return [block for block in blocks if REPORT_LINK.search(block)]


def quoted() -> list[tuple[str, str, list[str]]]:
    """(page, figure, the reports its paragraph links) for every figure the pages quote from a report."""
    found = []
    for page in PAGES:
        for block in paragraphs(page):
            reports = sorted(set(REPORT_LINK.findall(block)))
            text = REPORT_LINK.sub("", re.sub(r"\((?:\.\./|reports/)[^)]*\)", "", block))  # links' own digits are no figure
            for figure in FIGURE.finditer(text):
                if not VERSION_BEFORE.search(text[max(0, figure.start() - 10):figure.start()]):
                    found.append((page.name, figure.group(), reports))
    return found


def test_the_pages_quote_figures_of_the_reports():
    assert quoted(), "no figure found: the pattern or the pages changed"


@pytest.mark.parametrize("page, figure, reports", quoted(), ids=lambda v: str(v)[:40])
def test_each_figure_a_page_quotes_is_in_a_report_it_links(page, figure, reports):
    texts = [(BENCHMARKS / f"{name}.md").read_text() for name in reports if (BENCHMARKS / f"{name}.md").exists()]
    number = NUMBER.search(figure).group()  # as the report prints it (its unit may stand in its table's header)
    found = re.compile(rf"(?<![\d.]){re.escape(number)}(?![\d]|\.\d)")
    assert any(found.search(text) for text in texts), (
        f"{page} quotes {figure!r} in a paragraph that links {', '.join(reports)}, whose reports do not hold it: "
        f"quote the report as it prints (bash tests/benchmarks/run all rewrites them)")


def quoted_reports() -> list[str]:
    return sorted({name for page in PAGES for block in paragraphs(page) for name in REPORT_LINK.findall(block)})


@pytest.mark.parametrize("name", quoted_reports())
def test_each_quoted_report_states_the_commit_machine_and_command_that_made_it(name):
    text = (BENCHMARKS / f"{name}.md").read_text()
    facts = FACTS.search(text)
    assert facts, f"{name}.md states no commit: rerun it (bash tests/benchmarks/run all)"
    data = BENCHMARKS / f"{name}.json"
    if data.exists():
        run = json.loads(data.read_text())["run"]
        assert run["commit"].startswith(facts.group(2)) and run["cores"] and run["command"].startswith("bash ")
