"""Which GPUs a rank may use, of which vendor, and where that was read.

Knowledge as tables (as batch/environment.py keeps the schedulers'): each vendor's binding variables (what a
scheduler or launcher sets to give a task its GPUs), its device count when nothing binds, and the order Ray
itself picks a vendor in (ray/_private/accelerators/__init__.py: AMD, then Intel, then NVIDIA). The functions
are pure but for the device count, which asks the same library Ray asks (or the kernel's device files), so a
test can stand in a device count and nothing else.

Ids are kept as the outermost binding names them (ROCR_VISIBLE_DEVICES's physical ids, ZE_AFFINITY_MASK's
"0" or "0.1"): what each Ray node is then handed for its vendor is raynode/commands.py's gpu_env.
"""

from __future__ import annotations

import glob
import importlib.util
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

NVIDIA, AMD, INTEL = "nvidia", "amd", "intel"
VENDORS = (AMD, INTEL, NVIDIA)  # Ray's own order: the first with a device count above 0 owns "GPU"
NONE = ""  # no GPU found


@dataclass(frozen=True)
class Vendor:
    name: str
    # Binding variables, outermost first: a later one indexes into what the earlier ones left visible.
    binding: tuple[str, ...]


VENDOR_TABLE = {
    # Slurm's gres binds AMD GPUs with ROCR_VISIBLE_DEVICES (and sets CUDA_VISIBLE_DEVICES and
    # GPU_DEVICE_ORDINAL beside it); HIP_VISIBLE_DEVICES indexes what ROCR left.
    AMD: Vendor(AMD, ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL")),
    # Aurora's per-rank binding scripts set ZE_AFFINITY_MASK ("0", "0.1" card.tile); ONEAPI_DEVICE_SELECTOR
    # ("level_zero:0,1", "level_zero:*") selects among what the mask left.
    INTEL: Vendor(INTEL, ("ZE_AFFINITY_MASK", "ONEAPI_DEVICE_SELECTOR")),
    NVIDIA: Vendor(NVIDIA, ("CUDA_VISIBLE_DEVICES",)),
}
# Every vendor's visible-device variables: a Ray node is handed its own vendor's and none of the others'.
VISIBLE_VARIABLES = tuple(name for vendor in VENDORS for name in VENDOR_TABLE[vendor].binding)

KFD_NODES = "/sys/class/kfd/kfd/topology/nodes"  # AMD's kernel driver: one dir per CPU or GPU agent


@dataclass(frozen=True)
class Gpus:
    """The GPUs a rank found: their vendor (NONE when none), their ids, and where they were read."""

    vendor: str
    ids: tuple[str, ...]
    source: str  # a variable's name, "device count (dpctl)", "/dev/nvidia*", the scheduler's variable, ...


def _ids(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _selector_ids(text: str) -> tuple[str, ...] | None:
    """ONEAPI_DEVICE_SELECTOR's Level Zero ids ("level_zero:0,1" -> 0, 1); None: every device ("*")."""
    ids: list[str] = []
    for term in text.split(";"):
        backend, _, devices = term.partition(":")
        if backend.strip().lower() not in ("level_zero", "*"):
            continue
        if "*" in devices:
            return None
        ids.extend(_ids(devices))
    return tuple(ids)


def _indexed(outer: tuple[str, ...], inner: tuple[str, ...]) -> tuple[str, ...]:
    """inner's positions into outer (HIP_VISIBLE_DEVICES within ROCR_VISIBLE_DEVICES), as outer's ids."""
    picked = []
    for index in inner:
        if not index.isdigit() or int(index) >= len(outer):
            return inner  # not positions (a UUID): taken as they are
        picked.append(outer[int(index)])
    return tuple(picked)


def bound(environ: Mapping[str, str], vendor: str) -> Gpus | None:
    """The GPUs of vendor that environ binds this rank to, or None when none of its variables is set."""
    found: tuple[str, ...] | None = None
    sources = []
    for name in VENDOR_TABLE[vendor].binding:
        if name not in environ:
            continue
        if name == "ONEAPI_DEVICE_SELECTOR":
            ids = _selector_ids(environ[name])
            if ids is None:  # level_zero:*: every device the mask left
                if found is None:
                    continue
                ids = tuple(str(i) for i in range(len(found)))
        else:
            ids = _ids(environ[name])
        found = ids if found is None else _indexed(found, ids)
        sources.append(name)
    return None if found is None else Gpus(vendor, found, "+".join(sources))


def amd_device_count(root: str = KFD_NODES) -> int:
    """AMD GPUs the kernel driver shows: KFD topology nodes with SIMD units (CPU agents have none)."""
    count = 0
    for properties in glob.glob(os.path.join(root, "*", "properties")):
        try:
            fields = dict(line.split(maxsplit=1) for line in Path(properties).read_text().splitlines() if " " in line)
        except OSError:
            continue
        if fields.get("simd_count", "0").strip() not in ("", "0"):
            count += 1
    return count


def intel_device_count() -> int:
    """Intel GPUs as Ray counts them: dpctl's Level Zero devices (tiles, with ZE_FLAT_DEVICE_HIERARCHY=FLAT).

    0 without dpctl, as for Ray; dpctl is imported only where it is installed (the find costs nothing)."""
    if importlib.util.find_spec("dpctl") is None:
        return 0
    try:
        import dpctl  # type: ignore[import-not-found]

        return int(dpctl.SyclContext("level_zero:gpu").device_count)
    except Exception:  # no Level Zero driver, no device: what Ray makes of it too
        return 0


def _numbered(count: Callable[[], int]) -> Callable[[], tuple[str, ...]]:
    return lambda: tuple(str(i) for i in range(count()))


def nvidia_devices() -> tuple[str, ...]:
    """NVIDIA GPUs by their device files' numbers (/dev/nvidia0, /dev/nvidia3: a cgroup may hide some)."""
    return tuple(sorted((os.path.basename(p)[len("nvidia"):] for p in glob.glob("/dev/nvidia[0-9]*")), key=int))


# Where a node's devices are found when nothing binds them: vendor -> (what the log says, their ids).
DEVICES: dict[str, tuple[str, Callable[[], tuple[str, ...]]]] = {
    AMD: (f"devices ({KFD_NODES})", _numbered(amd_device_count)),
    INTEL: ("devices (dpctl level_zero:gpu, as Ray counts them)", _numbered(intel_device_count)),
    NVIDIA: ("devices (/dev/nvidia*)", nvidia_devices),
}


def find(environ: Mapping[str, str], vendor: str = "auto", scheduled: tuple[str, ...] | None = None,
         devices: Mapping[str, tuple[str, Callable[[], tuple[str, ...]]]] = DEVICES) -> Gpus:
    """The GPUs this rank may use.

    First what a scheduler or launcher bound (each vendor's variables, in Ray's vendor order), then the
    scheduler's own ids (scheduled: SLURM_STEP_GPUS), then the devices the node has. vendor: "auto", or the
    one vendor to look for (--gpu-vendor, a site's row).
    """
    vendors = VENDORS if vendor == "auto" else (vendor,)
    for name in vendors:
        found = bound(environ, name)
        if found is not None:
            return found
    for name in vendors:
        source, listed = devices[name]
        ids = listed()
        if ids and scheduled is not None:  # the devices say whose; the scheduler's ids say which
            return Gpus(name, scheduled, "the scheduler's GPU ids")
        if ids:
            return Gpus(name, ids, source)
    if scheduled is not None:  # the scheduler names GPUs this node shows no device of: NVIDIA's, as before
        return Gpus(vendors[-1], scheduled, "the scheduler's GPU ids")
    return Gpus(NONE if vendor == "auto" else vendor, (), "none found")
