#!/usr/bin/env python3
"""Ray from a container image against the same job bare: a whole 3-host job, and the image's start per node.

    .venv/bin/bash tests/benchmarks/run bench_container [--repeats 3] [--out tests/benchmarks]

On the 3-host Slurm testbed (root; brought up if need be), interleaved, each repeat, the image built and cached
beforehand (tests/containers/image.sh; podman's in its storage):
1. bare (the reference): `srun -N3 start_ray.py -- python -c "import ray; ray.init()"`, Ray from the venv;
2. the same job with `--container charliecloud:IMAGE`, and with `--container podman:IMAGE` (the driver runs
   `python3` in the image): srun's start to its end, nodes, driver and teardown included;
3. the image's start on one node alone: `ch-run IMAGE -- true` and `podman run --rm IMAGE true` in a host's
   network namespace, median of 5.
Prints a table and writes container_report.md / container_report.json in docs/reports/. Goal: each image's job
within 1.2x the bare one.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from containers.images import IMAGE_SCRIPT, runtime_env
from elastic_measures import interleave, row, table
from harness import REPORTS, write_report
from slurm import testbed

ROOT = Path(__file__).resolve().parents[2]

PYTHON = sys.executable
START_RAY = str(ROOT / "start_ray.py")
DRIVER = "import ray; ray.init(); assert len(ray.nodes()) == 3"
JOB_TIMEOUT_S = 300


def image(runtime: str) -> str:
    result = subprocess.run(["bash", str(IMAGE_SCRIPT), runtime], capture_output=True, text=True, timeout=900,
                            cwd=ROOT, env={**os.environ, **runtime_env(runtime)}, check=True)
    return result.stdout.strip().splitlines()[-1]


def job(bed, scratch: Path, runtime: str | None, reference: str | None) -> dict:
    container = ["--container", f"{runtime}:{reference}"] if runtime else []
    python = "python3" if runtime else PYTHON
    env = bed.env({**os.environ, **(runtime_env(runtime) if runtime else {})})
    started = time.monotonic()
    result = bed.run(["srun", "-N3", "--ntasks-per-node=1", "--cpus-per-task=2", "--mpi=pmi2", f"--chdir={scratch}",
                      PYTHON, START_RAY, "--log-dir", str(scratch / "logs"), *container, "--", python, "-c", DRIVER],
                     env=env, timeout=JOB_TIMEOUT_S)
    if result.returncode != 0:
        raise RuntimeError(f"the {runtime or 'bare'} job failed: {result.stdout[-2000:]}{result.stderr[-2000:]}")
    return {"job_s": round(time.monotonic() - started, 2)}


def image_start_s(bed, runtime: str, reference: str, repeats: int = 5) -> float:
    """One start of the image on a host, nothing else: what each node's `ray start` pays for the runtime."""
    node = bed.nodes[0]
    command = (["ch-run", reference, "--", "true"] if runtime == "charliecloud" else
               ["podman", "run", "--rm", "--network=host", reference, "true"])
    times = []
    for _ in range(repeats):
        started = time.monotonic()
        subprocess.run(node.command(command), env={**os.environ, **runtime_env(runtime)}, check=True,
                       capture_output=True, timeout=120)
        times.append(time.monotonic() - started)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPORTS)
    args = parser.parse_args()
    references = {runtime: image(runtime) for runtime in ("charliecloud", "podman")}
    bed = testbed.up()
    with tempfile.TemporaryDirectory(prefix="mpiray-bench-container-", dir=testbed.SHARED_DIR) as tmp:
        scratch = Path(tmp)
        measures = {"bare": lambda: job(bed, scratch, None, None)}
        measures.update({runtime: (lambda runtime=runtime: job(bed, scratch, runtime, references[runtime]))
                         for runtime in references})
        runs = interleave(measures, args.repeats, lambda: [])
        starts = {runtime: image_start_s(bed, runtime, reference) for runtime, reference in references.items()}
    medians = {name: statistics.median(run["job_s"] for run in results) for name, results in runs.items()}
    reference = medians["bare"]
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "repeats": args.repeats, "runs": runs,
              "medians_s": medians, "image_start_s": starts,
              "ratios": {name: round(value / reference, 2) for name, value in medians.items()}}
    rows = table([
        row("bare: Ray from the venv, srun -N3 start to end (3 nodes, driver, teardown)", reference, reference),
        *(row(f"`--container {runtime}:...`: the same job, Ray and the driver in the image", medians[runtime],
              reference, at_most=1.2) for runtime in references),
        *(row(f"{runtime}: one start of the image on a node (`true`), median of 5", starts[runtime], reference)
          for runtime in references),
    ], ratio_to="bare")
    text = "\n".join([
        "# Ray from a container image: the whole job against the same job bare", "",
        f"{report['date']} on the 3-host Slurm testbed (2 CPUs in all), median of {args.repeats} interleaved repeats, "
        f"`tests/benchmarks/bench_container.py`; the image (Debian 12's Python 3.11.2, Ray 2.60) built beforehand, "
        f"podman's imported into its storage.", "", *rows, "",
        "Every run: " + "; ".join(f"{name} " + ", ".join(str(run["job_s"]) for run in results)
                                  for name, results in runs.items()), ""])
    print(text)
    write_report(args.out, "container", text, report, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
