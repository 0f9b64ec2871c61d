"""Reading a node's `ray start` output through its pipe (mpiray/raynode/output.py): whole lines, the flags the rank
waits for, the file copy."""

import os

from mpiray.raynode.output import NodeOutput


def test_node_output_waits_for_whole_lines_and_remembers_that_ray_start_finished(tmp_path):
    output = NodeOutput(tmp_path / "rank-0001.ray.log")
    assert output.feed(b"Local node IP: 10.0.0.1\nmpiray-node-al") == [b"Local node IP: 10.0.0.1"]
    assert output.alive is None
    assert output.feed(b'ive {"node_id": "ab"}\n') == [b'mpiray-node-alive {"node_id": "ab"}']
    assert output.alive == {"node_id": "ab"} and not output.ray_started
    output.feed(b"2026-11-22 SUCC scripts.py:1251 -- Ray runtime started.\nnext\n")
    assert output.ray_started


def test_node_output_finds_the_alive_record_after_another_writers_unfinished_line(tmp_path):
    # Ray's processes write to the same pipe: starter.py's one-write line may follow a line's first half.
    output = NodeOutput(tmp_path / "rank-0000.ray.log")
    output.feed(b"2026-11-23 INFO scripts.py:1043 -- Local node IP: 10.0.0.1\n2026-11-23 INFO scr"
                b'mpiray-node-alive {"node_id": "ab", "ip": "10.0.0.1"}\nipts.py:1084 -- more\n')
    assert output.alive == {"node_id": "ab", "ip": "10.0.0.1"}
    assert output.watch_failed is None


def test_node_output_reports_a_failed_watch(tmp_path):
    output = NodeOutput(tmp_path / "rank-0002.ray.log")
    output.feed(b"mpiray-watch-failed RuntimeError('GCS client gone')\n")
    assert output.watch_failed == "RuntimeError('GCS client gone')"
    assert output.alive is None


def test_the_heads_gcs_lost_and_back_are_kept_in_order_for_the_rank_to_log(tmp_path):
    output = NodeOutput(tmp_path / "rank-0000.ray.log")
    output.feed(b'Ray: half a line mpiray-gcs-lost {"code": -9, "restarts_left": 3, "pid": 10}\n')
    output.feed(b'mpiray-gcs-back {"pid": 11, "restart": 1, "of": 3, "seconds": 0.4}\n')
    assert list(output.gcs) == [("gcs_lost", {"code": -9, "restarts_left": 3, "pid": 10}),
                                ("gcs_back", {"pid": 11, "restart": 1, "of": 3, "seconds": 0.4})]


def test_the_pipe_is_copied_to_the_file_and_its_last_lines_kept(tmp_path):
    path = tmp_path / "rank-0003.ray.log"
    path.write_bytes(b"an earlier run's line\n")  # a re-used job id: appended to, never read back
    read_end, write_end = os.pipe()
    output = NodeOutput(path)
    output.copy(os.fdopen(read_end, "rb"), open(path, "ab", buffering=0))
    for number in range(10):
        os.write(write_end, f"line {number}\n".encode())
    os.write(write_end, b'mpiray-node-alive {"node_id": "cd"}\n')
    os.close(write_end)
    assert output.closed.wait(5)
    assert output.alive == {"node_id": "cd"}
    assert path.read_text().splitlines()[0] == "an earlier run's line"
    assert path.read_text().count("\n") == 12
    assert output.tail() == 'line 6 | line 7 | line 8 | line 9 | mpiray-node-alive {"node_id": "cd"}'
