"""A test's stand-in for a vendor's device-count library, and nothing more: on PYTHONPATH (tests/gpu_vendors/), in
every process of a job (ranks, `ray start`, raylet's workers), FAKE_AMD_GPUS=N makes Ray's own AMD SMI binding
(ray._private.thirdparty.pyamdsmi) report N MI250X GCDs; FAKE_INTEL_GPUS=N is read by the dpctl beside this file.
Every other line of Ray's accelerator code (which vendor owns "GPU", the visible-device variables, their checks,
each task's ids) runs as shipped."""

import importlib.abc
import importlib.machinery
import os
import sys

MI250X = 0x740C  # the PCI device id Ray's table names AMD-Instinct-MI250X-MI250


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        return None

    def exec_module(self, module):
        count = int(os.environ.get("FAKE_AMD_GPUS", "0"))
        module.smi_initialize = lambda: None
        module.smi_shutdown = module.pyamdsmi_shutdown = lambda: None
        module.smi_get_device_count = lambda: count
        module.smi_get_device_id = lambda index: MI250X if 0 <= index < count else -1


class _FakeAmdSmi(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "ray._private.thirdparty.pyamdsmi" and os.environ.get("FAKE_AMD_GPUS"):
            return importlib.machinery.ModuleSpec(name, _Loader())
        return None


sys.meta_path.insert(0, _FakeAmdSmi())
