"""Every option of mpiray, declared once (OPTIONS), and what is made of the table:

- the command line's flags (`start_ray.py --startup-timeout 300`, argparse),
- their MPIRAY_<OPTION> variables (MPIRAY_STARTUP_TIMEOUT=300), which give any flag its default,
- mpiray.init()'s keywords (startup_timeout=300),
- the options table of docs/options.md (docs/options_table.py writes it; a test checks that the page shows it).

A variable's value goes through the same checks as the flag's; an empty one counts as unset. Bad
input is a ConfigError (exit code 2) that names the flag, variable or keyword, before MPI starts.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from mpiray import values
from mpiray.config import DEFAULT_DRIVER, Config
from mpiray.console import close_matches, say, unknown_settings
from mpiray.errors import BadValue, ConfigError
from mpiray.host import sites
from mpiray.raynode import private

# MPIRAY_* names that are no option's MPIRAY_<OPTION>, so that a misspelled setting can be told from
# these: the driver command (DRIVER); set for the driver (messages.Cluster.driver_env: NUM_NODES, RESTART,
# TOTAL_CPUS, TOTAL_GPUS, HEAD_IP; JOB_ID, LOG_DIR and STOP_GRACE are options' names too); the
# jobs/ scripts (SITE_MPI, TORCH, DIR); a head node's GCS restarts (NODE_GCS_RESTARTS, raynode/gcsrestart.py).
# The test harness's variables are MPIRAYTEST_*, outside this check.
OTHER_VARIABLES = (
    "MPIRAY_DRIVER", "MPIRAY_NUM_NODES", "MPIRAY_TOTAL_CPUS", "MPIRAY_TOTAL_GPUS", "MPIRAY_HEAD_IP", "MPIRAY_RESTART",
    "MPIRAY_SITE_MPI", "MPIRAY_TORCH", "MPIRAY_DIR", "MPIRAY_NODE_GCS_RESTARTS",
)


class _Parser(argparse.ArgumentParser):
    """argparse that raises ConfigError instead of printing usage on every rank and exiting."""

    def error(self, message: str):
        raise ConfigError(f"{message} (see {self.prog} --help)")


def _setting(environ: Mapping[str, str], name: str) -> str | None:
    """The variable's value; unset when absent or blank (`MPIRAY_X=` in a script clears a setting)."""
    text = environ.get(name)
    return text if text is not None and text.strip() else None


def _env_driver(environ: Mapping[str, str]) -> list[str] | None:
    text = _setting(environ, "MPIRAY_DRIVER")
    try:
        return None if text is None else values.command(text)
    except BadValue as error:
        raise ConfigError(f"MPIRAY_DRIVER={text!r}: {error}") from None


def default_temp_dir(environ: Mapping[str, str]) -> Path:
    """TMPDIR (a batch system's per-job dir on the node), else /tmp; /tmp too where TMPDIR is too long for
    Ray's socket paths: PBS's /var/tmp/pbs.JOBID.SERVER often is (the rank's 0700 dir keeps /tmp safe)."""
    tmpdir = environ.get("TMPDIR", "").strip()
    if tmpdir and private.socket_path_problem(Path(tmpdir)) is None:
        return Path(tmpdir)
    if tmpdir:
        say(environ, "note", f"TMPDIR={tmpdir} is too long for Ray's socket paths (107 bytes at most): the ranks' "
                             f"private dirs go to /tmp (--temp-dir sets another)")
    return Path("/tmp")


@dataclass(frozen=True)
class Option:
    """One option: the Config field and init() keyword `name`, the flag --name-with-dashes, MPIRAY_NAME."""

    name: str
    default: Any
    help: str  # one or two sentences: --help and the docs table
    parse: Callable[[Any], Any] | None = None  # text or a typed value -> the value: one of values.py's kinds
    choices: tuple[str, ...] | None = None
    switch: bool = False  # --name / --no-name
    not_a_keyword: str = ""  # why init() does not take it as a keyword ("": it does)
    shown_default: str | None = None  # the default as the docs show it, where the value says too little
    # Where the default depends on the environment (beyond MPIRAY_NAME, which wins): environ -> the default.
    default_from: Callable[[Mapping[str, str]], Any] | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def variable(self) -> str:
        return "MPIRAY_" + self.name.upper()

    def take(self, given: Any) -> Any:
        """A variable's text or an init() keyword's value -> the option's value, checked as the flag's would be.
        Raises BadValue."""
        if self.switch:
            return values.boolean(given)
        value = self.parse(given) if self.parse else given
        if self.choices is not None and value not in self.choices:
            raise BadValue(f"invalid choice (choose from {', '.join(self.choices)})")
        return value

    def default_in(self, environ: Mapping[str, str]) -> Any:
        """The default, unless its MPIRAY_ variable says otherwise (checked as the flag would be)."""
        text = _setting(environ, self.variable)
        if text is None:
            return self.default_from(environ) if self.default_from else self.default
        try:
            return self.take(text)
        except BadValue as error:  # a switch's words start with the text: MPIRAY_AUTH='maybe' is not a boolean
            raise ConfigError(f"{self.variable}={error}" if self.switch else f"{self.variable}={text!r}: {error}") from None


OPTIONS = (
    Option("log_dir", Path("logs"), "per-rank logs go to LOG_DIR/JOB_ID/: rank-NNNN.log for people, "
           "rank-NNNN.jsonl (events) for programs", values.path),
    Option("job_id", None, "names the job's log dir: letters, digits and . _ + -", values.job_id,
           shown_default="the scheduler's job id (SLURM_JOB_ID, PBS_JOBID, COBALT_JOBID or ALPS_APP_ID), else a "
           "timestamp and pid"),
    Option("startup_timeout", 120.0, "seconds for the head and every worker node to come up, and for MPI_Init: a "
           "rank still in it then prints where it hangs and exits 1", values.positive_seconds),
    Option("port", 0, "GCS port of the head; 0 picks a free one", values.port, shown_default="0 (free)"),
    Option("num_cpus", None, "CPUs each Ray node offers", values.count, shown_default="the rank's share of its host"),
    Option("num_gpus", None, "GPUs each Ray node offers", values.count, shown_default="the rank's share of the visible GPUs"),
    Option("head_cpus", None, "CPUs the head node offers to Ray (e.g. 0 keeps its CPUs for the driver process alone: "
           "no Ray task, actor or learner runs there)",
           values.count, shown_default="as --num-cpus"),
    Option("resources", None, "custom Ray resources each node of this job offers, as JSON, e.g. '{\"accel\": 2}'",
           values.resources, shown_default="none"),
    Option("labels", None, "labels each Ray node of this job carries beside mpiray's own (mpiray.io/job, batch-job, "
           "host, rank, role, partition, switch), for Ray's label selectors: K=V,K=V", values.labels,
           shown_default="none"),
    Option("role", "main", "this job's nodes' role, the label mpiray.io/role and a custom resource mpiray_role_NAME: "
           "a pool Ray can address, e.g. label_selector={'mpiray.io/role': 'rollout'} for a --join job's nodes; "
           "per rank range: trainer=0-1,rollout=2- (ranks named by none: main)", values.role),
    Option("market_type", "on-demand", "this job's nodes' label ray.io/market-type, Ray's own (spot or on-demand, as "
           "KubeRay sets it): spot for a job that may be preempted (a preemptible QOS or queue); an elastic cluster's "
           "worker jobs are spot", values.market_type),
    Option("learner_slots", None, "RLlib learners each Ray node of this job may hold: the custom resource "
           "mpiray_learner_slot, of which the trainer's learners take one each, so they spread over the nodes; "
           "0: no learner here (a hetjob's CPU component)", values.count, shown_default="the node's GPUs, else 1"),
    Option("object_store_memory", None, "object store size of each Ray node, at least 75M, e.g. 2G",
           values.object_store_size, shown_default="30% of the rank's memory share, capped by /dev/shm"),
    Option("stop_grace", 30.0, "seconds the driver gets between SIGTERM and SIGKILL to checkpoint (exported to it "
           "as MPIRAY_STOP_GRACE); Ray's processes then get at most 5 s more", values.seconds,
           shown_default="30 (Slurm's default KillWait)"),
    Option("time_limit", None, "stop the driver this many seconds after it started (SIGTERM, the grace, SIGKILL); "
           "exit code 124", values.positive_seconds, shown_default="none"),
    Option("walltime_margin", None, "stop the driver this many seconds before the batch job's walltime ends "
           "(SIGTERM, the grace, SIGKILL; exit code 124), so that it checkpoints before the batch system kills the "
           "job; by default only under PBS, which warns no job (its end read from qstat); Slurm jobs get "
           "--signal=TERM@N instead; 0: never", values.seconds, shown_default="PBS: --stop-grace + 30; else off"),
    Option("interface", None, "network interface whose address the nodes advertise, e.g. ib0 or hsn0",
           values.interface, shown_default="the one that routes to the head"),
    Option("address_rule", None, "the site's name of a node's address on the fast network, from its hostname: {host} "
           "(short) or {hostname}, e.g. '{host}.hsn.cm.polaris.alcf.anl.gov' or '{host}i'; each node resolves its own "
           "and advertises and binds there (a name that does not resolve to an address of the node: exit 2)",
           values.address_rule, shown_default="none"),
    Option("gpu_vendor", "auto", "whose GPUs the nodes have: auto looks for AMD's, then Intel's, then NVIDIA's (Ray's "
           "order), in the variables the scheduler binds them with, then in the devices",
           choices=("auto", "nvidia", "amd", "intel")),
    Option("site", None, "a named site's settings (docs/sites.md): its network (--interface or --address-rule), GPU vendor, "
           "fabric variables and required batch directives, where not given otherwise", choices=tuple(sites.BY_NAME),
           shown_default="none"),
    Option("container", None, "KIND:IMAGE: every `ray start` and the driver run inside the image (KIND: apptainer, "
           "singularity, podman, podman-hpc, charliecloud, shifter, enroot); the ranks stay on the host and need no Ray "
           "(docs/containers.md)", values.container, shown_default="none: Ray from the ranks' own environment",
           not_a_keyword="init() makes the calling script the driver, on the host: Ray must be importable there; "
           "mpiray run --container runs the driver in the image"),
    Option("container_flags", None, "the container runtime's own extra options, e.g. '--nv' (Apptainer's NVIDIA "
           "GPUs) or '--rocm'", values.shell_words, shown_default="none",
           not_a_keyword="it goes with --container, which init() does not take"),
    Option("temp_dir", Path("/tmp"), "node-local root of the per-rank private dirs (keep it short: Ray's socket "
           "paths must fit 107 bytes)", values.path, shown_default="TMPDIR, else /tmp", default_from=default_temp_dir),
    Option("spill_dir", None, "where Ray spills objects its object store cannot hold: each host's first rank makes "
           "DIR/mpiray-UID-spill-JOBID-RUN (0700; a shared file system works: Ray adds each node's id), removed at the "
           "end; give a local disk, not RAM", values.path, shown_default="the temp dir's"),
    Option("ray_node_per", "rank", "one Ray node per MPI rank, or one per host (the other local ranks idle)",
           choices=("rank", "host")),
    Option("join_window", 64, "the most worker nodes joining the head at once; the window starts at 8 and adapts "
           "to how fast nodes register", values.positive_count),
    Option("bad_nodes", "exclude", "a worker's host that the pre-flight refuses (its temp or spill dir, the image, "
           "the port range): exclude it (its ranks run no Ray; the hosts named, with a ready --exclude= line in "
           "LOG_DIR/JOB_ID/excluded_hosts) or refuse the whole job (exit 2); rank 0's host is never excluded, "
           "and --autoscale always refuses",
           choices=("exclude", "refuse")),
    Option("min_nodes", 0, "--bad-nodes exclude: the fewest Ray nodes the job starts with; fewer left is exit 2, "
           "and more than the job has is bad input (exit 2)", values.count, shown_default="2, or every node of a "
           "smaller job"),
    Option("spares", 0, "healthy worker hosts kept out of the cluster at start (after the pre-flight's exclusions), "
           "so that it has a known size: when a worker's Ray node is lost while its rank lives, or its whole host "
           "(srun --no-kill), a spare host starts its nodes and joins; at most the job's hosts but one", values.count),
    Option("gcs_restarts", 3, "the head's GCS, where it dies, is started again on the same port and session this many "
           "times, its tables kept on the head's node-local disk (Ray's RocksDB store, Ray 2.60 and later): the "
           "nodes, actors and driver carry on; 0: a GCS that dies ends the job (exit 1), as on an older Ray",
           values.count),
    Option("slow_link", 0.25, "the pre-flight's link check (jobs of 3 hosts or more; TCP between the hosts' first "
           "ranks on their Ray addresses, ~1 s): a host whose link sends or receives below this fraction of the "
           "median host's is refused (--bad-nodes); 0: no check", values.fraction),
    Option("gcs_core", "auto", "on the head's host, when unbound ranks share it, the other Ray nodes run on every "
           "CPU but one, left to the GCS; auto: on hosts of 8 CPUs or more", choices=("auto", "on", "off")),
    Option("progress", "auto", "rank 0's live start-up line ('12/24 ranks ready, 8 joining') on stdout; auto: "
           "when rank 0's stdout or its launcher's is a terminal (not TERM=dumb), never in a batch log",
           choices=("auto", "on", "off")),
    Option("auth", True, "token authentication; --no-auth lets anyone who reaches the ports join the cluster "
           "(it warns)", switch=True, shown_default="on"),
    Option("dashboard", False, "Ray's dashboard, Jobs API and State API on the head (needs ray[default]; Ray "
           "Train wants it): on the head's address with token auth, else 127.0.0.1 (the log says how to reach it). "
           "Off by default, unlike Ray's: an RLlib or plain Ray driver needs none, and it costs the head a "
           "process; without it rank 0 says in one line at start that `mpiray submit` and Ray Train need it",
           switch=True, shown_default="off"),
    Option("metrics", True, "Ray's metrics: every node exports them on a port of the job's block (needs "
           "ray[default]); --no-metrics collects none, which saves the head a core's worth of work when nodes "
           "are lost", switch=True, shown_default="on"),
    Option("join", None, "join the running cluster of batch job JOB_ID (see `mpiray list`) instead of starting "
           "one: this job's ranks add Ray worker nodes to it, and leave when this job ends or the cluster does; "
           "a driver command, if given, runs against that cluster", values.job_id, shown_default="none"),
    Option("registry", None, "where running clusters say how to reach them (`--join`, `mpiray attach`, "
           "`mpiray list`): a directory of yours on a file system every batch job sees", values.path,
           shown_default="~/.mpiray/clusters"),
    Option("autoscale", None, "MIN:MAX Ray nodes, this job's own included: Ray's autoscaler adds worker jobs "
           "(one node each) while its demand needs more, and cancels them after --cooldown idle seconds",
           values.bounds, shown_default="off"),
    Option("cooldown", 60.0, "seconds a worker job's node stays idle before the autoscaler cancels the job",
           values.positive_seconds),
    Option("worker_job", None, "the autoscaler's worker job template: its #SBATCH (or #PBS) lines (partition, "
           "account, qos, walltime) and shell lines (module loads, a venv) go into every worker job", values.path,
           shown_default="none"),
    Option("worker_cpus", None, "CPUs of each worker job's node", values.positive_count, shown_default="the head's"),
    Option("worker_gpus", None, "GPUs of each worker job's node", values.count, shown_default="0"),
    Option("worker_pending_limit", None, "seconds a worker job may wait in the queue before it is cancelled and "
           "counted as failed (the next submit backs off); by default it waits as long as Ray wants its node, "
           "since a production queue can take hours", values.positive_seconds, shown_default="none"),
    Option("scheduler_poll", 10.0, "the autoscaler asks the batch scheduler (squeue, qstat) about its worker jobs at "
           "most once per this many seconds, as sites ask of scripts; a worker's node is seen as it joins, not "
           "by polling", values.positive_seconds),
    Option("dry_run", False, "the whole MPI protocol (session, host split, resources, ports, reports, exit code) "
           "and each rank's exact `ray start` line, but no Ray and no driver; rank 0 prints the planned cluster. "
           "With `--join JOB`: that cluster is checked (registry, versions, its GCS answers) and this job's nodes "
           "planned as its workers; nothing joins",
           switch=True, shown_default="off",
           not_a_keyword="init() connects the calling script to a real cluster; try the plan with mpiray run --dry-run"),
)
BY_NAME = {option.name: option for option in OPTIONS}


def _for_argparse(parse: Callable[[str], Any] | None) -> Callable[[str], Any]:
    """argparse words a ValueError as its own "invalid value"; a BadValue's message says more."""
    def convert(text: str) -> Any:
        try:
            return parse(text) if parse else text
        except BadValue as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    return convert


def build_parser(environ: Mapping[str, str], prog: str = "mpiray run") -> argparse.ArgumentParser:
    """The launcher's options, their defaults taken from valid MPIRAY_<OPTION> variables. prog: how the
    user started it (`mpiray run`, or `start_ray.py` in a checkout).

    Raises ConfigError naming the variable when one's value is not valid for its flag.
    """
    parser = _Parser(
        prog=prog,
        usage=f"mpirun -np N {'python ' if prog.endswith('.py') else ''}{prog} [options] [-- DRIVER COMMAND ...]",
        description="Start a Ray cluster over the MPI ranks (rank 0: head and driver, others: "
        "worker nodes), run the driver, exit with its exit code. The driver: the command after '--'; "
        "else MPIRAY_DRIVER (a shell-style command line; '--' wins over it); else the RLlib trainer "
        "(python -m train). With --join and neither, the nodes only serve. "
        "Every option also reads MPIRAY_<OPTION>.",
    )
    for o in OPTIONS:
        help_text = (o.help + (f" (default: {o.shown_default or o.default})")).replace("%", "%%")
        help_text += f" [env {o.variable}]"
        if o.switch:
            parser.add_argument(o.flag, dest=o.name, action=argparse.BooleanOptionalAction,
                                default=o.default_in(environ), help=help_text)
        else:
            parser.add_argument(o.flag, dest=o.name, type=_for_argparse(o.parse), choices=o.choices,
                                default=o.default_in(environ), help=help_text)
    parser.add_argument("--redis-password", default=None, help=argparse.SUPPRESS)
    return parser


# Options whose value is itself a runtime's options ("--nv", "--gpu --rocm"): argparse refuses a value that
# starts with '-' unless it is joined to its flag by '=', which the pages' `--container-flags "--nv"` is not.
DASH_VALUE_FLAGS = ("--container-flags",)


def _dash_values_joined(argv: list[str]) -> list[str]:
    """argv with each DASH_VALUE_FLAGS flag and the word after it joined as FLAG=VALUE."""
    joined: list[str] = []
    words = iter(argv)
    for word in words:
        value = next(words, None) if word in DASH_VALUE_FLAGS else None
        joined.append(word if value is None else f"{word}={value}")
    return joined


def parse_args(argv: Sequence[str], environ: Mapping[str, str] | None = None, with_driver: bool = True,
               prog: str = "mpiray run", *, keywords: Mapping[str, Any] | None = None) -> Config:
    """argv (without the program name) -> Config. Raises ConfigError (exit code 2) on bad input.

    with_driver=False: the library's (the driver is the calling script), so nothing after '--'.
    prog: what the messages tell the user to ask for --help (`mpiray run`, `start_ray.py`, `mpiray.init()`).
    keywords: options' values as init() was given them (a number, a Path, a dict), in place of their flags.
    """
    environ = os.environ if environ is None else environ
    argv = list(argv)
    launcher_argv, driver = argv, _env_driver(environ) or list(DEFAULT_DRIVER)
    given = "--" in argv or _env_driver(environ) is not None
    if "--" in argv:
        split = argv.index("--")
        launcher_argv, driver = argv[:split], argv[split + 1:]
    parser = build_parser(environ, prog)
    for warning in unknown_settings(environ, [o.variable for o in OPTIONS] + list(OTHER_VARIABLES), prog):
        say(environ, "warning", warning)
    args, extra = parser.parse_known_args(_dash_values_joined(launcher_argv))
    if extra:
        parser.error(
            f"unrecognized arguments: {' '.join(extra)}. A driver command goes after '--', "
            f"e.g. {prog} -- python my_driver.py"
        )
    for name, value in (keywords or {}).items():
        try:
            setattr(args, name, BY_NAME[name].take(value))
        except BadValue as error:  # worded as argparse words a flag's
            parser.error(f"argument {BY_NAME[name].flag}: {error}")
    if args.interface and args.address_rule:
        parser.error("give --interface or --address-rule, not both: each names the network the nodes advertise")
    if args.container and args.autoscale:
        parser.error("--autoscale and --container do not go together yet: Ray's autoscaler runs mpiray's node provider, "
                     "which submits worker jobs with the batch system's commands, inside the image")
    if args.spares and args.autoscale:
        parser.error("--spares and --autoscale do not go together: Ray's autoscaler replaces a lost node with a new "
                     "worker job by itself")
    if args.join and args.autoscale:
        parser.error("--autoscale and --join do not go together: the joined cluster's own job runs its autoscaler")
    if not with_driver or (args.join and not given):
        driver = []  # the library's (the calling script), or a joining job's nodes that just serve
    elif not driver:
        parser.error("nothing after '--': give the driver command, e.g. -- python my_driver.py")
    if args.redis_password is not None:
        say(environ, "warning", "--redis-password is ignored: Ray no longer uses Redis; the cluster "
            "is protected by a per-job token instead (see --auth).")
    return sites.apply(Config(driver=tuple(driver), **{o.name: getattr(args, o.name) for o in OPTIONS}))


def library_config(options: Mapping[str, object], environ: Mapping[str, str] | None = None) -> Config:
    """mpiray.init(**options) -> Config, checked exactly as the same flags would be (MPIRAY_* too).

    log_dir="x" (or a Path) stands for --log-dir x; resources={"accel": 2} for --resources '{"accel": 2}';
    auth=False for --no-auth; None for "not given".
    """
    environ = os.environ if environ is None else environ
    for name in options:
        if name not in BY_NAME:
            close = close_matches(name, BY_NAME)
            hint = f"did you mean {close[0]}?" if close else f"the options are: {', '.join(sorted(BY_NAME))}"
            raise ConfigError(f"mpiray.init() has no option {name!r} ({hint})")
        if BY_NAME[name].not_a_keyword:
            raise ConfigError(f"mpiray.init() does not take {name}= ({BY_NAME[name].flag} is the command line's): "
                              f"{BY_NAME[name].not_a_keyword}")
    given = {name: value for name, value in options.items() if value is not None}
    config = parse_args([], environ, with_driver=False, prog="mpiray.init()", keywords=given)
    for o in OPTIONS:
        if o.not_a_keyword and getattr(config, o.name) != o.default:  # set by its MPIRAY_ variable
            raise ConfigError(f"{o.variable} is set, which mpiray.init() does not take: {o.not_a_keyword}")
    return config
