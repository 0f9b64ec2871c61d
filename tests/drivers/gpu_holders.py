"""A driver for the GPU vendor tests: one actor per GPU of the cluster, all holding theirs at once, each
reporting the visible-device variables it sees; then two learner-shaped actors (one GPU and one learner slot
each, as the trainer's learners ask; one on a one-GPU cluster). Prints `GPUS {json}`."""

import json
import os

import ray

VARIABLES = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL",
             "ZE_AFFINITY_MASK", "ONEAPI_DEVICE_SELECTOR")


@ray.remote(num_cpus=0, num_gpus=1)
class Holder:
    def seen(self):
        return {"node": ray.get_runtime_context().get_node_id(), "ray_ids": [str(i) for i in ray.get_gpu_ids()],
                **{name: os.environ.get(name) for name in VARIABLES}}


ray.init()
total = int(ray.cluster_resources().get("GPU", 0))
holders = [Holder.remote() for _ in range(total)]
seen = ray.get([holder.seen.remote() for holder in holders], timeout=120)
for holder in holders:
    ray.kill(holder)
learners = [Holder.options(resources={"mpiray_learner_slot": 1}).remote() for _ in range(min(2, total))]
learned = ray.get([learner.seen.remote() for learner in learners], timeout=120)
print("GPUS " + json.dumps({"total": total, "holders": seen, "learners": learned}), flush=True)
