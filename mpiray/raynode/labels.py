"""The labels each Ray node starts with (`ray start --labels`), so that Ray's label selectors (tasks', actors',
Ray Train's, placement groups' bundles, a Ray Job's entrypoint) can say which nodes: the job's and the batch
job's ids, the host, the rank, the role of the job's nodes (`--role`), the scheduler's partition or queue, and
the leaf switch where the scheduler knows the topology; and the user's own (`--labels K=V,...`).

Ray's rules (ray/_private/label_utils.py, Kubernetes' syntax): a key is an optional DNS-style prefix and a name
of at most 63 characters; a value at most 63 characters of letters, digits, `-`, `_` and `.`, starting and
ending with a letter or digit; the prefix `ray.io/` is Ray's own. mpiray's keys are under `mpiray.io/`. Values
from the machine (a host name, a job id) are made to fit; a user's label that does not fit is refused."""

from __future__ import annotations

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


def from_text(text: str) -> dict[str, str]:
    """text()'s form back to the labels (values never hold ',' or '=': fitted)."""
    return dict(pair.split("=", 1) for pair in text.split(",") if pair)


def text(labels: Mapping[str, str]) -> str:
    """Ray's `--labels` form: `k=v,k=v`, sorted by key."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def node_labels(*, job: str, batch_job: str | None, host: str, rank: int, role: str, partition: str | None,
                switch: str | None, user: Mapping[str, str]) -> dict[str, str]:
    """Every label of one node: mpiray's (machine words fitted to Ray's rules, a missing one left out) and the
    user's. job: the cluster's job id; batch_job: the batch job that started this node (a joining or elastic
    job's own)."""
    ours = {"job": job, "batch-job": batch_job, "host": host, "rank": str(rank), "role": role,
            "partition": partition, "switch": switch}
    labels = {PREFIX + key: fitted(value) for key, value in ours.items() if value}
    return {**{key: value for key, value in labels.items() if value}, **user}
