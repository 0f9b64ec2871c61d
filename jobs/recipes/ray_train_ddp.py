"""Ray Train under mpiray: PyTorch DDP on CPUs (gloo), one training worker per node of the job.

    mpirun -np 3 python start_ray.py --dashboard -- python jobs/recipes/ray_train_ddp.py --workers 3
    MPIRAY_DASHBOARD=1 sbatch -N 3 jobs/slurm_multi_node.sh python jobs/recipes/ray_train_ddp.py --workers 3

The dashboard: Ray Train 2.60 asks Ray's State API, which the dashboard serves, about its controller actor; without
it, the driver's output fills with "Failed to query Ray Train Controller actor state".

What mpiray gives it, and nothing here sets by hand:
- RAY_ADDRESS: `TorchTrainer.fit()` runs on the job's cluster;
- GLOO_SOCKET_IFNAME on every node: DDP's gloo all-reduces over the job's network (--interface, --site), not
  over whatever the host name resolves to;
- one `mpiray_learner_slot` per node (per GPU on GPU nodes): asking one per worker puts one worker on each node.
Fits a line y = 3x + 1, each worker on its own shard, saves the model as a checkpoint, and prints
`RECIPE {json}`: every worker's node, its weights after training (equal on all workers: DDP kept them in
step), the loss and the checkpoint's path.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

import ray
import torch
import torch.distributed as dist
from ray import train
from ray.train import Checkpoint, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer, prepare_model


def train_loop(config: dict) -> None:
    rank = train.get_context().get_world_rank()
    generator = torch.Generator().manual_seed(rank)  # each worker its own shard of the data
    x = torch.rand(256, 1, generator=generator)
    y = 3 * x + 1
    torch.manual_seed(0)
    model = prepare_model(torch.nn.Linear(1, 1))  # DistributedDataParallel over gloo when there are 2+ workers
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
    losses = []
    for _ in range(config["steps"]):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()  # DDP averages the gradients of all workers here
        optimizer.step()
        losses.append(loss.item())
    weight, bias = (parameter.item() for parameter in model.parameters())
    mine = {"rank": rank, "node": ray.util.get_node_ip_address(), "weight": weight, "bias": bias,
            "first_loss": losses[0], "last_loss": losses[-1], "gloo": os.environ.get("GLOO_SOCKET_IFNAME")}
    workers = [mine]
    if dist.is_initialized():
        workers = [None] * dist.get_world_size()
        dist.all_gather_object(workers, mine)
    with tempfile.TemporaryDirectory() as saved:
        # Rank 0 saves the model; Ray Train copies it to the storage path, which all nodes share.
        checkpoint = None
        if rank == 0:
            torch.save(model.state_dict(), os.path.join(saved, "model.pt"))
            checkpoint = Checkpoint.from_directory(saved)
        train.report({"workers": json.dumps(workers)}, checkpoint=checkpoint)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="training workers, one per node (default: 2)")
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps (default: 200)")
    parser.add_argument("--storage-path", default=os.path.abspath("results"),
                        help="where Ray Train keeps the run; shared by all nodes (default: ./results)")
    args = parser.parse_args()
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={"lr": 0.5, "steps": args.steps},
        scaling_config=ScalingConfig(num_workers=args.workers,
                                     resources_per_worker={"CPU": 1, "mpiray_learner_slot": 1}),
        run_config=RunConfig(name="ray_train_ddp", storage_path=args.storage_path),
    )
    result = trainer.fit()
    print("RECIPE " + json.dumps({"workers": json.loads(result.metrics["workers"]),
                                  "checkpoint": result.checkpoint.path}), flush=True)


if __name__ == "__main__":
    main()
