"""Which GPUs a rank finds, of which vendor (host/gpus.py), and the variables each Ray node is then handed
(raynode/commands.py gpu_env): tables of what schedulers and launchers set on real sites."""

import pytest

from mpiray.host import gpus
from mpiray.raynode import raycompat
from mpiray.raynode.commands import gpu_env, node_env


def none() -> tuple[str, ...]:
    return ()


NO_DEVICES = {vendor: ("no devices", none) for vendor in gpus.VENDORS}


def devices(vendor: str, count: int) -> dict:
    return {**NO_DEVICES, vendor: ("devices (test)", lambda: tuple(str(i) for i in range(count)))}


@pytest.mark.parametrize("environ, vendor, ids", [
    # Slurm's gres on an AMD node (Frontier): ROCR_VISIBLE_DEVICES beside CUDA_VISIBLE_DEVICES; ROCR's win.
    ({"ROCR_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7", "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
      "GPU_DEVICE_ORDINAL": "0,1,2,3,4,5,6,7"}, "amd", ("0", "1", "2", "3", "4", "5", "6", "7")),
    # HIP indexes what ROCR left: HIP 1 within ROCR 4,6 is device 6.
    ({"ROCR_VISIBLE_DEVICES": "4,6", "HIP_VISIBLE_DEVICES": "1"}, "amd", ("6",)),
    ({"HIP_VISIBLE_DEVICES": "2,3"}, "amd", ("2", "3")),
    # Aurora: a binding script's per-rank tiles, FLAT ("3") or card.tile ("1.1").
    ({"ZE_AFFINITY_MASK": "3", "ZE_FLAT_DEVICE_HIERARCHY": "FLAT"}, "intel", ("3",)),
    ({"ZE_AFFINITY_MASK": "1.0,1.1"}, "intel", ("1.0", "1.1")),
    ({"ONEAPI_DEVICE_SELECTOR": "level_zero:0,1"}, "intel", ("0", "1")),
    ({"ZE_AFFINITY_MASK": "4,5", "ONEAPI_DEVICE_SELECTOR": "level_zero:*"}, "intel", ("4", "5")),
    ({"CUDA_VISIBLE_DEVICES": "2,3"}, "nvidia", ("2", "3")),
    ({"CUDA_VISIBLE_DEVICES": ""}, "nvidia", ()),
])
def test_the_binding_variables_say_the_vendor_and_the_ids(environ, vendor, ids):
    found = gpus.find(environ, devices=NO_DEVICES)
    assert (found.vendor, found.ids) == (vendor, ids)


def test_unbound_gpus_are_counted_as_ray_counts_them_in_rays_vendor_order():
    aurora = gpus.find({}, devices=devices("intel", 12))  # 12 tiles, nothing binds them: all 12
    assert (aurora.vendor, len(aurora.ids), aurora.source) == ("intel", 12, "devices (test)")
    both = {**devices("amd", 8), "nvidia": ("nv", lambda: ("0",))}
    assert gpus.find({}, devices=both).vendor == "amd"  # Ray: AMD first, NVIDIA last
    assert gpus.find({}, devices=NO_DEVICES) == gpus.Gpus("", (), "none found")


def test_a_named_vendor_looks_at_its_own_variables_only():
    environ = {"CUDA_VISIBLE_DEVICES": "0,1", "ZE_AFFINITY_MASK": "2"}
    assert gpus.find(environ, "nvidia", devices=NO_DEVICES).ids == ("0", "1")
    assert gpus.find(environ, devices=NO_DEVICES).vendor == "intel"


def test_the_schedulers_ids_take_the_vendor_of_the_devices_present():
    found = gpus.find({}, scheduled=("2", "3"), devices=devices("amd", 8))
    assert (found.vendor, found.ids) == ("amd", ("2", "3"))
    assert gpus.find({}, scheduled=("0",), devices=NO_DEVICES).vendor == "nvidia"


def test_amd_devices_are_counted_from_the_kernel_drivers_topology(tmp_path):
    for node, simd in enumerate((0, 104, 104)):  # a CPU agent, then two GPUs
        (tmp_path / str(node)).mkdir()
        (tmp_path / str(node) / "properties").write_text(f"cpu_cores_count 64\nsimd_count {simd}\n")
    assert gpus.amd_device_count(str(tmp_path)) == 2
    assert gpus.amd_device_count(str(tmp_path / "missing")) == 0


def apply(vendor, ids, environ, intel="ZE_AFFINITY_MASK"):
    return node_env(environ, ids, None, gpu_variables=gpu_env(vendor, ids, intel))


FRONTIER = {"ROCR_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7", "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
            "GPU_DEVICE_ORDINAL": "0,1,2,3,4,5,6,7"}


def test_an_amd_node_gets_rocr_narrowed_and_hip_as_ray_reads_it_and_no_cuda():
    env = apply("amd", ("4", "6"), FRONTIER)
    # Ray 2.52-2.60 raise on ROCR without HIP; HIP also obeys CUDA_VISIBLE_DEVICES and GPU_DEVICE_ORDINAL.
    assert env["ROCR_VISIBLE_DEVICES"] == "4,6" and env["HIP_VISIBLE_DEVICES"] == "0,1"
    assert "CUDA_VISIBLE_DEVICES" not in env and "GPU_DEVICE_ORDINAL" not in env
    none_here = apply("amd", (), FRONTIER)
    assert none_here["HIP_VISIBLE_DEVICES"] == "" and "ROCR_VISIBLE_DEVICES" not in none_here


def test_an_intel_node_gets_the_variable_the_installed_ray_reads():
    environ = {"ZE_AFFINITY_MASK": "0,1,2,3", "ONEAPI_DEVICE_SELECTOR": "level_zero:0,1,2,3", "CUDA_VISIBLE_DEVICES": "0"}
    ray_2_60 = apply("intel", ("2", "3"), environ)
    assert ray_2_60["ZE_AFFINITY_MASK"] == "2,3"
    assert "ONEAPI_DEVICE_SELECTOR" not in ray_2_60 and "CUDA_VISIBLE_DEVICES" not in ray_2_60
    ray_2_52 = apply("intel", ("2", "3"), environ, intel="ONEAPI_DEVICE_SELECTOR")
    assert ray_2_52["ZE_AFFINITY_MASK"] == "2,3" and ray_2_52["ONEAPI_DEVICE_SELECTOR"] == "level_zero:0,1"


def test_an_nvidia_node_gets_cuda_alone():
    env = apply("nvidia", ("1",), {"ROCR_VISIBLE_DEVICES": "0", "ZE_AFFINITY_MASK": "0", "CUDA_VISIBLE_DEVICES": "0,1"})
    assert env["CUDA_VISIBLE_DEVICES"] == "1"
    assert not {"ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK"} & set(env)
    assert apply("", (), {})["CUDA_VISIBLE_DEVICES"] == ""  # no GPU: none visible to the node's tasks


def test_which_intel_variable_ray_reads_is_read_from_its_source():
    assert raycompat.intel_visible_variable("""
    def get_visible_accelerator_ids_env_var() -> str:
        return ZE_AFFINITY_MASK_ENV_VAR
""") == "ZE_AFFINITY_MASK"
    assert raycompat.intel_visible_variable("""
    def get_visible_accelerator_ids_env_var() -> str:
        return ONEAPI_DEVICE_SELECTOR_ENV_VAR
""") == "ONEAPI_DEVICE_SELECTOR"
