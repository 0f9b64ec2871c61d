"""What the two test beds (tests/slurm/testbed.py, tests/pbs/testbed.py) share of their lives, around each bed's own
steps: bring_up (a crashed run's leftovers down first, then the bed's start; a failed start's logs kept and the bed
down again, unless MPIRAYTEST_KEEP_TESTBED=1), save_logs, the state dir that is the bed's alone (check_ours,
remove_state), and the status lines of its network. netns.py has the hosts, the network and the daemons."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable, Iterable, Protocol

from netns import Node, TestbedError, link_exists, processes_on, remove_stale_mpich_segments

KEEP_ENV = "MPIRAYTEST_KEEP_TESTBED"


class Bed(Protocol):
    """What the shared steps read of a bed's layout (each module's Testbed)."""

    state_dir: Path
    nodes: tuple[Node, ...]


def bring_up(bed: Bed, start: Callable[[], None], down: Callable[[], None], logs: Callable[[], Iterable[Path]]) -> None:
    """start() the bed after down() took away what a crashed run left; if the start fails, the logs (logs(): files
    and dirs) are kept beside the state dir, the bed goes down again, and the error says where the logs are."""
    down()
    remove_stale_mpich_segments()
    try:
        start()
    except BaseException as error:
        if os.environ.get(KEEP_ENV) == "1":
            raise
        saved = save_logs(bed.state_dir, logs())
        down()
        if isinstance(error, TestbedError):
            raise TestbedError(f"{error}\n(the testbed is down again; logs copied to {saved}, "
                               f"or set {KEEP_ENV}=1 to leave it up)") from error
        raise


def save_logs(state_dir: Path, logs: Iterable[Path]) -> Path:
    """The logs an error names, copied where they outlive the teardown that follows a failed start: STATE-failed-logs,
    each at its path under the state dir (or by its name)."""
    saved = Path(f"{state_dir}-failed-logs")
    shutil.rmtree(saved, ignore_errors=True)
    saved.mkdir(parents=True)
    for log in logs:
        target = saved / (log.relative_to(state_dir) if log.is_relative_to(state_dir) else log.name)
        if log.is_dir():
            shutil.copytree(log, target, dirs_exist_ok=True)
        elif log.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(log, target)
    return saved


def check_ours(state_dir: Path, marker: str) -> None:
    """Never touch a state dir the bed did not make (it holds the bed's marker file), unless it is empty."""
    if state_dir.exists() and not (state_dir / marker).exists() and any(state_dir.iterdir()):
        raise TestbedError(f"{state_dir} is not a testbed state directory; not touching it")


def remove_state(state_dir: Path, marker: str) -> None:
    """The state dir, last of a bed's teardown."""
    check_ours(state_dir, marker)
    if state_dir.exists():
        shutil.rmtree(state_dir)


def network_lines(bed: Bed, bridges: tuple[str, ...]) -> list[str]:
    """The status of the bed's bridges and hosts, a line each."""
    lines = [f"bridge {bridge}: {'present' if link_exists(bridge) else 'absent'}" for bridge in bridges]
    for node in bed.nodes:
        present = node.netns_path.exists()
        extra = f", {len(processes_on(node))} processes" if present else ""
        lines.append(f"netns {node.name} ({node.ip}, hsn0 {node.hsn_ip}): {'present' if present else 'absent'}{extra}")
    return lines
