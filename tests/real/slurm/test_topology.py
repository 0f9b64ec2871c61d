"""The fabric as the scheduler knows it, for Ray: on the test bed, Slurm's topology plugin puts the first two hosts
on leaf switch sw1 and the third on sw2 (tests/slurm/testbed.py topology_conf); each Ray node carries its switch
as mpiray.io/switch, and a placement group that packs by it (Ray's topology_strategy) lands under one switch."""

from __future__ import annotations

from helpers import JOB_TIMEOUT_S, PYTHON, driver_report
from slurm import testbed

# Two one-CPU bundles on two distinct nodes under one switch: only sw1 has two nodes.
DRIVER = """
import json, socket
import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

ray.init()
switches = {n["NodeManagerHostname"]: n.get("Labels", {}).get("mpiray.io/switch") for n in ray.nodes() if n["Alive"]}
group = placement_group([{"CPU": 1}, {"CPU": 1}],
                        topology_strategy={"mpiray.io/switch": "STRICT_PACK", "ray.io/node-id": "STRICT_SPREAD"})
ray.get(group.ready(), timeout=60)

@ray.remote(num_cpus=1)
def host():
    return socket.gethostname()

placed = ray.get([host.options(scheduling_strategy=PlacementGroupSchedulingStrategy(group, bundle)).remote()
                  for bundle in range(2)], timeout=60)
print("TOPOLOGY " + json.dumps({"switches": switches, "placed": placed}), flush=True)
"""


def test_each_node_carries_its_switch_and_a_group_packed_by_switch_stays_under_one(slurm_testbed, jobs, tmp_path):
    bed = slurm_testbed
    result = bed.run(jobs.srun(tmp_path, 3, "--", PYTHON, "-c", DRIVER), timeout=JOB_TIMEOUT_S, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    seen = driver_report(result.stdout, "TOPOLOGY", result.stderr)
    assert seen["switches"] == {name: testbed.switch_of(bed, name) for name in bed.node_names}
    assert sorted(seen["placed"]) == [name for name in bed.node_names if testbed.switch_of(bed, name) == "sw1"]
