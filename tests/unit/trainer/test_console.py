"""The console of a run (train/console.py): Ray's internal notices named once and filtered, everything
put back after."""

from __future__ import annotations

import re

# Lines as Ray prints them on a launched PPO run (driver, and actors through the log monitor).
RAY_INTERNAL_LINES = [
    "2026-11-23 15:37:41,517\tWARNING algorithm_config.py:5160 -- You are running PPO on the new API stack! "
    "This is the new default behavior for this algorithm.",
    "(PPO pid=350) [2026-11-23 15:37:44,196 E 350 350] core_worker.cc:2465: Actor with class name: "
    "'SingleAgentEnvRunner' and ID: '13d56eacea7187fa0e32baa701000000' has constructor arguments in the object "
    "store and max_restarts > 0. If the arguments in the object store go out of scope or are lost, the actor "
    "restart will fail.",
    "(SingleAgentEnvRunner pid=398) DeprecationWarning: `RLModule(config=[RLModuleConfig object])` has been "
    "deprecated. Use `RLModule(observation_space=.., action_space=..)` instead.",
    "(PPO pid=350) Install gputil for GPU system monitoring.",
    "(PPO(env=BasicEnv; env-runners=1) pid=350) Checkpoint successfully created at: Checkpoint(filesystem=local, "
    "path=/tmp/results/x/checkpoint_000000)",
    # --wandb: Ray's W&B logging actor, and W&B's console in it
    "[2026-11-28 06:30:05,589 E 15030 15030] core_worker.cc:2465: Actor with class name: '_WandbLoggingActor' and "
    "ID: '805b1d71cf39ceac2817da6601000000' has constructor arguments in the object store and max_restarts > 0.",
    "(_WandbLoggingActor pid=15353) wandb: Run data is saved locally in /tmp/r/t1/wandb/offline-run-2026_00000",
    "(_WandbLoggingActor pid=15353) wandb:      env_runners/env_step_timer █▁",
]


def test_every_internal_notice_is_named_once_and_only_those_lines_match():
    from train import console

    for line in RAY_INTERNAL_LINES:
        assert sum(re.search(pattern, line) is not None for _, pattern in console.INTERNAL_NOTICES) == 1, line
        assert console.is_internal_notice(line)
    for kept in ["[train] abc iter 3 | 1200 env steps | return 1.000 (min 1.000, max 1.000) | 4.2 s",
                 "DeprecationWarning: `my_env.step()` has been deprecated.",
                 "(PPO pid=350) WARNING env.py:1 -- my env warns", "Actor with class name: 'MyActor' and ID: 'x' "
                 "has constructor arguments in the object store and max_restarts > 0",
                 "(_WandbLoggingActor pid=15353) wandb: ERROR Run initialization has timed out"]:
        assert not console.is_internal_notice(kept), kept


def test_quiet_filters_this_process_and_tells_ray_then_puts_everything_back(caplog):
    import logging

    from train import console

    environ = {console.SKIP_VARIABLE: "mine"}
    rllib = logging.getLogger("ray.rllib.algorithms.algorithm_config")
    with console.quiet(environ):
        assert re.search(environ[console.SKIP_VARIABLE], "mine") and re.search(
            environ[console.SKIP_VARIABLE], RAY_INTERNAL_LINES[3])
        assert environ[console.NEW_OUTPUT_VARIABLE] == "0"
        rllib.warning("You are running PPO on the new API stack! This is the new default")
        rllib.warning("a warning of its own")
    rllib.warning("You are running DQN on the new API stack! again")
    assert environ == {console.SKIP_VARIABLE: "mine"}
    assert [record.getMessage()[:20] for record in caplog.records] == ["a warning of its own", "You are running DQN "]
