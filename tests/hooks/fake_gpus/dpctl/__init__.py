"""A test's stand-in for Intel's dpctl, the one call Ray and mpiray make of it: the Level Zero GPU count
(FAKE_INTEL_GPUS; with ZE_FLAT_DEVICE_HIERARCHY=FLAT a Max 1550 card counts as 2 tiles, so Aurora's node is 12)."""

import os


class SyclContext:
    def __init__(self, selector: str):
        if not selector.startswith("level_zero:gpu"):
            raise ValueError(f"no such devices: {selector}")
        self.device_count = int(os.environ.get("FAKE_INTEL_GPUS", "0"))


class SyclDevice:
    def __init__(self, selector: str):
        if int(os.environ.get("FAKE_INTEL_GPUS", "0")) < 1:
            raise ValueError(f"no such device: {selector}")
        self.name = "Intel(R) Data Center GPU Max 1550"
