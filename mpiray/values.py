"""What an option's value may be: one function per kind of value, from the text of a flag or an MPIRAY_*
variable, or an init() keyword's value as the caller gave it (a number, a Path, a dict of resources), to the
checked value. A value that does not fit raises BadValue, whose message says what was wrong and what to give
instead; options.py names the option (flag, variable or keyword) in front of it.

options.py gives each option its kind; tests/unit/test_values.py is the table of what each kind takes and refuses.
"""

from __future__ import annotations

import json
import math
import operator
import os
import shlex
from pathlib import Path
from typing import Any, Mapping

from mpiray.batch import environment
from mpiray.config import parse_bounds
from mpiray.errors import BadValue
from mpiray.host.resources import MIN_OBJECT_STORE
from mpiray.raynode import container as containers
from mpiray.raynode import labels as node_labels

TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off"}
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
MAX_SECONDS = 10**7  # ~115 days: past any batch walltime, far below what timers accept (threading.TIMEOUT_MAX)
MAX_COUNT = 10**6  # CPUs or GPUs per node: generous oversubscription, well inside Ray's fixed-point resources


def _number(kind: type, value: Any) -> Any:
    """Text, or a number as it is: a whole one (not a bool) for int, any real one for float."""
    example = "a whole number, e.g. 4" if kind is int else "a number, e.g. 300"
    try:
        if isinstance(value, bool):  # an int to Python, but no count or seconds to a user
            raise TypeError(value)
        if isinstance(value, str):
            number = kind(value)
        else:
            number = operator.index(value) if kind is int else float(value)  # index: no 4.0 for 4 either
    except (TypeError, ValueError):
        raise BadValue(f"not a number: {value!r} (give {example})") from None
    except OverflowError:  # an int past any float
        number = math.inf
    if kind is float and not math.isfinite(number):
        raise BadValue(f"must be a finite number, got {value!r}")
    return number


def _text(value: Any, example: str) -> str:
    if not isinstance(value, str):
        raise BadValue(f"not text: {value!r} (give e.g. {example!r})")
    return value


def parse_bytes(value: str | float) -> int:
    """'2G', '512M', '1000000' (binary units), or a number of bytes -> bytes."""
    number: Any = value
    scale = 1
    if isinstance(value, str):
        text = value.strip().upper().removesuffix("B").removesuffix("I")
        unit = text[-1:] if text[-1:] in _UNITS else ""
        number, scale = text[: len(text) - len(unit)], _UNITS[unit]
    try:
        if isinstance(number, bool):
            raise TypeError(number)
        amount = float(number) * scale
    except (TypeError, ValueError):
        raise BadValue(f"not a size: {value!r} (use e.g. 2G, 512M or bytes)") from None
    except OverflowError:  # an int past any float
        amount = math.inf
    if not math.isfinite(amount):
        raise BadValue(f"not a size: {value!r} (a size must be finite, e.g. 2G)")
    if amount < 1:
        raise BadValue(f"size must be positive, got {value!r}")
    return int(amount)


def object_store_size(value: str | float) -> int:
    size = parse_bytes(value)
    if size < MIN_OBJECT_STORE:
        raise BadValue(f"{value!r} is below the 75M that Ray needs at least")
    return size


def count(value: str | int) -> int:
    number = _number(int, value)
    if number < 0:
        raise BadValue(f"must be >= 0, got {value}")
    if number > MAX_COUNT:
        raise BadValue(f"must be at most {MAX_COUNT}, got {value}")
    return number


def positive_count(value: str | int) -> int:
    number = count(value)
    if number == 0:
        raise BadValue(f"must be at least 1, got {value}")
    return number


def seconds(value: str | float) -> float:
    number = _number(float, value)
    if number < 0:
        raise BadValue(f"must be >= 0 seconds, got {value}")
    if number > MAX_SECONDS:
        raise BadValue(f"must be at most {MAX_SECONDS} seconds (~115 days), got {value}")
    return number


def positive_seconds(value: str | float) -> float:
    number = seconds(value)
    if number == 0:
        raise BadValue(f"must be > 0 seconds, got {value}")
    return number


def fraction(value: str | float) -> float:
    number = _number(float, value)
    if not 0 <= number < 1:
        raise BadValue(f"must be a fraction from 0 up to (not including) 1, e.g. 0.25, got {value}")
    return number


def port(value: str | int) -> int:
    number = _number(int, value)
    if not 0 <= number <= 65535:
        raise BadValue(f"not a TCP port: {value} (use 1-65535, or 0 for a free one)")
    return number


def path(value: str | os.PathLike) -> Path:
    text = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(text, str):
        raise BadValue(f"not a path: {value!r} (give a directory, e.g. 'logs')")
    if not text.strip():
        raise BadValue("empty path: give a directory")
    return Path(text)


def resources(value: str | Mapping[str, float]) -> str:
    """Ray's --resources: custom resource names and amounts, as a JSON object ('{"accel": 2}') or a dict; the
    checked value is the JSON text, its names sorted."""
    amounts = value
    if isinstance(value, str):
        try:
            amounts = json.loads(value)
        except ValueError:
            raise BadValue(f"not JSON: {value!r} (give an object, e.g. '{{\"accel\": 2}}')") from None
    if not isinstance(amounts, Mapping) or not all(isinstance(k, str) and isinstance(v, (int, float)) and v >= 0
                                                   and not isinstance(v, bool) for k, v in amounts.items()):
        raise BadValue(f"{value!r}: give an object of names and amounts >= 0, e.g. '{{\"accel\": 2}}'")
    return json.dumps(dict(amounts), sort_keys=True)


def labels(value: str | Mapping[str, str]) -> str:
    """The user's node labels: `K=V,K=V` or a dict; the checked value is Ray's `--labels` text, sorted by key."""
    if isinstance(value, Mapping):
        value = ",".join(f"{key}={item}" for key, item in value.items())
    try:
        return node_labels.text(node_labels.parse(_text(value, "team=rl,pool=rollout")))
    except ValueError as error:
        raise BadValue(str(error)) from None


def role(value: str) -> str:
    """The role of this job's nodes (label mpiray.io/role): one label value, or one per rank range
    (`trainer=0-1,rollout=2-`); the checked text."""
    try:
        node_labels.roles(_text(value, "rollout"))
    except ValueError as error:
        raise BadValue(str(error)) from None
    return value


def market_type(value: str) -> str:
    """ray.io/market-type's value: one label value (Ray's users select spot or on-demand)."""
    try:
        return node_labels.check_value(_text(value, "spot"), "--market-type")
    except ValueError as error:
        raise BadValue(str(error)) from None


def bounds(value: str) -> str:
    text = _text(value, "1:8")
    try:
        parse_bounds(text)
    except ValueError as error:
        raise BadValue(str(error)) from None
    return text


def interface(value: str) -> str:
    if not _text(value, "ib0").strip():
        raise BadValue("empty interface name: give one, e.g. ib0, or leave it out")
    return value


def address_rule(value: str) -> str:
    """A site's naming rule for a node's high-speed address: the hostname as {host} (short) or {hostname}."""
    import string

    text = _text(value, "{host}.hsn.cm.polaris.alcf.anl.gov").strip()
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(text) if name is not None]
    except ValueError as error:  # a lone { or }
        raise BadValue(f"{text!r}: {error} (write the hostname as {{host}}, e.g. {{host}}.hsn.cm.polaris.alcf.anl.gov)") \
            from None
    unknown = sorted(set(fields) - {"host", "hostname"})
    if unknown or not fields:
        raise BadValue(f"{text!r} names {', '.join('{' + f + '}' for f in unknown) or 'no hostname'}: write the host's "
                       f"short name as {{host}} or its whole name as {{hostname}}, e.g. {{host}}.hsn.cm.polaris.alcf.anl.gov "
                       f"or {{host}}i")
    return text


def container(value: str) -> str:
    """--container KIND:IMAGE: a runtime mpiray knows and an image reference."""
    text = _text(value, "apptainer:/path/ray.sif").strip()
    try:
        containers.parse(text)
    except ValueError as error:
        raise BadValue(str(error)) from None
    return text


def shell_words(value: str) -> str:
    """A command line's words as one string, split as a shell would (--container-flags)."""
    text = _text(value, "--nv")
    command(text)
    return text


def job_id(value: str | int) -> str:
    """A job id as text, or a scheduler's number as it is (4711)."""
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else _text(value, "4711")
    if environment.safe_job_id(text) != text:
        raise BadValue(
            f"not a job id: {text!r} (use up to 100 letters, digits and . _ + -, not '.' or '..'; "
            "it names a directory under --log-dir)"
        )
    return text


def boolean(value: str | bool) -> bool:
    """A switch: True or False as they are, or a variable's text: 1/0, true/false, yes/no, on/off."""
    if isinstance(value, bool):
        return value
    if not isinstance(value, str):
        raise BadValue(f"{value!r} is not a boolean: use True or False")
    if value.strip().lower() in TRUE:
        return True
    if value.strip().lower() in FALSE:
        return False
    raise BadValue(f"{value!r} is not a boolean: use 1/0, true/false, yes/no")


def command(text: str) -> list[str]:
    """MPIRAY_DRIVER: a command line, split as a shell would."""
    try:
        return shlex.split(text)
    except ValueError as error:  # e.g. "No closing quotation"
        raise BadValue(f"{error} (it is split like a shell command line: close the quote or escape it)") from None
