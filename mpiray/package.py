"""Where mpiray lies, and how a helper process runs one of its modules: worked out here, and only here.

mpiray's helper processes (each rank's `ray start` wrapper, Ray's autoscaler monitor with mpiray's node
provider, the worker jobs of an elastic cluster) run its modules by name, `python -m mpiray...`, with the
rank's own interpreter. Where mpiray is installed (site-packages) they find it as the rank did; a rank
that found it otherwise (a checkout: `python start_ray.py`, `python -m mpiray` in it, or an editable
install's import hook) gives its helpers the dir that holds it on PYTHONPATH.

The driver that runs the trainer beside mpiray (`python -m train`, the default) finds it the same way: a
batch script runs it from the submit dir, where a checkout's train/ is not on the path.

The rank's guard is the one helper run by its path (host/processes.py): it runs isolated (`python -I -S`,
~20 ms to start, nothing of the user's environment), where no package can be found by name.
"""

from __future__ import annotations

import functools
import importlib.machinery
import os
import sys
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent  # the mpiray package
PARENT = ROOT.parent  # the directory that holds it: site-packages, or a checkout
TRAINER = "train"  # the RLlib trainer's package, beside mpiray in a checkout and when installed


def module_command(module: str, python: str = sys.executable) -> list[str]:
    """How a helper process runs `module` (e.g. "mpiray.raynode.starter"). Python 3.11+ is given -P:
    the helper's cwd (the user's) is not put first on its path, where a file named like a module of
    the standard library or of Ray would be imported instead."""
    safe_path = ["-P"] if sys.version_info >= (3, 11) else []
    return [python, *safe_path, "-m", module]


def found_without_help(package: str = "mpiray") -> bool:
    """Whether a new interpreter of this Python finds this mpiray (or the package beside it) by itself: on
    its path without the first entry (the running script's dir or the cwd, which a helper does not share),
    or through an import hook that every interpreter installs (an editable install's)."""
    here = os.path.realpath(PARENT / package / "__init__.py")
    finders: list[Callable[[], ModuleSpec | None]] = [
        lambda: importlib.machinery.PathFinder.find_spec(package, [p for p in sys.path[1:] if p])]
    finders += [functools.partial(f.find_spec, package, None) for f in sys.meta_path
                if f is not importlib.machinery.PathFinder and hasattr(f, "find_spec")]
    for find in finders:
        try:
            spec = find()
        except Exception:  # a foreign finder that cannot answer: ask the next
            continue
        if spec is not None and spec.origin and os.path.realpath(spec.origin) == here:
            return True
    return False


def helper_env(environ: dict[str, str], package: str = "mpiray") -> dict[str, str]:
    """environ, plus what a helper needs to import mpiray (or the package beside it): PARENT first on
    PYTHONPATH where a new interpreter would not find it by itself (so never site-packages, which would
    then come before the standard library in the helper's path, nor an editable install's checkout)."""
    env = dict(environ)
    if not found_without_help(package):
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PARENT), env.get("PYTHONPATH", "")]))
    return env


def runs_trainer(command: list[str]) -> bool:
    """Whether a driver command runs the trainer: `python -m train ...` (the default driver's form)."""
    return any(arg == "-m" and following == TRAINER for arg, following in zip(command, command[1:]))


def driver_env(environ: dict[str, str], command: list[str]) -> dict[str, str]:
    """The driver's environment: a driver that runs the trainer beside mpiray finds it as helpers find
    mpiray (from a batch script's submit dir, a checkout's train/ is not on the path); any other driver
    gets environ as it is. A `train` of the user's own in the driver's cwd still comes first (python -m)."""
    if runs_trainer(command) and (PARENT / TRAINER / "__init__.py").exists():
        return helper_env(environ, TRAINER)
    return dict(environ)
