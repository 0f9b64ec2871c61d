"""The labels each Ray node starts with (`ray start --labels`), so that Ray's label selectors (tasks', actors',
Ray Train's, placement groups' bundles, a Ray Job's entrypoint) can say which nodes: the job's and the batch
job's ids, the host, the rank, the role of the job's nodes (`--role`), the scheduler's partition or queue, and
the leaf switch where the scheduler knows the topology; and the user's own (`--labels K=V,...`).

Ray's rules (ray/_private/label_utils.py, Kubernetes' syntax): a key is an optional DNS-style prefix and a name
of at most 63 characters; a value at most 63 characters of letters, digits, `-`, `_` and `.`, starting and
ending with a letter or digit; the prefix `ray.io/` is Ray's own. mpiray's keys are under `mpiray.io/`. Values
from the machine (a host name, a job id) are made to fit; a user's label that does not fit is refused."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

PREFIX = "mpiray.io/"
RAY_PREFIX = "ray.io/"  # Ray's own labels (e.g. ray.io/node-id): Ray refuses a node that sets one
_NAME = r"[a-zA-Z0-9]([a-zA-Z0-9_.-]{0,61}[a-zA-Z0-9])?"
_VALUE = re.compile(rf"^({_NAME})?$")
_KEY = re.compile(rf"^(({_NAME})(\.{_NAME})*/)?{_NAME}$")
_BAD_CHARACTERS = re.compile(r"[^a-zA-Z0-9_.-]+")
MAX_VALUE = 63


def fitted(text: str) -> str:
    """A machine's word as a label value: other characters become `-`, at most 63, letters or digits at both
    ends ("" where nothing is left)."""
    value = _BAD_CHARACTERS.sub("-", text)[:MAX_VALUE]
    return value.strip("-_.")


def parse(text: str) -> dict[str, str]:
    """A user's `K=V,K=V` -> the labels, in order. Raises ValueError saying which pair is wrong and why."""
    labels: dict[str, str] = {}
    for pair in (p.strip() for p in text.split(",")):
        if not pair:
            continue
        key, equals, value = pair.partition("=")
        key, value = key.strip(), value.strip()
        if not equals or "=" in value:
            raise ValueError(f"{pair!r} is not KEY=VALUE (e.g. team=rl,pool=rollout)")
        if not _KEY.match(key) or len(key.rpartition("/")[2]) > MAX_VALUE:
            raise ValueError(f"label key {key!r}: letters, digits, '-', '_' and '.' (at most 63, a letter or digit at "
                             f"both ends), with an optional DNS-style prefix and '/'")
        if key.startswith((PREFIX, RAY_PREFIX)):
            raise ValueError(f"label key {key!r}: the prefixes {PREFIX} (mpiray's) and {RAY_PREFIX} (Ray's) are "
                             f"set by them, not by --labels")
        check_value(value, f"label {key!r}'s value")
        if key in labels:
            raise ValueError(f"label key {key!r} is given twice")
        labels[key] = value
    return labels


def check_value(value: str, what: str) -> str:
    """value if Ray takes it as a label value; else ValueError naming what it was."""
    if len(value) > MAX_VALUE or not _VALUE.match(value):
        raise ValueError(f"{what} {value!r}: at most 63 letters, digits, '-', '_' and '.', a letter or digit at "
                         f"both ends")
    return value


def roles(text: str) -> list[tuple[str, int, int | None]]:
    """--role's value -> (role, first rank, last rank or None for every rank after), in the order given: `NAME`
    for every rank, or `NAME=RANKS,...` with RANKS one rank (`2`), a range (`0-1`) or an open one (`2-`).
    Raises ValueError saying which part is wrong."""
    if "=" not in text:
        return [(check_value(text.strip(), "role"), 0, None)]
    found = []
    for part in (p.strip() for p in text.split(",")):
        name, equals, ranks = (word.strip() for word in part.partition("="))
        first, dash, last = ranks.partition("-")
        if not (equals and first.isdigit() and (not dash or not last or last.isdigit())):
            raise ValueError(f"--role part {part!r} is not NAME=RANKS (e.g. trainer=0-1,rollout=2-: ranks 0 and 1 "
                             f"are trainers, rank 2 on rollout)")
        end = None if dash and not last else int(last or first)
        if end is not None and end < int(first):
            raise ValueError(f"--role part {part!r}: the range runs backwards; give FIRST-LAST, e.g. 0-3")
        found.append((check_value(name, "role"), int(first), end))
    return found


def role_of(text: str, rank: int) -> str:
    """The role --role gives rank: the first part that names it; "main" where none does."""
    return next((name for name, first, last in roles(text) if first <= rank and (last is None or rank <= last)),
                "main")


def roles_problem(text: str, size: int) -> str | None:
    """What is wrong with --role's ranks for a job of size ranks: a part that names a rank it does not have (an open
    range, `2-`, names those it has from 2 on)."""
    for name, first, last in roles(text):
        if first >= size or (last is not None and last >= size):
            shown = str(first) if last == first else f"{first}-{last if last is not None else ''}"
            return (f"--role {name}={shown}: this job has {size} ranks (0-{size - 1}); name ranks it has, or start "
                    f"more ranks")
    return None


def from_text(text: str) -> dict[str, str]:
    """text()'s form back to the labels (values never hold ',' or '=': fitted)."""
    return dict(pair.split("=", 1) for pair in text.split(",") if pair)


def started_with(labels_text: str, ray_labels_text: str) -> dict[str, str]:
    """Every label a node starts with (--labels and Ray's own from the environment), sorted by key: what its
    manifest and cluster_info.json show."""
    return dict(sorted({**from_text(labels_text), **from_text(ray_labels_text)}.items()))


def text(labels: Mapping[str, str]) -> str:
    """Ray's `--labels` form: `k=v,k=v`, sorted by key."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


MARKET_TYPE = RAY_PREFIX + "market-type"  # Ray's: spot or on-demand (KubeRay's values)
GPU_DOMAIN = RAY_PREFIX + "gpu-domain"  # Ray's: the nodes whose GPUs share one NVLink domain
OVERRIDE_VARIABLE = "RAY_OVERRIDE_LABELS"  # JSON; how a platform sets Ray's own labels (a node's --labels cannot)


def ray_labels(*, market_type: str, host: str, gpus: int) -> dict[str, str]:
    """The labels under Ray's prefix that mpiray fills as a platform would: the market type (--market-type), and
    for a node with GPUs its GPU domain, one per node (its host: NVLink joins a node's GPUs, not two nodes')."""
    found = {MARKET_TYPE: market_type}
    if gpus and fitted(host):
        found[GPU_DOMAIN] = fitted(host)
    return found


def override_env(ray_labels_text: str, current: str | None) -> str:
    """RAY_OVERRIDE_LABELS for a node: ray_labels (text()'s form) into what the variable already holds (JSON, the
    user's: theirs win)."""
    theirs = json.loads(current) if current else {}
    return json.dumps({**from_text(ray_labels_text), **theirs}, sort_keys=True)


def node_labels(*, job: str, batch_job: str | None, host: str, rank: int, role: str, partition: str | None,
                switch: str | None, user: Mapping[str, str]) -> dict[str, str]:
    """Every label of one node: mpiray's (machine words fitted to Ray's rules, a missing one left out) and the
    user's. job: the cluster's job id; batch_job: the batch job that started this node (a joining or elastic
    job's own)."""
    ours = {"job": job, "batch-job": batch_job, "host": host, "rank": str(rank), "role": role,
            "partition": partition, "switch": switch}
    labels = {PREFIX + key: fitted(value) for key, value in ours.items() if value}
    return {**{key: value for key, value in labels.items() if value}, **user}
