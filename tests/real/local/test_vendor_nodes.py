"""GPUs of every vendor, in real `ray start`s with Ray's own accelerator code: only the vendor's device *count* is
faked (tests/hooks/fake_gpus), every other line of Ray runs as shipped. Node shapes as the sites bind them:
Frontier (8 GCDs, Slurm's ROCR_VISIBLE_DEVICES beside CUDA_VISIBLE_DEVICES), Aurora (12 tiles, a binding script's
ZE_AFFINITY_MASK per rank, or none), a 4-GPU NVIDIA node. What a user relies on: the cluster offers every GPU,
each GPU actor sees its own device in its vendor's variable and no other vendor's, and two learners get one each."""

import os
import subprocess
import time

import pytest

from helpers import BIN, PYTHON, ROOT, START_RAY, Launch, assert_nothing_left, driver_report, new_job_id

HOOKS = ROOT / "tests" / "hooks" / "fake_gpus"
DRIVER = ROOT / "tests" / "drivers" / "gpu_holders.py"
BINDING = ROOT / "tests" / "drivers" / "tile_binding.sh"
OTHERS = {"amd": ("CUDA_VISIBLE_DEVICES", "ZE_AFFINITY_MASK", "ONEAPI_DEVICE_SELECTOR", "GPU_DEVICE_ORDINAL"),
          "intel": ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"),
          "nvidia": ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ZE_AFFINITY_MASK", "ONEAPI_DEVICE_SELECTOR")}
EIGHT = ",".join(map(str, range(8)))


def run(tmp_path, ranks: int, env: dict, wrapper=()) -> Launch:
    job_id = new_job_id("gpus")
    argv = [str(BIN / "mpirun"), "-np", str(ranks), *wrapper, PYTHON, str(START_RAY), "--log-dir",
            str(tmp_path / "logs"), "--job-id", job_id, "--", PYTHON, str(DRIVER)]
    hooks = os.pathsep.join(filter(None, [str(HOOKS), os.environ.get("PYTHONPATH")]))
    started = time.monotonic()
    result = subprocess.run(argv, cwd=ROOT, env={**os.environ, "PYTHONPATH": hooks, **env}, capture_output=True,
                            text=True, timeout=300)
    return Launch(result.returncode, result.stdout, result.stderr, tmp_path / "logs" / job_id,
                  time.monotonic() - started)


def device(vendor: str, seen: dict) -> str:
    """The physical device an actor was given, from its vendor's two layers (the node's mask, Ray's variable)."""
    if vendor == "amd":  # HIP indexes what ROCR left
        return seen["ROCR_VISIBLE_DEVICES"].split(",")[int(seen["HIP_VISIBLE_DEVICES"])]
    if vendor == "intel" and seen["ONEAPI_DEVICE_SELECTOR"]:  # Ray 2.52: the selector indexes the mask
        return seen["ZE_AFFINITY_MASK"].split(",")[int(seen["ONEAPI_DEVICE_SELECTOR"].split(":")[1])]
    variable = {"intel": "ZE_AFFINITY_MASK", "nvidia": "CUDA_VISIBLE_DEVICES"}[vendor]
    assert "," not in seen[variable], f"an actor of one GPU sees {variable}={seen[variable]}"
    return seen[variable]


def check(run_: Launch, vendor: str, devices: set[str]) -> None:
    assert run_.returncode == 0, run_.stdout[-3000:] + run_.stderr[-3000:]
    report = driver_report(run_.stdout, "GPUS", run_.stderr)
    assert report["total"] == len(devices)
    given = [device(vendor, seen) for seen in report["holders"]]
    assert sorted(given) == sorted(devices), report["holders"]  # each its own, every one of them
    for seen in report["holders"] + report["learners"]:
        assert not [name for name in OTHERS[vendor] if seen.get(name)], seen  # no other vendor's variable
    learners = [device(vendor, seen) for seen in report["learners"]]
    assert len(set(learners)) == 2 and set(learners) <= devices
    manifests = [run_.event(rank, "node_manifest") for rank in range(2)]
    assert {m["gpu_vendor"] for m in manifests if m} == {vendor}
    assert_nothing_left(run_, wait=10)


@pytest.mark.smoke_ray
def test_a_frontier_node_offers_its_8_gcds_with_slurms_rocr_binding(tmp_path):
    slurm_binding = {"ROCR_VISIBLE_DEVICES": EIGHT, "CUDA_VISIBLE_DEVICES": EIGHT, "GPU_DEVICE_ORDINAL": EIGHT}
    check(run(tmp_path, 2, {"FAKE_AMD_GPUS": "8", **slurm_binding}), "amd", set(EIGHT.split(",")))


@pytest.mark.smoke_ray
def test_an_aurora_node_offers_its_12_tiles_bound_per_rank(tmp_path):
    env = {"FAKE_INTEL_GPUS": "12", "ZE_FLAT_DEVICE_HIERARCHY": "FLAT", "TILES_PER_RANK": "6"}
    check(run(tmp_path, 2, env, wrapper=["sh", str(BINDING)]), "intel", {str(i) for i in range(12)})


def test_an_aurora_node_without_a_binding_offers_the_12_tiles_ray_counts(tmp_path):
    """No --num-gpus, no mask: the 12 tiles dpctl counts, dealt to the host's 2 ranks."""
    check(run(tmp_path, 2, {"FAKE_INTEL_GPUS": "12", "ZE_FLAT_DEVICE_HIERARCHY": "FLAT"}), "intel",
          {str(i) for i in range(12)})


def test_a_4_gpu_nvidia_node(tmp_path):
    check(run(tmp_path, 2, {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}), "nvidia", {"0", "1", "2", "3"})


def test_ray_refusing_a_node_is_said_in_rays_words_not_as_an_install_problem():
    """A node environment Ray refuses at import (an AMD node's ROCR_VISIBLE_DEVICES without HIP's, as a user's
    own setting could bring it; mpiray's own never does): the node's starter says so in Ray's words, which
    `mpiray logs` files under ray_refused_node (tests/unit/logs/report/test_classify.py), never as a missing package."""
    hooks = os.pathsep.join(filter(None, [str(HOOKS), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": hooks, "FAKE_AMD_GPUS": "8", "ROCR_VISIBLE_DEVICES": EIGHT}
    env.pop("HIP_VISIBLE_DEVICES", None)
    started = subprocess.run([PYTHON, "-m", "mpiray.raynode.starter", "start", "--head"], input="", env=env,
                             capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert started.returncode == 1
    last = started.stderr.strip().splitlines()[-1]
    assert last == ("mpiray: Ray refused to start this node: RuntimeError: Please use HIP_VISIBLE_DEVICES instead of "
                    "ROCR_VISIBLE_DEVICES"), started.stderr[-2000:]
    assert "pip install" not in started.stderr
