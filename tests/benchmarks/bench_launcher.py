#!/usr/bin/env python3
"""How fast the launcher brings a Ray cluster up and down, and what it costs, against doing it by hand.

    bash tests/benchmarks/run bench_launcher [--repeats N] [--quick] [--no-slurm] [--out-dir DIR]

The machine may be shared, so absolute times drift: every time is also a ratio to a reference
measured in the same run, and the repeats of all startup measures are interleaved so that a busy
minute hits them alike. Measures:

 1. reference: `ray start --head` then `ray start --address` for one worker, by hand, no sleep
    (both daemonize and return once their node is up): first command to the second's return;
 2. baseline "as users do today": the same with `sleep 10` between head and worker;
 3. the launcher: `mpirun -np N python start_ray.py -- python hello.py` (N = 1, 2, 4) and, on the
    Slurm testbed, `srun -N3 --ntasks-per-node=1 --mpi=pmi2 ...`, with the pre-flight's link check and without
    it (`--slow-link 0`, its reference: what the check costs a 3-host start): start to the driver's first line;
 4. driver exit -> job exit: the driver's last line to mpirun's (srun's) exit; and the processes of
    the job still alive after it (the PIDs the ranks logged as stopped, the job's descendants and
    every process carrying the job's id or temp dir);
 5. CPU of the launcher's rank processes (not Ray's) while a 30 s driver runs;
 6. RLlib PPO on CartPole-v1, env steps/s through `mpirun -np 2 start_ray.py` vs `ray.init(num_cpus=2)`;
 7. memory: RSS (and PSS) of the process tree of an idle Ray worker node started by the launcher.

Writes launcher_report.md and launcher_report.json to --out-dir (default: docs/reports/).
It ends only processes it started, by PID or by the group of a job it started in a session of its own,
with the tests' process control (tests/support/process_control.py): it makes itself a child subreaper, so the
processes that `ray start` daemonizes stay its descendants; it never uses `ray stop` or kills by name.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from mpiray.host.processes import become_subreaper

from harness import (
    JOB_REGISTRY,
    REPORTS,
    Interrupted,
    descendant_pids,
    log,
    median,
    stop_what_we_started,
    write_report,
)
from launcher_costs import IDLE_DRIVER, RLLIB_DRIVER, idle_costs, rllib_throughput
from launcher_timing import BASELINE_SLEEP_S, BY_HAND, HELLO_DRIVER, Where, by_hand, time_launch
from slurm.testbed import SHARED_DIR

HERE = Path(__file__).resolve().parent
TARGETS = {  # measure -> (comparison, bound); "le": value <= bound passes
    "ratio_n2": ("le", 0.7),
    "ratio_n4": ("le", 1.2),
    "exit_s": ("le", 3.0),
    "left": ("le", 0),
    "rank_cpu_pct": ("le", 2.0),
    "rllib_ratio": ("ge", 0.95),
    "link_check_s": ("le", 2.0),  # #50: the link check adds at most 2 s to a 3-host start
}


# Each measure's reference: the by-hand start of as many nodes on the same host (the lean head and the baseline's
# sleep are variants of the 2-node one). The Slurm testbed's run has none in this script.
REFERENCE_OF = {"n1": "by_hand_n1", "n2": "by_hand_n2", "n4": "by_hand_n4", "reference_lean": "by_hand_n2",
                "baseline": "by_hand_n2", "slurm3": "slurm3_no_link_check"}


def verdict(key: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    how, bound = TARGETS[key]
    ok = value <= bound if how == "le" else value >= bound
    return "PASS" if ok else "MISS"


def target_text(key: str) -> str:
    how, bound = TARGETS[key]
    return f"{'≤' if how == 'le' else '≥'} {bound:g}"


def slurm_testbed(enabled: bool, notes: list[str]):
    """(testbed, brought_up_here) or (None, False) with the reason in notes."""
    if not enabled:
        notes.append("Slurm: skipped (--no-slurm)")
        return None, False
    from slurm import testbed

    if testbed.is_up():
        return testbed.up(), False
    reason = testbed.unavailable_reason()
    if reason:
        notes.append(f"Slurm: skipped ({reason})")
        return None, False
    try:
        return testbed.up(), True
    except testbed.TestbedError as error:
        notes.append(f"Slurm: skipped, the testbed did not come up: {error}")
        return None, False


def run_all(args, scratch: Path) -> dict:
    report: dict = {
        "cpu_count": os.cpu_count(),  # the date, host, versions and command: the report's run facts (harness.py)
        "cpu_affinity": len(os.sched_getaffinity(0)),
        "load_average_start": [round(x, 2) for x in os.getloadavg()],
        "repeats": args.repeats,
        "quick": args.quick,
        "notes": [],
        "errors": [],
    }
    for name, text in (("hello.py", HELLO_DRIVER), ("idle.py", IDLE_DRIVER), ("rllib_driver.py", RLLIB_DRIVER)):
        (scratch / name).write_text(text)
    bed, brought_up = slurm_testbed(args.slurm, report["notes"])
    wheres = [Where("n1", 1), Where("n2", 2), Where("n4", 4)]
    if bed is not None:
        wheres += [Where("slurm3", 3, bed), Where("slurm3_no_link_check", 3, bed, ("--slow-link", "0"))]
    # Like for like: each mpirun run's reference starts as many nodes by hand, on the same host, in the same repeat.
    measures = {"by_hand_n1": [], "by_hand_n2": [], "by_hand_n4": [], "reference_lean": [], "baseline": [],
                **{w.name: [] for w in wheres}}
    try:
        # Interleaved: repeat r of every startup measure runs within the same few minutes.
        for repeat in range(args.repeats):
            for name, runs in measures.items():
                log(f"repeat {repeat + 1}/{args.repeats}: {name}")
                try:
                    if name.startswith("by_hand_n"):
                        runs.append(by_hand(scratch, 0.0, nodes=int(name.removeprefix("by_hand_n"))))
                    elif name == "reference_lean":
                        runs.append(by_hand(scratch, 0.0, lean=True))
                    elif name == "baseline":
                        runs.append(by_hand(scratch, BASELINE_SLEEP_S))
                    else:
                        runs.append(time_launch(next(w for w in wheres if w.name == name), scratch))
                    log(f"  {runs[-1]['seconds']:.2f} s")
                except Exception as error:  # noqa: BLE001  (one failed measure must not stop the others)
                    report["errors"].append(f"{name} (repeat {repeat + 1}): {error}")
                    log(f"  ERROR: {error}")
        log(f"idle cluster for {args.idle_seconds:g} s: CPU of the ranks, memory of the nodes")
        try:
            report["idle"] = idle_costs(scratch, args.idle_seconds)
        except Exception as error:  # noqa: BLE001
            report["errors"].append(f"idle: {error}")
            log(f"  ERROR: {error}")
        report["rllib"] = {"launched": [], "standalone": []}
        if args.quick:
            report["notes"].append("RLlib throughput: skipped (--quick)")
        else:
            for repeat in range(args.rllib_repeats):
                for launched in (True, False):
                    which = "launched" if launched else "standalone"
                    log(f"repeat {repeat + 1}/{args.rllib_repeats}: RLlib {which}")
                    try:
                        report["rllib"][which].append(rllib_throughput(scratch, args.rllib_seconds, launched))
                        log(f"  {report['rllib'][which][-1]['steps_per_s']:.0f} env steps/s")
                    except Exception as error:  # noqa: BLE001
                        report["errors"].append(f"rllib {which} (repeat {repeat + 1}): {error}")
                        log(f"  ERROR: {error}")
    finally:
        if brought_up:
            from slurm import testbed

            testbed.down()
            report["notes"].append("Slurm: the testbed was brought up for this run and down again")
    report["runs"] = measures
    report["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    report["summary"] = summarize(report, measures)
    return report


def summarize(report: dict, measures: dict) -> dict:
    seconds = {name: median([r["seconds"] for r in runs]) for name, runs in measures.items()}
    spread = {name: [min(r["seconds"] for r in runs), max(r["seconds"] for r in runs)]
              for name, runs in measures.items() if runs}
    summary = {"median_s": seconds, "min_max_s": spread, "ratio": {}, "exit_s": {}, "exit_s_max": {}, "left": 0,
               "left_by_hand": 0}
    for name, value in seconds.items():  # each to the by-hand start of as many nodes (slurm3: to itself unchecked)
        reference = seconds.get(REFERENCE_OF.get(name, ""))
        if value is not None and reference:
            summary["ratio"][name] = value / reference
    if seconds.get("slurm3") is not None and seconds.get("slurm3_no_link_check") is not None:
        summary["link_check_s"] = seconds["slurm3"] - seconds["slurm3_no_link_check"]
    for name, runs in measures.items():
        if name in BY_HAND:  # Ray's own processes after a by-hand start: not the launcher's to answer for
            summary["left_by_hand"] += sum(len(r["left"]) for r in runs)
            continue
        summary["exit_s"][name] = median([r["exit_after_last_line_s"] for r in runs])
        summary["exit_s_max"][name] = max((r["exit_after_last_line_s"] for r in runs), default=None)
        summary["left"] += sum(len(r["left"]) for r in runs)
    idle = report.get("idle")
    if idle:
        summary["left"] += len(idle["left"])
        summary["rank_cpu_pct_max"] = max(idle["rank_cpu_pct"].values())
    rllib = report.get("rllib", {})
    for which in ("launched", "standalone"):
        summary["left"] += sum(len(r["left"]) for r in rllib.get(which, []))
    launched = median([r["steps_per_s"] for r in rllib.get("launched", [])])
    standalone = median([r["steps_per_s"] for r in rllib.get("standalone", [])])
    summary["rllib_steps_per_s"] = {"launched": launched, "standalone": standalone}
    summary["rllib_ratio"] = launched / standalone if launched and standalone else None
    return summary


def markdown(report: dict) -> str:
    s = report["summary"]
    med, ratio = s["median_s"], s["ratio"]
    rows = []

    def row(measure, shown, rel="", key=None, value=None):
        target = target_text(key) if key else ""
        result = verdict(key, value) if key else ""
        rows.append(f"| {measure} | {shown} | {rel} | {target} | {result} |")

    def sec(x):
        return "n/a" if x is None else f"{x:.2f} s"

    def spread(name):
        low_high = s["min_max_s"].get(name)
        return sec(med.get(name)) + (f" ({low_high[0]:.2f}-{low_high[1]:.2f})" if low_high else "")

    def rel(name):
        return f"{ratio[name]:.2f}×" if name in ratio else "n/a (no by-hand start of these nodes here)"

    for nodes in (1, 2, 4):
        what = "`ray start --head`" + (f", then {nodes - 1}x `ray start --address`" if nodes > 1 else "")
        row(f"1. reference, {nodes} node{'s' if nodes > 1 else ''}: {what} (by hand, no sleep)",
            spread(f"by_hand_n{nodes}"), "1.00×")
    row("1b. the 2-node reference with the launcher's lean head (`--no-monitor`, no dashboard)",
        spread("reference_lean"), rel("reference_lean"))
    row("2. baseline: head, `sleep 10`, worker (2 nodes)", spread("baseline"), rel("baseline"))
    labels = {"n1": "mpirun -np 1", "n2": "mpirun -np 2",
              "n4": "mpirun -np 4 (2-core host)" if os.cpu_count() == 2 else "mpirun -np 4",
              "slurm3": "srun -N3 (Slurm testbed, 3 hosts)",
              "slurm3_no_link_check": "srun -N3 --slow-link 0 (no link check)"}
    keys = {"n2": "ratio_n2", "n4": "ratio_n4"}
    for name in ("n1", "n2", "n4", "slurm3_no_link_check", "slurm3"):
        if name in med:
            row(f"3. launcher start → driver's first line, {labels[name]}", spread(name), rel(name),
                keys.get(name), ratio.get(name))
    if s.get("link_check_s") is not None:
        row("3b. what the link check adds to the 3-host start (difference of the two medians above)",
            sec(s["link_check_s"]), "", "link_check_s", s["link_check_s"])
    for name in ("n1", "n2", "n4", "slurm3_no_link_check", "slurm3"):
        if name in s["exit_s"]:
            worst = s["exit_s_max"][name]
            shown = sec(s["exit_s"][name]) + (f" (max {worst:.2f} s)" if worst is not None else "")
            row(f"4. driver's last line → job exit, {labels[name]}", shown, "", "exit_s", s["exit_s"][name])
    row("4. processes left after the launcher's jobs (all its runs)", str(s["left"]), "", "left", s["left"])
    row("4. processes left after the by-hand starts (all; the harness ends them)", str(s.get("left_by_hand", 0)))
    idle = report.get("idle")
    if idle:
        cpus = ", ".join(f"rank {r}: {v:.2f}%" for r, v in idle["rank_cpu_pct"].items())
        row(f"5. CPU of each rank process during a {idle['driver_seconds']:g} s driver (% of a core; {cpus})",
            f"{s['rank_cpu_pct_max']:.2f}% (max)", "", "rank_cpu_pct", s["rank_cpu_pct_max"])
    else:
        row("5. CPU of the rank processes", "not measured", "")
    rl = s["rllib_steps_per_s"]
    if rl["launched"] and rl["standalone"]:
        row("6. RLlib PPO CartPole env steps/s: `mpirun -np 2 start_ray.py` vs `ray.init(num_cpus=2)`",
            f"{rl['launched']:.0f} vs {rl['standalone']:.0f}", f"{s['rllib_ratio']:.2f}×", "rllib_ratio", s["rllib_ratio"])
    else:
        row("6. RLlib env steps/s", "not measured", "")
    for rank, mem in (idle or {}).get("memory", {}).items():
        what = "idle Ray worker node" if rank != "0" else "Ray head node"
        parts = ", ".join(f"{name} {mib:.0f}" for name, mib in mem["node_rss_mib_by_process"].items())
        row(f"7. memory of rank {rank}'s {what}: process tree ({mem['node_processes']} processes; RSS MiB: {parts})",
            f"RSS {mem['node_tree_rss_mib']:.0f} MiB, PSS {mem['node_tree_pss_mib']:.0f} MiB", "")
        row(f"7. memory of the rank {rank} launcher process itself",
            f"RSS {mem['rank_process_rss_mib']:.0f} MiB, PSS {mem['rank_process_pss_mib']:.0f} MiB", "")
    head = (
        f"# Launcher benchmark\n\n"
        f"Median of {report['repeats']} repeat(s)"
        f"{' (--quick)' if report['quick'] else ''}; load average {report['load_average_start'][0]:.2f} at the "
        f"start, {report['load_average_end'][0]:.2f} at the end.\n\n"
        "Each ratio is to the by-hand start of as many Ray nodes on the same host, measured in the same run, "
        "interleaved (lower is better for times); times are the median (min-max). The references and the "
        "baseline are the plain commands users type (Ray's defaults: autoscaler monitor and API "
        "server on the head), with only a private temp dir, port block and 1 CPU per node; row 1b adds the "
        "launcher's lean head flags, to show how much of the gain is orchestration. The Slurm testbed's runs have "
        "no by-hand start in this script: the 3-host start is shown against itself without the link check. "
        "Job exit is timed from the driver's last stdout line as "
        "this benchmark received it to the exit of mpirun (srun).\n\n"
        "| measure | median (min-max) | ratio to its reference | target | result |\n|---|---|---|---|---|\n"
    )
    body = "\n".join(rows) + "\n"
    phases = _phase_medians(report["runs"])
    if phases:
        body += "\nWhere the launcher's time goes (median seconds since the start, from rank 0's log):\n\n"
        body += ("| launch | rank 0 first log line | head's `ray start` | head registered | ready to start driver "
                 "| driver started | driver's first line |\n|---|---|---|---|---|---|---|\n")
        for name, p in phases.items():
            body += f"| {labels[name]} | " + " | ".join(
                "n/a" if p[k] is None else f"{p[k]:.2f}" for k in
                ("rank0_first_log_line", "head_ray_start", "head_registered", "ready_to_start_driver",
                 "driver_started", "first_line")
            ) + " |\n"
        cpu = {name: median([r.get("cpu_s") for r in runs]) for name, runs in report["runs"].items()}
        shown = ", ".join(f"{labels.get(n, n)} {v:.1f}" for n, v in cpu.items() if v is not None)
        if shown:
            body += (f"\nCPU seconds used by all the processes of a run, start to stop (median): {shown}; "
                     f"this host has {report['cpu_count']} CPUs, so a run needs at least that / "
                     f"{report['cpu_count']} seconds of wall time.\n")
        by_hand = report["runs"].get("by_hand_n2", [])
        if by_hand:
            head_s = median([r.get("head_s") for r in by_hand])
            worker_s = median([r.get("worker_s") for r in by_hand])
            body += (f"\nBy hand (the 2-node reference, median): `ray start --head` took {head_s:.2f} s, then "
                     f"`ray start --address` {worker_s:.2f} s.\n")
    extra = [*report["notes"], *(f"ERROR: {e}" for e in report["errors"])]
    if extra:
        body += "\n" + "\n".join(f"- {line}" for line in extra) + "\n"
    return head + body


def _phase_medians(runs: dict) -> dict:
    out = {}
    for name, results in runs.items():
        if name in BY_HAND or not results:
            continue
        phases = {k: median([r["phases"][k] for r in results]) for k in results[0]["phases"]}
        phases["first_line"] = median([r["seconds"] for r in results])
        out[name] = phases
    return out


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="repeats of each timing; the median is reported (default 3)")
    parser.add_argument("--quick", action="store_true", help="1 repeat, no RLlib throughput")
    parser.add_argument("--no-slurm", dest="slurm", action="store_false", help="skip the Slurm testbed")
    parser.add_argument("--out-dir", type=Path, default=REPORTS, help="where the reports go (default: %(default)s)")
    parser.add_argument("--idle-seconds", type=float, default=30.0, help="the idle driver's run (5, 7; default 30)")
    parser.add_argument("--rllib-seconds", type=float, default=30.0,
                        help="measured training time per RLlib run, after imports and a warm-up iteration (default 30)")
    parser.add_argument("--rllib-repeats", type=int, default=1,
                        help="pairs of RLlib runs (launched, standalone); each takes ~1-2 min (default 1)")
    parser.add_argument("--keep-logs", action="store_true", help="keep the launcher's logs (else removed when all went well)")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats = 1
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    become_subreaper()
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupt)
    # Where the Slurm testbed's hosts see it too (their /tmp is each their own): its shared dir.
    SHARED_DIR.mkdir(mode=0o700, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="mpiray-bench-", dir=SHARED_DIR))
    JOB_REGISTRY.append(scratch / "registry")
    before = descendant_pids()
    report = None
    try:
        report = run_all(args, scratch)
    except (KeyboardInterrupt, Interrupted):
        log("interrupted: stopping what this benchmark started")
        return 130
    finally:
        # A job still running when interrupted: its group's SIGTERM lets it stop its own Ray nodes first.
        stop_what_we_started(before)
        if report is not None and not report["errors"] and not args.keep_logs:
            shutil.rmtree(scratch, ignore_errors=True)
            with contextlib.suppress(OSError):  # made here, or the testbed's: left where another has files in it
                SHARED_DIR.rmdir()
        else:
            log(f"logs kept in {scratch}")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    text = markdown(report)
    write_report(args.out_dir, "launcher", text, report, indent=2)
    print(text)
    return 1 if report["errors"] else 0


def _interrupt(signum, frame):
    raise Interrupted(signum)


if __name__ == "__main__":
    sys.exit(main())
