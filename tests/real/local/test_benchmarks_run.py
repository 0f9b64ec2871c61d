"""The benchmarks cannot rot unseen: those that need no testbed run here in their quick form (the smallest sizes, one
repeat, as `bash tests/benchmarks/run all --quick` runs them) and must write a well-formed report: its heading,
the line with the commit, machine and command, a table, and the JSON with the run's facts and its measures. The
numbers are not checked: a smoke run on a busy machine measures nothing (the kept reports are made one at a time).
The testbed's benchmarks (launcher, scale, elastic, container, learners, peers) are left out: they would take the
test bed from the testbed half for minutes, and bench_peers runs Ray's symmetric-run, which ends with `ray stop`."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from helpers import ROOT

RUN = ROOT / "tests" / "benchmarks" / "run"
LOCAL = ("bench_preflight", "bench_before_after", "bench_big_node", "bench_client_connect", "sizing_memory")


def quick_args(bench: str) -> list[str]:
    """The quick form `run all --quick` gives bench, read from the script's own table."""
    (entry,) = re.findall(rf'^\s*"{bench}\|[^"]*"', RUN.read_text(), flags=re.MULTILINE)
    return entry.strip().strip('"').split("|")[2].split()


@pytest.mark.parametrize("bench", LOCAL)
def test_a_benchmark_runs_in_its_quick_form_and_writes_a_well_formed_report(tmp_path, bench):
    result = subprocess.run(["bash", str(RUN), bench, *quick_args(bench), "--out", str(tmp_path)], cwd=ROOT,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (report,) = tmp_path.glob("*_report.md")
    text = report.read_text()
    assert text.startswith("# "), text[:300]
    assert re.search(r"^Measured .+ on commit [0-9a-f]{12}.*Command: `bash tests/benchmarks/run " + bench, text,
                     flags=re.MULTILINE), text[:600]
    assert re.search(r"^\|.+\|$", text, flags=re.MULTILINE), "no table in the report"
    data = report.with_suffix(".json")
    if data.exists():  # sizing_memory keeps its table in the markdown only
        content = json.loads(data.read_text())
        assert set(content) == {"run", "measures"} and content["run"]["commit"], content.get("run")
