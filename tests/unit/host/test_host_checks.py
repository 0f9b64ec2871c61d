"""What the pre-flight looks at on a host and a rank (mpiray/host/findings.py): read from files, never by import."""

from __future__ import annotations

import resource

import pytest

from mpiray.host import findings

MOUNTINFO = """\
22 1 0:21 / / rw,relatime - overlay overlay rw
31 22 0:26 / /dev/shm rw,nosuid,nodev - tmpfs tmpfs rw
40 22 0:35 / /lustre/scratch rw,relatime - lustre 10.0.0.1@o2ib:/scratch rw
41 40 0:36 / /lustre/scratch/local\\040disk rw - xfs /dev/nvme0n1 rw
"""


def test_versions_come_from_the_dist_info_names_first_on_the_path(tmp_path):
    first, second = tmp_path / "venv-site", tmp_path / "system-site"
    for site, names in ((first, ["numpy-2.2.6", "ray-2.60.0", "Cloudpickle-3.1.1"]),
                        (second, ["numpy-1.26.4", "torch-2.13.0+cpu"])):
        for name in names:
            (site / f"{name}.dist-info").mkdir(parents=True)
    found = findings.installed_versions([str(first), str(second)], names=("numpy", "ray", "cloudpickle", "torch",
                                                                          "gymnasium"))
    assert found == {"numpy": "2.2.6", "ray": "2.60.0", "cloudpickle": "3.1.1", "torch": "2.13.0+cpu"}


def test_the_file_system_of_a_path_is_its_longest_mount_point():
    assert findings.mount_of("/lustre/scratch/u/run", MOUNTINFO) == ("/lustre/scratch", "lustre")
    assert findings.mount_of("/lustre/scratch/local disk/x", MOUNTINFO) == ("/lustre/scratch/local disk", "xfs")
    assert findings.mount_of("/dev/shm", MOUNTINFO) == ("/dev/shm", "tmpfs")
    assert findings.mount_of("/tmp/x", MOUNTINFO) == ("/", "overlay")


def test_a_dir_that_cannot_be_written_is_refused_and_a_fine_one_passes(tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    (refused,) = findings.dir_findings(blocked / "spill", "spill", "--spill-dir")
    assert (refused.level, refused.check) == (findings.REFUSE, "dir_unwritable")
    assert "--spill-dir" in refused.fix
    assert [f for f in findings.dir_findings(tmp_path, "spill", "--spill-dir") if f.level == findings.REFUSE] == []


def test_the_kernels_port_range_and_neighbour_table_are_compared_with_the_job(tmp_path):
    ports = tmp_path / "ip_local_port_range"
    ports.write_text("32768\t60999\n")
    assert findings.port_range_findings(20000, 32000, ports) == []  # Linux's default: above mpiray's blocks
    ports.write_text("15000\t60999\n")
    (overlap,) = findings.port_range_findings(20000, 32000, ports)
    assert overlap.check == "ephemeral_ports" and "15000-60999" in overlap.message
    table = tmp_path / "gc_thresh3"
    table.write_text("1024\n")
    assert findings.neighbour_findings(512, table) == []
    (small,) = findings.neighbour_findings(513, table)
    assert small.check == "neighbour_table" and "1024 entries" in small.message and "513 Ray nodes" in small.message


@pytest.mark.parametrize("limit, check", [(resource.RLIMIT_NOFILE, "open_files"), (resource.RLIMIT_NPROC, "processes")])
def test_the_open_file_and_process_soft_limits_are_raised_to_the_hard_ones(limit, check):
    soft, hard = resource.getrlimit(limit)
    try:
        resource.setrlimit(limit, (min(256, hard), hard))
        found = [f for f in findings.raise_soft_limits() if f.check == check]
        if hard > 256:
            assert [f.level for f in found] == [findings.FIXED] and "soft limit 256 raised" in found[0].message
        assert resource.getrlimit(limit)[0] == hard
        assert findings.raise_soft_limits() == []  # nothing left to raise
        huge = findings.open_files_findings(10**6, head_host=True)  # what a GCS of a million nodes needs
        assert hard == resource.RLIM_INFINITY or check != "open_files" or any("below the ~" in f.message for f in huge)
    finally:
        resource.setrlimit(limit, (soft, hard))
