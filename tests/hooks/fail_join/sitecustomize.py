"""A test's stand-in for an overloaded GCS, outside the product: on PYTHONPATH (tests/real/local/test_scale.py,
tests/real/local/test_causes_found.py), it wraps Ray's CLI in every process that imports it, so that a worker's `ray start`
exits as Ray's does when its raylet did not register in time. FAIL_JOIN=PATH: the first worker to get there
(it makes PATH); FAIL_JOIN=always: every one. HANG_JOIN=PATH: the first worker's `ray start` hangs instead (a
node that never comes up, as on a sick host). Every other process is left as it is."""

import importlib.abc
import importlib.util
import os
import sys
import time

MESSAGE = ("Exception: The current node timed out during startup. This could happen because some of the raylet "
           "failed to startup or the GCS has become overloaded. (tests/hooks/fail_join)")


def _fails_now(argv: list[str], variable: str = "FAIL_JOIN") -> bool:
    marker = os.environ.get(variable)
    if not marker or "start" not in argv or not any(arg.startswith("--address=") for arg in argv):
        return False
    if marker == "always":
        return True
    try:
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return False
    return True


class _WrapRayCli(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "ray.scripts.scripts":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run_module = spec.loader.exec_module

        def exec_module(module):
            run_module(module)
            real = module.main

            def main(*args, **kwargs):
                if _fails_now(sys.argv):
                    sys.exit(MESSAGE)
                if _fails_now(sys.argv, "HANG_JOIN"):
                    time.sleep(3600)  # ended by its rank at --startup-timeout
                return real(*args, **kwargs)

            module.main = main

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("FAIL_JOIN") or os.environ.get("HANG_JOIN"):
    sys.meta_path.insert(0, _WrapRayCli())
