"""A driver for the elastic-cluster tests: `elastic_driver.py MODE ...`, prints `ELASTIC {json}` lines.

    wait-nodes N MARKER   wait until N nodes are alive, run a task on each (READY), then wait for MARKER
    spread N              a STRICT_SPREAD placement group of N 1-CPU bundles: wait until it is ready
                          (Ray's autoscaler must add the nodes), then run a task in each bundle
    count                 the cluster's alive nodes (what `mpiray attach` drivers print)
    tune STORAGE LINGER   a Tune run of 6 one-CPU trials, then LINGER idle seconds (the cooldown ends nodes)
    tasks                 8 one-CPU tasks of 20 s, retried if their node goes
    busy MARKER           keep 6 one-CPU tasks of 5 s in flight (retried if their node goes) until MARKER exists
"""

import json
import sys
import time
from pathlib import Path

import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

ray.init()
mode = sys.argv[1]


def say(**fields) -> None:
    print("ELASTIC " + json.dumps(fields), flush=True)


@ray.remote(num_cpus=0)
def where() -> str:
    return ray.get_runtime_context().get_node_id()


@ray.remote(num_cpus=1)
def busy_where(seconds: float) -> str:
    time.sleep(seconds)
    return ray.get_runtime_context().get_node_id()


def alive() -> list[str]:
    return [node["NodeID"] for node in ray.nodes() if node["Alive"]]


if mode == "wait-nodes":
    want, marker = int(sys.argv[2]), Path(sys.argv[3])
    deadline = time.monotonic() + 240
    while len(alive()) < want and time.monotonic() < deadline:
        time.sleep(0.5)
    nodes = alive()
    ran = ray.get([where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote()
                   for n in nodes], timeout=120)
    say(ready=len(nodes), ran_on=len(set(ran)))
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
elif mode == "spread":
    bundles = int(sys.argv[2])
    started = time.monotonic()
    group = placement_group([{"CPU": 1}] * bundles, strategy="STRICT_SPREAD")
    ready = group.wait(timeout_seconds=300)
    say(placement_group_ready=ready, seconds=round(time.monotonic() - started, 1), nodes=len(alive()))
    if not ready:
        sys.exit(1)
    ran = ray.get([busy_where.options(scheduling_strategy=PlacementGroupSchedulingStrategy(group, i)).remote(0.5)
                   for i in range(bundles)], timeout=120)
    say(ran_on=len(set(ran)))
    if len(sys.argv) > 3:  # hold the cluster this long (the tests stop its job meanwhile)
        time.sleep(float(sys.argv[3]))
elif mode == "count":
    say(nodes=len(alive()), cpus=ray.cluster_resources().get("CPU", 0))
elif mode == "tune":
    # 6 trials of 1 CPU, 8 s each: more than the head's 2 CPUs; the best trial is the same on any cluster.
    from ray import tune

    def trainable(config):
        time.sleep(8)
        tune.report({"score": -(config["x"] - 3) ** 2, "node": ray.get_runtime_context().get_node_id()})

    started = time.monotonic()
    tuner = tune.Tuner(tune.with_resources(trainable, {"cpu": 1}),
                       param_space={"x": tune.grid_search([0, 1, 2, 3, 4, 5])},
                       tune_config=tune.TuneConfig(metric="score", mode="max"),
                       run_config=tune.RunConfig(storage_path=sys.argv[2], verbose=0))
    results = tuner.fit()
    best = results.get_best_result()
    say(best_x=best.config["x"], trials=len(results), errors=len(results.errors),
        nodes_used=len({r.metrics["node"] for r in results}), seconds=round(time.monotonic() - started, 1))
    # Stay with nothing to do until the autoscaler has ended the idle worker jobs (after the cooldown), at most
    # the given seconds.
    deadline = time.monotonic() + float(sys.argv[3])
    while len(alive()) > 1 and time.monotonic() < deadline:
        time.sleep(1)
    say(nodes_at_the_end=len(alive()))
elif mode == "tasks":
    # 8 tasks of 1 CPU, 20 s each, retried if their node goes: they finish however many nodes come and go.
    @ray.remote(num_cpus=1, max_retries=5)
    def work(i: int) -> int:
        time.sleep(20)
        return i * i

    started = time.monotonic()
    refs = [work.remote(i) for i in range(8)]
    say(submitted=8)
    total = sum(ray.get(refs, timeout=600))
    say(total=total, seconds=round(time.monotonic() - started, 1))
elif mode == "busy":
    # Demand that lasts: 6 one-CPU tasks in flight (more than the head's 2 CPUs) until the test says stop.
    @ray.remote(num_cpus=1, max_retries=5)
    def step() -> int:
        time.sleep(5)
        return 1

    marker, deadline = Path(sys.argv[2]), time.monotonic() + 600
    running, done = [step.remote() for _ in range(6)], 0
    while not marker.exists() and time.monotonic() < deadline:
        finished, running = ray.wait(running, num_returns=1, timeout=1)
        done += sum(ray.get(finished, timeout=60))
        running += [step.remote() for _ in finished]
    done += sum(ray.get(running, timeout=600))
    say(done=done, stopped_by_marker=marker.exists())
