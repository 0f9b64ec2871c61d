"""Ray Tune under mpiray: a grid search whose trials run on every node of the job.

    mpirun -np 3 python start_ray.py -- python jobs/recipes/ray_tune_search.py
    sbatch -N 3 jobs/slurm_multi_node.sh python jobs/recipes/ray_tune_search.py

What mpiray gives it: RAY_ADDRESS (the trials are actors on the job's cluster, one CPU each, as many at once as
the nodes have CPUs) and RAY_TMPDIR (Tune's file locks in the rank's private dir, not /tmp/_ray_lockfiles, which
other users' jobs share). The storage path must be on a file system every node shares. A trial that fails
fails the job (exit code 1).
Maximises -(x - 2)^2 over x in 0..5 and prints `RECIPE {json}`: the best x, each trial's node, the failures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import ray
from ray import tune


def objective(config: dict) -> None:
    node = ray.util.get_node_ip_address()
    for step in range(config["steps"]):
        time.sleep(config["step_s"])  # stands in for a training step
        tune.report({"score": -(config["x"] - 2) ** 2 - 1 / (step + 1), "node": node})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8, help="reports per trial (default: 8)")
    parser.add_argument("--step-s", type=float, default=1.0, help="seconds per step (default: 1)")
    parser.add_argument("--storage-path", default=os.path.abspath("results"),
                        help="where Tune keeps the trials; shared by all nodes (default: ./results)")
    args = parser.parse_args()
    tuner = tune.Tuner(
        tune.with_resources(objective, {"cpu": 1}),
        param_space={"x": tune.grid_search([0, 1, 2, 3, 4, 5]), "steps": args.steps, "step_s": args.step_s},
        tune_config=tune.TuneConfig(metric="score", mode="max"),
        run_config=tune.RunConfig(name="ray_tune_search", storage_path=args.storage_path,
                                  verbose=0),
    )
    results = tuner.fit()
    best = results.get_best_result()
    print("RECIPE " + json.dumps({
        "best_x": best.config["x"], "trials": len(results), "errors": len(results.errors),
        "nodes": sorted({result.metrics["node"] for result in results if result.metrics}),
    }), flush=True)
    return 1 if results.errors else 0


if __name__ == "__main__":
    sys.exit(main())
