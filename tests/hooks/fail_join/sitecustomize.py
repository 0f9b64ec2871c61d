"""A test's stand-in for an overloaded GCS, outside the product: on PYTHONPATH (tests/real/local/test_scale.py,
tests/real/local/test_causes_found.py), it wraps Ray's CLI in every process that imports it, so that a worker's `ray start`
exits as Ray's does when its raylet did not register in time. FAIL_JOIN=PATH: the first worker to get there
(it makes PATH); FAIL_JOIN=always: every one. HANG_JOIN=PATH: the first worker's `ray start` hangs instead (a
node that never comes up, as on a sick host). FAIL_HEAD=PATH: the first head's `ray start` (it makes PATH) runs
Ray's own start with its raylet stopped (SIGSTOP), as a host that gives it no CPU would, and Ray's 30 s for it to
register passed at once: Ray raises its own "timed out during startup" from its own code, as on an overloaded host.
Every other process is left as it is."""

import importlib.abc
import importlib.util
import os
import signal
import sys
import time

MESSAGE = ("Exception: The current node timed out during startup. This could happen because some of the raylet "
           "failed to startup or the GCS has become overloaded. (tests/hooks/fail_join)")


def _fails_now(argv: list[str], variable: str = "FAIL_JOIN") -> bool:
    marker = os.environ.get(variable)
    head = variable == "FAIL_HEAD"
    if not marker or "start" not in argv or (head != ("--head" in argv)) or (
            not head and not any(arg.startswith("--address=") for arg in argv)):
        return False
    if marker == "always":
        return True
    try:
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return False
    return True


class _LateClock:
    """The time module as Ray's node.py sees it, once the raylet's registration was first missed: 31 s later."""

    def __init__(self):
        self.late = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.late

    def __getattr__(self, name):
        return getattr(time, name)


def _raylet_starved() -> None:
    """The raylet this `ray start` starts is stopped (SIGSTOP) at once, as if its host gave it no CPU: it cannot
    register, so Ray's look for it in the GCS is answered at once with what the GCS says then (Ray's own asks for
    30 s), and Ray's wait for it, which gives up after 30 s, finds itself that late at its first miss."""
    import ray._private.node
    import ray._private.services

    clock, start_raylet = _LateClock(), ray._private.services.start_raylet

    def starved_raylet(*args, **kwargs):
        info = start_raylet(*args, **kwargs)
        os.kill(info.process.pid, signal.SIGSTOP)
        return info

    def get_node(gcs_address, node_id):
        clock.late = 31.0  # past Ray's raylet_start_wait_time_s (30)
        raise RuntimeError(f"GCS cannot find the node with node ID {node_id} (its raylet is stopped: tests/hooks)")

    ray._private.node.time = clock
    ray._private.services.start_raylet = starved_raylet
    ray._private.services.get_node = get_node


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
                if _fails_now(sys.argv, "FAIL_HEAD"):
                    _raylet_starved()
                return real(*args, **kwargs)

            module.main = main

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("FAIL_JOIN") or os.environ.get("HANG_JOIN") or os.environ.get("FAIL_HEAD"):
    sys.meta_path.insert(0, _WrapRayCli())
