"""`mpiray logs` finds a job's logs (mpiray/logs/report/jobdir.py) and answers bad input in one line; the
docs' example is what it prints."""

from __future__ import annotations

import json
import re

from mpiray import cli
from mpiray.logs import report as joblogs

from helpers import (
    ROOT,
)
from sample_jobs import OK_RANK0, OK_RANK1, write_job


def test_the_job_is_found_as_a_path_as_log_dir_slash_id_or_as_a_bare_id(tmp_path, monkeypatch, capsys):
    job_dir = write_job(tmp_path / "logs", "j1", OK_RANK0, OK_RANK1)
    monkeypatch.chdir(tmp_path)
    for target in (str(job_dir), "logs/j1", "j1"):
        assert cli.main(["logs", target]) == 0
        assert capsys.readouterr().out.startswith("mpiray job j1: 2 ranks on 2 hosts (node2, vm), exit code 0")
    assert cli.main(["logs"]) == 0  # the newest job under ./logs
    assert "mpiray job j1" in capsys.readouterr().out
    assert cli.main(["logs", "--log-dir", str(tmp_path / "logs"), "j1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cluster"][1]["ip"] == "192.0.2.3"


def test_bad_input_exits_2_with_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["logs", "no-such-job"]) == 2
    err = capsys.readouterr().err
    assert err == "mpiray logs: no such job: 'no-such-job' (neither a directory nor logs/no-such-job)\n"
    assert cli.main(["logs", str(tmp_path)]) == 2
    assert "has no rank events" in capsys.readouterr().err
    assert cli.main(["logs"]) == 2
    assert "no job logs under logs/" in capsys.readouterr().err


def test_the_docs_example_is_what_the_tool_prints_for_the_committed_logs(monkeypatch, capsys):
    """docs/logs.md's `mpiray logs` output of a real 3-host run is the tool's output for logs/example-3-hosts."""
    page = (ROOT / "docs" / "logs.md").read_text()
    shown = re.search(r"<!-- mpiray logs logs/example-3-hosts -->\n```\n(.*?)```", page, re.S).group(1)
    monkeypatch.chdir(ROOT)
    assert joblogs.main(["logs/example-3-hosts"]) == 0
    assert capsys.readouterr().out == shown
    assert "3 ranks on 3 hosts" in shown and "exit code 0" in shown
