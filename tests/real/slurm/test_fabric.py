"""The fast network on the 3-host Slurm test bed: each host has eth0 (management: its hostname resolves there)
and hsn0 (a subnet of its own, NAME.hsn.testbed), as Slingshot nodes have. Chosen by --interface hsn0 or by the
site's naming rule, every node advertises its hsn0 address and its Ray and gloo traffic stays on hsn0."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from helpers import JOB_TIMEOUT_S, PYTHON, START_RAY, driver_report, field, rank_logs
from slurm import testbed

DRIVER = Path(__file__).resolve().parents[2] / "slurm" / "fabric_driver.py"



def ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address as ss or psutil write it ('[::ffff:10.79.0.11]' too), IPv4-mapped ones as IPv4."""
    parsed = ipaddress.ip_address(address.strip("[]").partition("%")[0])
    return parsed.ipv4_mapped if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped else parsed


def on_hsn(address: str) -> bool:
    return ip(address) in testbed.HSN_SUBNET


def peers(ss: str) -> list[tuple[str, str, str]]:
    """(local, peer, process) of each established TCP connection in `ss -tnap` output."""
    found = []
    for line in ss.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 5 and fields[0] == "ESTAB":
            found.append((fields[3].rpartition(":")[0], fields[4].rpartition(":")[0], " ".join(fields[5:])))
    return found


@pytest.mark.parametrize("choice", [["--interface", "hsn0"], ["--address-rule", "{host}.hsn.testbed"]],
                         ids=["interface", "address-rule"])
def test_nodes_advertise_and_talk_on_hsn0_only(slurm_testbed, jobs, tmp_path, choice):
    bed = slurm_testbed
    result = bed.run(
        ["srun", f"--job-name={jobs.name}", "-N3", "--ntasks-per-node=1", "--mpi=pmi2", f"--chdir={tmp_path}",
         PYTHON, str(START_RAY), "--log-dir", str(tmp_path / "logs"), *choice, "--", PYTHON, str(DRIVER)],
        timeout=JOB_TIMEOUT_S)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (job_dir,) = (tmp_path / "logs").iterdir()
    jobs.ids.append(job_dir.name)
    seen = driver_report(result.stdout, "FABRIC", result.stderr)
    assert sorted(seen["nodes"]) == bed.node_hsn_ips  # every node advertises its hsn0 address
    learners = seen["learners"]
    assert sorted(learner["node_ip"] for learner in learners) == bed.node_hsn_ips  # one learner per node
    assert {learner["sum"] for learner in learners} == {3.0}
    ray_links: list[str] = []
    for learner in learners:
        assert learner["gloo_ifname"] == "hsn0"
        gloo = [address for address in learner["gloo_local"] if not ip(address).is_loopback]  # its raylet's: local
        assert gloo and all(on_hsn(address) for address in gloo), learner["gloo_local"]
        # Every connection between hosts in the node's namespace (GCS, raylets, object managers, workers, gloo) is on
        # hsn0; only the batch system's own (slurmstepd to the controller) and the host's mount of the file server
        # (sshfs's ssh) stay on the management network.
        between_hosts = [(local, peer, what) for local, peer, what in peers(learner["ss"])
                         if not ip(peer).is_loopback and ip(peer) != ip(local) and '"slurm' not in what
                         and ip(peer) != ip(bed.file_server.node.ip)]
        ray_links += [what for _, _, what in between_hosts if '"raylet"' in what or '"gcs_server"' in what]
        off = [c for c in between_hosts if not (on_hsn(c[0]) and on_hsn(c[1]))]
        assert not off, off
    assert ray_links, [learner["ss"] for learner in learners]  # the look saw Ray's own links between hosts
    logs = rank_logs(job_dir, 3)
    for records in logs:
        manifest = field(records, "node_manifest", "interface")
        assert manifest == "hsn0"
    jobs.wait_until_gone(job_dir.name)


def test_an_address_rule_that_names_no_address_of_the_node_stops_the_job_naming_host_and_rule(
        slurm_testbed, jobs, tmp_path):
    bed = slurm_testbed
    result = bed.run(
        ["srun", f"--job-name={jobs.name}", "-N3", "--ntasks-per-node=1", "--mpi=pmi2", f"--chdir={tmp_path}",
         PYTHON, str(START_RAY), "--log-dir", str(tmp_path / "logs"), "--address-rule", "{host}.nowhere.invalid",
         "--", PYTHON, "-c", "pass"],
        timeout=JOB_TIMEOUT_S)
    assert result.returncode == 2, result.stdout[-3000:] + result.stderr[-3000:]
    assert "--address-rule {host}.nowhere.invalid: mpiray-node1.nowhere.invalid (for host mpiray-node1) does not " \
           "resolve" in result.stdout + result.stderr
    (job_dir,) = (tmp_path / "logs").iterdir()
    jobs.ids.append(job_dir.name)
    jobs.wait_until_gone(job_dir.name)
