"""The pattern that finds Ray's error lines in a job's output catches each of Ray's formats."""

from __future__ import annotations

from helpers import error_lines


def test_the_error_pattern_catches_rays_formats():
    assert error_lines("\x1b[33m(raylet)\x1b[0m [2026-11-23 15:38:07,407 E 32545 32545] (raylet) main.cc:1108: x")
    assert error_lines("(pid=gcs_server) [2026-11-23 15:38:06,479 E 32490 32490] (gcs_server) gcs_server.cc:1361: x")
    assert error_lines("2026-11-23 15:38:06,479\tERROR worker.py:1 -- x")
    assert not error_lines("[2026-11-23 15:38:06,479 I 32490 32490] (gcs_server) Everything is fine")
    assert not error_lines("[train] trial 1: 0 errors, mean return 1.0")
