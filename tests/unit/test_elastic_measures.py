"""The wait-and-measure loop of the elastic benchmarks (tests/benchmarks/elastic_measures.py), which otherwise runs
only on the Slurm and PBS testbeds: the order of the measures, the empty queue before each next one, the table."""

from __future__ import annotations

import pytest
from benchmarks.elastic_measures import interleave, row, series, table, wait_for_an_empty_queue


def test_interleave_runs_each_measure_per_repeat_in_turn_each_after_an_empty_queue(capsys):
    done: list[str] = []
    queue: list[str] = []

    def measure(name: str, seconds: float):
        def run() -> dict:
            assert not queue, f"{name} started while jobs were queued"
            done.append(name)
            if name == "reference":
                queue.append("job-1")  # its job lingers a little after it returns: the next waits for it
            return {name: seconds}
        return run

    def queued() -> list[str]:
        return [queue.pop()] if queue else []

    runs = interleave({"reference": measure("reference", 2.0), "autoscaled": measure("autoscaled", 2.5)}, 2, queued)
    assert done == ["reference", "autoscaled"] * 2
    assert runs == {"reference": [{"reference": 2.0}] * 2, "autoscaled": [{"autoscaled": 2.5}] * 2}
    assert series(runs) == {"reference": [2.0, 2.0], "autoscaled": [2.5, 2.5]}
    assert capsys.readouterr().out.splitlines()[-1] == "repeat 2: reference reference 2.00; autoscaled autoscaled 2.50"


def test_series_takes_every_value_of_a_measure_that_gives_several():
    runs = {"elastic": [{"elastic": 3.0, "group_ready": 4.0}, {"elastic": 5.0, "group_ready": 6.0}]}
    assert series(runs) == {"elastic": [3.0, 5.0], "group_ready": [4.0, 6.0]}


def test_a_queue_that_never_empties_is_an_error():
    with pytest.raises(RuntimeError, match="still queued or running after 0.1 s"):
        wait_for_an_empty_queue(lambda: ["job-1"], timeout=0.1)


def test_the_table_gives_ratios_to_the_reference_and_the_target_met_or_missed():
    assert table([
        row("by hand", 2.0, 2.0),
        row("autoscaled", 3.0, 2.0, at_most=1.5),
        row("autoscaled, slower", 3.1, 2.0, at_most=1.5),
        row("no ratio", 0.75),
    ], ratio_to="by hand") == [
        "| measure | median | ratio to by hand | target | result |", "|---|---|---|---|---|",
        "| by hand | 2.00 s | 1.00x | | |",
        "| autoscaled | 3.00 s | 1.50x | <= 1.5x | PASS |",
        "| autoscaled, slower | 3.10 s | 1.55x | <= 1.5x | MISS |",
        "| no ratio | 0.75 s | | | |",
    ]
