"""Ray from the site's container image: every `ray start`, and the driver, run inside it; the MPI rank (mpi4py,
the process manager's PMI, mpiray) stays on the host, which needs no Ray (`--container KIND:IMAGE`).

Each runtime's command line is built here by a pure function (tested as lists against the runtime's documented
usage). What every runtime gets, whichever it is:
- the same paths inside as outside: the rank's private dir (Ray's temp dir and the token), the job's spill dir,
  and mpiray's own code (bound read-only into the private dir, where a helper finds it by PYTHONPATH);
- the environment: Apptainer, Singularity, Charliecloud and Shifter pass the host's on by themselves; podman
  and enroot pass none, so each variable the node's environment holds that Ray, the collectives, the GPUs or
  mpiray read is named to them (FORWARDED), never a value on the command line (the token is a file);
- the host's network, PID space and /dev/shm (podman: --network/--pid/--ipc host; the others share them).
How a rank knows its node is ALIVE does not change: starter.py runs inside the image, beside Ray, and prints
the node's GCS record into the node's output, which the rank reads on the host.

podman runs the container under its own monitor (conmon), not under the rank: each node's container has a
name of its own (mpiray-JOB-rRANK), and the rank's teardown, or its guard after a kill -9, removes it by name.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from mpiray.config import Config
from mpiray.errors import ImageFailed

# The runtimes, and whether each passes the host's environment on by itself.
KINDS = {"apptainer": True, "singularity": True, "charliecloud": True, "shifter": True,
         "podman": False, "podman-hpc": False, "enroot": False}
# What a runtime that passes nothing by itself is told to pass: Ray's, mpiray's, the collectives', the GPUs',
# the fabric's and Python's own variables.
FORWARDED_PREFIXES = ("RAY_", "MPIRAY_", "GLOO_", "NCCL_", "TP_", "CCL_", "FI_", "UCX_", "ZE_", "ONEAPI_", "HIP_",
                      "ROCR_", "CUDA_", "GPU_DEVICE_ORDINAL", "PYTHON", "OMP_", "GRPC_", "DASHBOARD_METRIC_PORT",
                      "AUTOSCALER_", "TMPDIR", "HOME", "USER", "LANG", "LC_")
CODE_DIR = "code"  # in the rank's private dir: mpiray's package (and the trainer's) bound there read-only


def of(config: Config) -> Container | None:
    """The job's container (--container, --container-flags), or None: Ray from the ranks' own environment."""
    return parse(config.container, config.container_flags) if config.container else None


@dataclass(frozen=True)
class Bind:
    source: str  # on the host
    target: str  # inside the image: the same path, but for mpiray's code
    read_only: bool = False

    @property
    def spec(self) -> str:
        """SRC:DST[:ro], as podman, Apptainer, Shifter and enroot write a bind."""
        return f"{self.source}:{self.target}" + (":ro" if self.read_only else "")


@dataclass(frozen=True)
class Container:
    """A runtime and its image; flags: the runtime's own extra options (--container-flags), as it takes them."""

    kind: str
    image: str
    flags: tuple[str, ...] = ()
    python: str = "python3"  # the image's interpreter

    @property
    def reference(self) -> str:
        return f"{self.kind}:{self.image}"

    @property
    def named(self) -> bool:
        """Whether its containers outlive their client (podman's conmon), so they are removed by name."""
        return self.kind in ("podman", "podman-hpc")

    def monitor_pidfile(self, private: Path, name: str) -> Path | None:
        """Where podman's container monitor (conmon) writes its PID, in the rank's private dir (None: no monitor)."""
        return private / f"{name}.conmon.pid" if self.named else None

    def command(self, argv: Sequence[str], binds: Sequence[Bind], env: Mapping[str, str], name: str,
                *, monitor_pidfile: Path | None = None) -> list[str]:
        """argv run inside the image: binds, env the environment argv is started with (podman and enroot are
        told its forwarded names), name the container's (podman's --name), monitor_pidfile podman's conmon's."""
        mounts = [bind.spec for bind in binds]
        passed = [] if KINDS[self.kind] else [n for n in sorted(env) if n.startswith(FORWARDED_PREFIXES)]
        flags = list(self.flags)
        if self.kind in ("apptainer", "singularity"):
            # exec shares the host's network, PIDs, /dev/shm and environment; --bind a,b,c.
            return [self.kind, "exec", *(["--bind", ",".join(mounts)] if mounts else []), *flags, self.image, *argv]
        if self.kind == "charliecloud":
            # ch-run: the process tree stays the caller's; a bind's target must exist in the image or below its /tmp.
            # That /tmp is the host's $TMPDIR where one is set (and TMPDIR is unset inside), so a private dir in a
            # TMPDIR below /tmp (Kestrel's /tmp/scratch/JOBID) would have no same path inside: started without
            # TMPDIR, ch-run binds the host's /tmp there, and every path below it is the same inside as outside.
            return ["env", "-u", "TMPDIR", "ch-run", *(f"--bind={bind.source}:{bind.target}" for bind in binds),
                    *flags, self.image, "--", *argv]
        if self.kind == "shifter":
            return ["shifter", f"--image={self.image}", *(f"--volume={m}" for m in mounts), *flags, *argv]
        if self.kind == "enroot":
            return ["enroot", "start", *(f"--mount={m}" for m in mounts), *(f"--env={n}" for n in passed), *flags,
                    self.image, *argv]
        # podman, podman-hpc: a container of its own name, on the host's network, PIDs and /dev/shm; the
        # client forwards signals to it (--sig-proxy, the default), its stdin (the starter waits on it: -i) and
        # its output, and is the rank's child.
        monitor = [f"--conmon-pidfile={monitor_pidfile}"] if monitor_pidfile else []
        return [self.kind, "run", "--rm", "--interactive", f"--name={name}", *monitor, "--network=host", "--pid=host",
                "--ipc=host",
                *(f"--volume={m}" for m in mounts), *(f"--env={n}" for n in passed), *flags, self.image, *argv]

    def remove_command(self, name: str) -> list[str]:
        """What removes a named container (podman's) that its client left: at teardown and by the guard."""
        return [self.kind, "rm", "--force", "--time=0", name]


def parse(text: str, flags: str | None = None, python: str = "python3") -> Container:
    """'KIND:IMAGE' (--container, MPIRAY_CONTAINER) and --container-flags' text -> a Container.
    Raises ValueError saying what to give instead."""
    kind, sep, image = text.partition(":")
    if not sep or not image.strip():
        raise ValueError(f"not KIND:IMAGE: {text!r} (e.g. apptainer:/path/ray.sif or podman:localhost/ray:2.60)")
    if kind not in KINDS:
        raise ValueError(f"{kind!r} is no container runtime mpiray knows: give one of {', '.join(KINDS)}")
    return Container(kind, image.strip(), tuple(shlex.split(flags or "")), python)


def container_name(job_id: str, rank: int) -> str:
    """One container per job and rank: a later job never reuses an earlier one's (podman's --name)."""
    safe = "".join(c if c.isalnum() or c in "_.-" else "-" for c in job_id)
    return f"mpiray-{safe}-r{rank}"


# Run inside the image by the pre-flight (each rank, before any node starts): its Python and Ray, read from Ray's
# files as raycompat.ray_version does (no import of Ray), and what commands.NodeSpec needs of it.
_PROBE = """
import importlib.util, json, pathlib, re, sys
def has(name):
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
spec, ray, checks_token = importlib.util.find_spec("ray"), "not installed", False
if spec is not None and spec.origin:
    found = re.search(r'^version = "([^"]+)"', pathlib.Path(spec.origin).with_name("_version.py").read_text(), re.M)
    ray = found.group(1) if found else "unknown"
    try:  # raycompat.dashboard_checks_token(), read in the image
        head = pathlib.Path(spec.origin).parent / "dashboard" / "http_server_head.py"
        checks_token = "get_token_auth_middleware" in head.read_text()
    except OSError:
        pass
import os
try:
    fs = os.statvfs("/dev/shm")
    shm = [fs.f_bavail * fs.f_frsize, fs.f_blocks * fs.f_frsize]
except OSError:
    shm = [0, 0]
print("mpiray-image " + json.dumps({"python": sys.version.split()[0], "ray": ray,
      "full_agent": all(has(m) for m in MODULES), "ray_client": has("grpc"), "shm": shm,
      "dashboard_checks_token": checks_token}))
"""
PROBE_TIMEOUT = 120.0  # an image's first start on a node (Apptainer's SIF mount, podman's storage) can be slow


@dataclass(frozen=True)
class ImageFacts:
    """What the image runs: the versions the pre-flight compares, and what a node's `ray start` line needs."""

    python: str
    ray: str
    full_agent: bool  # ray[default]: each node's dashboard agent serves metrics
    ray_client: bool  # grpcio: the head serves Ray Client
    shm: tuple[int, int] = (0, 0)  # /dev/shm as the image sees it: bytes free, in all (its object store lives there)
    dashboard_checks_token: bool = False  # its Ray's dashboard asks every request for the token (raycompat's)


def probe(box: Container, name: str, agent_modules: Sequence[str], timeout: float = PROBE_TIMEOUT) -> ImageFacts:
    """Start the image once on this host and read what it runs. Raises ImageFailed with the runtime's own words
    when the runtime or the image does not run here."""
    code = f"MODULES = {tuple(agent_modules)!r}\n{_PROBE}"
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}  # the host's paths mean nothing there
    argv = box.command([box.python, "-c", code], (), env, name)
    try:
        result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise ImageFailed(f"{argv[0]}: no such command here (is the {box.kind} module loaded?)") from None
    except subprocess.TimeoutExpired:
        if box.named:
            subprocess.run(box.remove_command(name), capture_output=True, timeout=timeout)
        raise ImageFailed(f"{box.reference} did not start within {timeout:g} s") from None
    line = next((ln for ln in result.stdout.splitlines() if ln.startswith("mpiray-image ")), None)
    if result.returncode != 0 or line is None:
        said = (result.stderr.strip() or result.stdout.strip())[-600:] or "nothing"
        raise ImageFailed(f"{box.reference} did not run (exit code {result.returncode}): {said}")
    facts = json.loads(line[len("mpiray-image "):])
    return ImageFacts(**{**facts, "shm": tuple(facts.get("shm", (0, 0)))})
