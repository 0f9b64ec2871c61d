"""A test's stand-in for a host without Ray (the ranks' side of `--container`): on PYTHONPATH, `import ray` fails in
every process that has this on its path, as it would where Ray is not installed, and importlib.util.find_spec("ray")
finds nothing with a file (mpiray reads Ray's version from its files: "not installed"). Processes inside the image
get a PYTHONPATH of mpiray's own, so they import the image's Ray."""

import importlib.abc
import importlib.machinery
import sys


class _Absent(importlib.abc.Loader):
    def create_module(self, spec):
        return None

    def exec_module(self, module):
        raise ModuleNotFoundError("No module named 'ray' (tests/hooks/no_ray)", name="ray")


class _HideRay(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "ray" or name.startswith("ray."):
            return importlib.machinery.ModuleSpec(name, _Absent())
        return None


sys.meta_path.insert(0, _HideRay())
