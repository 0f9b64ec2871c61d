"""Ray Train on a cluster of fixed size that loses a node mid-run: TorchTrainer with --workers workers, one learner
slot each (so one per node), FailureConfig(max_failures=1), a checkpoint at every step. Each attempt's workers
record where they run and the step they resumed from in --record (a shared dir); rank 0's worker prints
`STEP n` as it goes. At the end: `SPARE {json}` with the last step and the run's error (None), and exit 0.

    python tests/drivers/train_with_spare.py --workers 2 --steps 40 --pause 0.5 --record DIR --storage DIR
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import ray
import torch
from ray import train
from ray.train import Checkpoint, FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer, prepare_model


def loop(config: dict) -> None:
    context = train.get_context()
    rank, start = context.get_world_rank(), 0
    checkpoint = train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as saved, open(os.path.join(saved, "state.json")) as state:
            start = json.load(state)["step"] + 1
    with open(os.path.join(config["record"], f"from-{start}-rank-{rank}.json"), "w") as record:
        json.dump({"node": ray.util.get_node_ip_address(), "resumed_from": start,
                   "world": context.get_world_size()}, record)
    torch.manual_seed(0)
    model = prepare_model(torch.nn.Linear(1, 1))  # DDP over gloo: a lost peer fails the step on the others
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.rand(64, 1)
    for step in range(start, config["steps"]):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), 3 * x + 1).backward()
        optimizer.step()
        time.sleep(config["pause"])
        with tempfile.TemporaryDirectory() as saved:
            checkpoint = None
            if rank == 0:
                with open(os.path.join(saved, "state.json"), "w") as state:
                    json.dump({"step": step}, state)
                checkpoint = Checkpoint.from_directory(saved)
                print(f"STEP {step}", flush=True)
            train.report({"step": step}, checkpoint=checkpoint)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--pause", type=float, required=True)
    parser.add_argument("--record", required=True)
    parser.add_argument("--storage", required=True)
    args = parser.parse_args()
    trainer = TorchTrainer(
        loop, train_loop_config={"steps": args.steps, "pause": args.pause, "record": args.record},
        scaling_config=ScalingConfig(num_workers=args.workers, resources_per_worker={"CPU": 1, "mpiray_learner_slot": 1}),
        run_config=RunConfig(name="spare", storage_path=args.storage, failure_config=FailureConfig(max_failures=1)),
    )
    result = trainer.fit()
    print("SPARE " + json.dumps({"step": result.metrics.get("step"), "error": repr(result.error) if result.error
                                 else None}), flush=True)
    return 0 if result.error is None else 1


if __name__ == "__main__":
    sys.exit(main())
