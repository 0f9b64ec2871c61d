"""Reading a node's `ray start` output: only this run's lines, whole lines, and the started flag."""

from mpiray.logs import NodeOutput


def test_node_output_skips_an_earlier_run_and_waits_for_whole_lines(tmp_path):
    path = tmp_path / "rank-0001.ray.log"
    path.write_bytes(b"Ray runtime started.\nmpiray-node-alive {\"old\": 1}\n")  # same --job-id, last run
    output = NodeOutput(path, path.stat().st_size)
    assert output.new_lines() == [] and not output.ray_started
    with open(path, "ab") as out:
        out.write(b"Local node IP: 10.0.0.1\nmpiray-node-al")
    assert output.new_lines() == [b"Local node IP: 10.0.0.1"]
    with open(path, "ab") as out:
        out.write(b"ive {\"node_id\": \"ab\"}\n")
    assert output.new_lines() == [b'mpiray-node-alive {"node_id": "ab"}']
    assert not output.ray_started


def test_node_output_remembers_that_ray_start_finished(tmp_path):
    path = tmp_path / "rank-0001.ray.log"
    path.write_bytes(b"")
    output = NodeOutput(path, 0)
    with open(path, "ab") as out:
        out.write(b"2026-11-22 SUCC scripts.py:1251 -- Ray runtime started.\nnext\n")
    output.new_lines()
    assert output.ray_started
    assert output.new_lines() == [] and output.ray_started


def test_node_output_finds_the_alive_record_after_another_writers_unfinished_line(tmp_path):
    # Ray's processes write to the same file: ray_node.py's one-write line may follow a line's first half.
    path = tmp_path / "rank-0000.ray.log"
    path.write_bytes(b"2026-11-23 INFO scripts.py:1043 -- Local node IP: 10.0.0.1\n2026-11-23 INFO scr"
                     b'mpiray-node-alive {"node_id": "ab", "ip": "10.0.0.1"}\nipts.py:1084 -- more\n')
    output = NodeOutput(path, 0)
    output.new_lines()
    assert output.alive == {"node_id": "ab", "ip": "10.0.0.1"}
    assert output.watch_failed is None


def test_node_output_reports_a_failed_watch(tmp_path):
    path = tmp_path / "rank-0002.ray.log"
    path.write_bytes(b"mpiray-watch-failed RuntimeError('GCS client gone')\n")
    output = NodeOutput(path, 0)
    output.new_lines()
    assert output.watch_failed == "RuntimeError('GCS client gone')"
    assert output.alive is None
