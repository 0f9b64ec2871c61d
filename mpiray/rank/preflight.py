"""The pre-flight across the job (the looking itself: host/findings.py): every rank's versions and every
host's findings ride the HELLO each worker sends rank 0; rank 0 holds its head's `ray start` until all are in,
prints them grouped by value, logs them, and refuses a job that cannot work (exit 2) before any Ray runs.
Before all of it, and before MPI starts, each task refuses a Ray installed here that cannot run a safe cluster.

    3 hosts (ranks 0-2): python 3.11.7, ray 2.60.0, mpiray 0.1.0, mpi4py 4.1.2, MPICH 5.0.2, numpy 2.2.6, ...
    1 host (rank 3 on n4): ... numpy 1.26.4 ...
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from typing import NamedTuple

from mpiray import errors
from mpiray.deadline import Deadline
from mpiray.errors import ConfigError, ImageFailed, TooFewNodes, VersionSkew
from mpiray.host import findings, portblocks, sites
from mpiray.host.findings import FIXED, REFUSE, WARN, Finding
from mpiray.rank import nodeplan
from mpiray.rank.messages import HELLO, Hello
from mpiray.rank.state import Rank
from mpiray.rank.timings import STARTUP_POLL
from mpiray.raynode import commands, raycompat
from mpiray.raynode import container as containers

MARKER_PREFIX = ".mpiray-shared-"  # rank 0's file in the job's log dir: a host that does not see it has another dir
RAISED: list[Finding] = []  # what raise_limits did in this process, said by the host's first rank


def check_ray_install(auth: bool) -> None:
    """Before MPI starts (cli.run, library.init): refuse, as bad input (exit 2), a Ray installed here that would
    run a cluster anyone who reaches its ports could use: one without token authentication, or a full dashboard
    agent that serves job submission unchecked. Read from Ray's files: Ray is not imported."""
    problem = raycompat.version_problem(raycompat.ray_version(), auth) or raycompat.agent_http_problem(
        auth, full_agent=commands.metrics_agent_problem() is None)
    if problem:
        raise ConfigError(problem)


def raise_limits() -> None:
    """First thing in a rank (rank.life.setup), before it starts a process: the open-file soft limit."""
    RAISED[:] = findings.raise_soft_limits()


ORDER = ("python", "ray", "mpiray", "mpi4py", "mpi", "numpy", "cloudpickle", "torch", "gymnasium")


def versions(me: Rank) -> dict[str, str]:
    """What this rank runs: Python, the MPI library (as MPI says), and the packages that must match. With
    --container, Ray and Python are the image's (the rank's own side needs mpiray and mpi4py alone)."""
    found = {"python": sys.version.split()[0], **findings.installed_versions(),
             "mpi": mpi_library(me.comm.library_version())}
    if containers.of(me.config) is not None:
        facts = image_facts(me)
        found = {"python": facts.python if facts else "none (image failed)", "ray": facts.ray if facts else "none",
                 "mpiray": found.get("mpiray", "?"), "mpi4py": found.get("mpi4py", "?"), "mpi": found["mpi"]}
    return {name: found[name] for name in ORDER if name in found}


_IMAGES: dict[str, containers.ImageFacts | ImageFailed] = {}  # this rank's look into its image, once


def image_facts(me: Rank) -> containers.ImageFacts | None:
    """What the job's image runs on this rank's host (None: it did not run; host_findings says why)."""
    box = containers.of(me.config)
    assert box is not None, "image_facts() without --container"
    if box.reference not in _IMAGES:
        try:
            name = containers.container_name(me.current_session.job_id if me.session else "job", me.rank) + "-probe"
            _IMAGES[box.reference] = containers.probe(box, name, commands.METRICS_AGENT_MODULES)
        except ImageFailed as error:
            _IMAGES[box.reference] = error
    found = _IMAGES[box.reference]
    return None if isinstance(found, ImageFailed) else found


def image_problem(me: Rank) -> str:
    """Why the job's image did not run on this host (after image_facts() said None)."""
    box = containers.of(me.config)
    return str(_IMAGES[box.reference]) if box is not None and box.reference in _IMAGES else "it was not tried"


def image_findings(me: Rank) -> list[Finding]:
    """The image on this host: it runs, with a Ray that can run a safe cluster."""
    box = containers.of(me.config)
    if box is None:
        return []
    facts = image_facts(me)
    if facts is None:
        return [Finding(REFUSE, "image_failed", image_problem(me),
                        "check the image's path or name and that the runtime runs on every node (a module to load)")]
    problem = raycompat.version_problem(facts.ray, me.config.auth)
    return [Finding(REFUSE, "image_failed", f"{box.reference}: {problem}")] if problem else []


def mpi_library(first_line: str) -> str:
    """MPI_Get_library_version's first line, short: 'MPICH Version: 5.0.2' -> 'MPICH 5.0.2', 'Open MPI v5.0.8,
    package: ...' -> 'Open MPI v5.0.8'."""
    return first_line.split(",")[0].replace(" Version:", "").strip()


def host_findings(me: Rank, log_dir_shared: bool | None) -> list[Finding]:
    """This host's findings: by its first rank only (every rank raises its own open-file limit)."""
    config = me.config
    if me.host_comm.rank != 0:
        return []
    fixed = [*RAISED, *findings.open_files_findings(me.comm.size, head_host=me.rank == 0)]
    found = [*findings.dir_findings(config.temp_dir, "temp", "--temp-dir (or TMPDIR)")]
    if config.spill_dir is not None:
        found += findings.dir_findings(config.spill_dir, "spill", "--spill-dir")
    found += me.own_node.make_spill_dir(me.current_session.spill_key)  # nothing made for a planned node (--dry-run)
    found += image_findings(me)
    found += findings.port_range_findings(*portblocks.PORT_RANGE)
    found += findings.neighbour_findings(me.comm.size)
    found += fixed
    if log_dir_shared is False:
        path = me.current_session.job_dir(config.log_dir)
        found.append(Finding(WARN, "log_dir_not_shared", f"the log dir {path.resolve()} here is not rank 0's (its marker "
                             f"is not there): this host's ranks write their logs there, and `mpiray logs` on rank 0's "
                             f"host sees only the others", "give --log-dir a directory on a file system every node "
                             "mounts (an absolute path)"))
    return found


def hello(me: Rank, link: str = "", waits: bool = False) -> Hello:
    """A worker's HELLO: where it is and logs, what it runs, what its host's first rank found, where it listens
    for the link check (rank/linkcheck.py), whether it waits for rank 0's VERDICT."""
    marker = getattr(me.session, "marker", "")
    shared = (me.current_session.job_dir(me.config.log_dir) / marker).exists() if marker else None
    return Hello(host=me.host, log=str(me.log.path), versions=versions(me), findings=host_findings(me, shared), link=link,
                 waits=waits, first=me.host_comm.rank == 0)


def make_marker(me: Rank) -> str:
    """Rank 0's marker in the job's log dir (its name goes out in the session)."""
    name = f"{MARKER_PREFIX}{os.urandom(4).hex()}"
    try:
        (me.current_session.job_dir(me.config.log_dir) / name).touch()
    except OSError:
        return ""
    return name


def remove_marker(me: Rank) -> None:
    marker = getattr(me.session, "marker", "") if me.session else ""
    if marker:
        (me.current_session.job_dir(me.config.log_dir) / marker).unlink(missing_ok=True)


def gather(me: Rank) -> dict[int, Hello]:
    """rank 0: every worker's HELLO (rank -> payload), before its own `ray start` goes; fewer where some did not
    come within --startup-timeout (the caller names them)."""
    hellos: dict[int, Hello] = {}
    deadline = Deadline.since(me.started, me.config.startup_timeout)
    while len(hellos) < me.comm.size - 1:
        message = me.comm.poll(tag=HELLO)
        if message is None:
            if deadline.expired():
                break
            me.raise_if_stopped()
            time.sleep(STARTUP_POLL)
            continue
        hellos[message.source] = hello = message.payload
        me.log.event("worker_waiting", peer=message.source, peer_host=hello.host, log=hello.log)
    remove_marker(me)  # every host has looked
    return hellos


def hostname_clash(me: Rank, hellos: dict[int, Hello]) -> str:
    """rank 0: "" where every host (as MPI splits the ranks) has a hostname of its own; else the line that refuses
    the job (exit 2) and names them. mpiray tells hosts apart by name (the pre-flight's table, the link check, the
    hosts left out, a lost host's ranks): two hosts that both say `vm` (containers that share one name) were one."""
    firsts: dict[str, list[int]] = {me.host: [0]}
    for rank, hello in sorted(hellos.items()):
        if hello.first:
            firsts.setdefault(hello.host, []).append(rank)
    shared = {name: ranks for name, ranks in firsts.items() if len(ranks) > 1}
    if not shared:
        return ""
    every = {0: me.host, **{rank: hello.host for rank, hello in hellos.items()}}
    named = "; ".join(f"{name!r} is the hostname of {len(first)} hosts (ranks "
                      f"{_ranges(sorted(r for r, host in every.items() if host == name))}, their first ranks "
                      f"{', '.join(map(str, first))})" for name, first in sorted(shared.items()))
    return (f"hosts that MPI tells apart share a hostname: {named}; mpiray tells hosts apart by name: give each host "
            f"its own (a container's --hostname, or the node's own name)")


def refusal(findings: list[Finding]) -> str:
    """What the pre-flight refuses among a host's findings (the first refusal, and how many more), or ""."""
    refused = [f for f in findings if f.level == REFUSE]
    more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
    return f"{refused[0].message}{more}" if refused else ""


class Judged(NamedTuple):
    """What the pre-flight leaves of the job: the hosts it left out, the job's hosts and Ray nodes, and how many of
    those nodes start."""

    left_out: set[str]
    hosts: int
    requested: int
    nodes: int


def gcs_line(me: Rank) -> str:
    """The pre-flight's words on the head's GCS restarts (nodeplan.gcs_restarts): the Ray that runs the head decides."""
    image = image_facts(me) if me.config.container else None
    return nodeplan.gcs_restarts(me.config.gcs_restarts, image.ray if image else None, raycompat.gcs_store())[1]


def judge(me: Rank, hellos: dict[int, Hello], added: dict[str, list[Finding]] | None = None) -> Judged:
    """rank 0: the pre-flight's table and findings, printed and logged; LaunchError (exit 2) for a refusal.
    --bad-nodes exclude: refused hosts other than rank 0's are left out instead (their ranks idle: worker.py),
    as long as --min-nodes Ray nodes remain. added: host -> findings from across the hosts (the link check's)."""
    own = Hello(me.host, str(me.log.path), versions(me), host_findings(me, True))
    every = {0: own, **hellos}
    to_add = dict(added or {})
    for rank, each in sorted(every.items()):  # once per host: its first rank's HELLO holds the host's findings
        if to_add.get(each.host):
            every[rank] = each._replace(findings=[*each.findings, *to_add.pop(each.host)])
    requested = len(every) if me.config.ray_node_per == "rank" else len({hello.host for hello in every.values()})
    if me.config.min_nodes > requested:
        raise ConfigError(f"--min-nodes {me.config.min_nodes} is more than this job's {requested} Ray nodes: give at "
                          f"most {requested} (or 0: 2, or every node of a smaller job)")
    findings = [(hello.host, f) for _, hello in sorted(every.items()) for f in hello.findings]
    refused = [(host, f) for host, f in findings if f.level == REFUSE]
    # With --autoscale the job's own node count is in Ray's autoscaler config already: a refusal ends the job.
    excluding = (bool(refused) and me.config.bad_nodes == "exclude" and not me.config.autoscale
                 and all(host != me.host for host, _ in refused))
    left_out = {host for host, _ in refused} if excluding else set()
    groups: dict[tuple, list[int]] = {}
    for rank, hello in sorted(every.items()):
        if hello.host not in left_out:  # what an excluded host runs (a failed image: nothing) is not the cluster's
            groups.setdefault(tuple(sorted(hello.versions.items())), []).append(rank)
    rows, lines = [], []
    for ranks in sorted(groups.values(), key=len, reverse=True):
        hosts = sorted({every[r].host for r in ranks})
        found = every[ranks[0]].versions  # in ORDER
        rows.append({"hosts": hosts, "ranks": ranks, "versions": found})
        lines.append(f"{_where(hosts, ranks)}: " + ", ".join(f"{k} {v}" for k, v in found.items()))
        print(f"mpiray: pre-flight: {lines[-1]}", flush=True)
    site = sites.of(me.config)
    if site is not None:  # what --site set (host/sites.py), beside what the ranks run
        applied = site.applied(me.config)
        lines.append(f"site {site.name} ({site.title}): " + ", ".join(f"{k} {v}" for k, v in applied.items() if k != "site"))
        print(f"mpiray: pre-flight: {lines[-1]}", flush=True)
    if me.own_node.runs_ray and not me.config.join:  # its head's GCS: started again where it dies, or not
        lines.append(gcs_line(me))
        print(f"mpiray: pre-flight: {lines[-1]}", flush=True)
    me.log.event("preflight", groups=rows, summary=" / ".join(lines))
    for host, finding in findings:
        if finding.level in (WARN, FIXED):
            me.log.event("preflight_warning" if finding.level == WARN else "preflight_fixed", check=finding.check,
                         host=host, message=finding.message, fix=finding.fix)
    refused.sort(key=lambda found: found[1].check != "image_failed")  # an image that does not run: say that first
    if refused and refused[0][1].check == "image_failed" and not excluding:
        host, first = refused[0]
        raise ImageFailed(f"on {host}: {first.message}; {first.fix}" if first.fix else f"on {host}: {first.message}")
    if len(rows) > 1:
        raise VersionSkew(_skew(rows))
    host_count = len({hello.host for hello in every.values()})
    if excluding:
        return Judged(left_out, host_count, requested, exclude(me, every, refused, requested))
    if refused:
        host, first = refused[0]
        hosts = sorted({h for h, _ in refused} - {host})
        others = f" (and on {', '.join(hosts)}: see the log)" if hosts else ""
        fix = f"; {first.fix}" if first.fix else ""
        raise errors.by_cause(first.check)(f"on {host}: {first.message}{fix}{others}")
    return Judged(set(), host_count, requested, requested)


EXCLUDED_FILE = "excluded_hosts"  # in the job's log dir (join-ID-excluded_hosts: a joining job's), the hosts left out


def exclude(me: Rank, every: dict[int, Hello], refused: list[tuple[str, Finding]], requested: int) -> int:
    """--bad-nodes exclude: the refused hosts left out (said on the console, in the log, and in the job's
    excluded_hosts file with the scheduler's exclude line); TooFewNodes (exit 2) if fewer than --min-nodes remain.
    Returns the Ray nodes that start."""
    config = me.config
    why: dict[str, list[Finding]] = {}
    for host, finding in refused:
        why.setdefault(host, []).append(finding)
    ranks_of = Counter(hello.host for hello in every.values())
    nodes = requested - sum(ranks_of[host] if config.ray_node_per == "rank" else 1 for host in why)
    text = "; ".join(f"{host}: {found[0].check}: {found[0].message}" for host, found in sorted(why.items()))
    need = config.min_nodes or min(2, requested)
    if nodes < need:
        raise TooFewNodes(f"the pre-flight refused {len(why)} host(s), which leaves {nodes} of the {requested} Ray "
                          f"nodes, fewer than --min-nodes {need}: {text}")
    hosts = sorted(why)
    line = exclude_line(me.env.scheduler, hosts)
    try:
        session = me.current_session  # a joining job's file has its prefix: the cluster's own is another job's
        path = session.job_dir(config.log_dir) / f"{session.prefix}{EXCLUDED_FILE}"
        path.write_text("".join(f"{host}\t{found[0].check}\t{found[0].message}\n" for host, found in sorted(why.items()))
                        + f"# for the next submission: {line}\n")
    except OSError:
        pass  # the console and the log say it too
    print(f"mpiray: pre-flight: left out {', '.join(hosts)} ({nodes} of {requested} Ray nodes start): {text}; "
          f"next time: {line}", flush=True)
    me.log.event("nodes_excluded", hosts=", ".join(hosts), nodes=nodes, requested=requested, why=text, exclude=line,
                 checks={host: [f.check for f in found] for host, found in why.items()})
    return nodes


def exclude_line(scheduler: str, hosts: list[str]) -> str:
    """What leaves hosts out of the next submission, ready to paste where the scheduler has an option for it."""
    listed = ",".join(hosts)
    if scheduler == "slurm":
        return f"sbatch --exclude={listed}"
    if scheduler == "pbs":  # PBS has no exclude list: select's chunks name the hosts to use
        return f"leave {listed} out of qsub's -l select (host=NAME per chunk)"
    return f"leave {listed} out of the MPI launcher's hosts (--hosts, the hostfile)"


def _skew(rows: list[dict]) -> str:
    """What differs between the groups, with where, and the fix."""
    names = sorted({name for row in rows for name in row["versions"]})
    differing = [name for name in names if len({row["versions"].get(name, "none") for row in rows}) > 1]
    parts = []
    for name in differing:
        parts.append(f"{name} " + " but ".join(f"{row['versions'].get(name, 'none')} on {_where(row['hosts'], row['ranks'])}"
                                               for row in rows))
    return ("ranks run different versions, refusing to start: " + "; ".join(parts) + ". Start every rank from the same "
            "environment: the same venv, module or container on every node")


def _where(hosts: list[str], ranks: list[int]) -> str:
    shown = ", ".join(hosts[:4]) + (", ..." if len(hosts) > 4 else "")
    return f"{len(hosts)} host{'s' * (len(hosts) != 1)} ({shown}; ranks {_ranges(ranks)})"


def _ranges(numbers: list[int]) -> str:
    spans: list[list[int]] = []
    for n in sorted(numbers):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ",".join(f"{a}-{b}" if b > a else f"{a}" for a, b in spans)
