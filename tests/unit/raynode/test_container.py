"""Each container runtime's command line (mpiray/raynode/container.py), asserted as lists against the runtime's
documented usage: `apptainer exec --bind SRC:DST IMAGE CMD`, `ch-run --bind=SRC:DST IMAGE -- CMD`, `shifter
--image=IMAGE --volume=SRC:DST CMD`, `enroot start --mount SRC:DST --env NAME IMAGE CMD`, `podman run --rm --name N
--network=host --volume SRC:DST[:ro] --env NAME IMAGE CMD`."""

from pathlib import Path

import pytest

from mpiray.raynode.container import Bind, Container, container_name, parse

ARGV = ["python3", "-m", "mpiray.raynode.starter", "start", "--head"]
BINDS = [Bind("/tmp/mpiray-0-r0-ab", "/tmp/mpiray-0-r0-ab"),
         Bind("/work/mpiray/mpiray", "/tmp/mpiray-0-r0-ab/code/mpiray", read_only=True)]
ENV = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": "/tmp/mpiray-0-r0-ab/token", "GLOO_SOCKET_IFNAME": "hsn0",
       "ROCR_VISIBLE_DEVICES": "0,1", "PYTHONPATH": "/tmp/mpiray-0-r0-ab/code", "SECRET_OF_THE_USER": "x"}


@pytest.mark.parametrize("kind, expected", [
    ("apptainer", ["apptainer", "exec", "--bind", "/tmp/mpiray-0-r0-ab:/tmp/mpiray-0-r0-ab,"
                   "/work/mpiray/mpiray:/tmp/mpiray-0-r0-ab/code/mpiray:ro", "--nv", "/img/ray.sif", *ARGV]),
    ("singularity", ["singularity", "exec", "--bind", "/tmp/mpiray-0-r0-ab:/tmp/mpiray-0-r0-ab,"
                     "/work/mpiray/mpiray:/tmp/mpiray-0-r0-ab/code/mpiray:ro", "--nv", "/img/ray.sif", *ARGV]),
    # ch-run binds $TMPDIR at the image's /tmp: without it, the host's /tmp (Kestrel's TMPDIR lies below it).
    ("charliecloud", ["env", "-u", "TMPDIR", "ch-run", "--bind=/tmp/mpiray-0-r0-ab:/tmp/mpiray-0-r0-ab",
                      "--bind=/work/mpiray/mpiray:/tmp/mpiray-0-r0-ab/code/mpiray", "--nv", "/img/ray.sif", "--",
                      *ARGV]),
    ("shifter", ["shifter", "--image=/img/ray.sif", "--volume=/tmp/mpiray-0-r0-ab:/tmp/mpiray-0-r0-ab",
                 "--volume=/work/mpiray/mpiray:/tmp/mpiray-0-r0-ab/code/mpiray:ro", "--nv", *ARGV]),
])
def test_runtimes_that_pass_the_environment_on_get_binds_only(kind, expected):
    assert Container(kind, "/img/ray.sif", ("--nv",)).command(ARGV, BINDS, ENV, "mpiray-4711-r0") == expected


def test_podman_runs_a_named_container_on_the_hosts_network_and_is_told_which_variables_to_pass():
    box = Container("podman", "localhost/ray:2.60")
    monitor = box.monitor_pidfile(Path("/tmp/mpiray-0-r0-ab"), "mpiray-4711-r0")
    argv = box.command(ARGV, BINDS, ENV, "mpiray-4711-r0", monitor_pidfile=monitor)
    assert argv[:10] == ["podman", "run", "--rm", "--interactive", "--name=mpiray-4711-r0",
                         "--conmon-pidfile=/tmp/mpiray-0-r0-ab/mpiray-4711-r0.conmon.pid", "--network=host",
                         "--pid=host", "--ipc=host", "--volume=/tmp/mpiray-0-r0-ab:/tmp/mpiray-0-r0-ab"]
    assert Container("apptainer", "x").monitor_pidfile(Path("/tmp/p"), "n") is None
    passed = [arg[len("--env="):] for arg in argv if arg.startswith("--env=")]
    # Names only (podman takes each value from its own environment): no token or value on the command line.
    assert passed == ["GLOO_SOCKET_IFNAME", "PYTHONPATH", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "ROCR_VISIBLE_DEVICES"]
    assert argv[-len(ARGV) - 1:] == ["localhost/ray:2.60", *ARGV]
    assert Container("podman", "x").remove_command("mpiray-4711-r0") == ["podman", "rm", "--force", "--time=0",
                                                                        "mpiray-4711-r0"]
    assert Container("podman-hpc", "x").named and not Container("apptainer", "x").named


def test_enroot_mounts_and_names_the_variables_to_pass():
    argv = Container("enroot", "ray+2.60").command(ARGV, BINDS[:1], ENV, "n")
    assert argv[:3] == ["enroot", "start", "--mount=/tmp/mpiray-0-r0-ab:/tmp/mpiray-0-r0-ab"]
    assert "--env=RAY_AUTH_TOKEN_PATH" in argv and "--env=SECRET_OF_THE_USER" not in argv
    assert argv[-len(ARGV) - 1:] == ["ray+2.60", *ARGV]


def test_a_reference_and_flags_are_parsed_as_the_user_wrote_them():
    box = parse("apptainer:/scratch/images/ray 2.60.sif", "--nv --bind '/lus/my dir'")
    assert (box.kind, box.image, box.flags) == ("apptainer", "/scratch/images/ray 2.60.sif", ("--nv", "--bind", "/lus/my dir"))
    with pytest.raises(ValueError, match="no container runtime"):
        parse("docker:ray")


def test_each_job_and_rank_has_a_container_name_of_its_own():
    assert container_name("4711", 3) == "mpiray-4711-r3"
    assert container_name("a/b c", 0) == "mpiray-a-b-c-r0"
