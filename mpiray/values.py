"""What an option's value may be: one function per kind of value, from the text of a flag or an MPIRAY_*
variable to the checked value. A value that does not fit raises BadValue, whose message says what was wrong
and what to give instead; options.py names the option (flag, variable or keyword) in front of it.

options.py gives each option its kind; tests/test_values.py is the table of what each kind takes and refuses.
"""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path

from mpiray.batch import environment
from mpiray.config import parse_bounds

TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off"}
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
MAX_SECONDS = 10**7  # ~115 days: past any batch walltime, far below what timers accept (threading.TIMEOUT_MAX)
MAX_COUNT = 10**6  # CPUs or GPUs per node: generous oversubscription, well inside Ray's fixed-point resources
MIN_OBJECT_STORE = 75 * 2**20  # Ray refuses smaller object stores (OBJECT_STORE_MINIMUM_MEMORY_BYTES)


class BadValue(ValueError):
    """A value its option cannot take; the message says why, and what to give instead."""


def _number(kind: type, text: str):
    try:
        value = kind(text)
    except ValueError:
        example = "a whole number, e.g. 4" if kind is int else "a number, e.g. 300"
        raise BadValue(f"not a number: {text!r} (give {example})") from None
    if kind is float and not math.isfinite(value):
        raise BadValue(f"must be a finite number, got {text!r}")
    return value


def parse_bytes(text: str) -> int:
    """'2G', '512M', '1000000' -> bytes (binary units)."""
    value = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = value[-1:] if value[-1:] in _UNITS else ""
    number = value[: len(value) - len(unit)]
    try:
        amount = float(number) * _UNITS[unit]
    except ValueError:
        raise BadValue(f"not a size: {text!r} (use e.g. 2G, 512M or bytes)") from None
    if not math.isfinite(amount):
        raise BadValue(f"not a size: {text!r} (a size must be finite, e.g. 2G)")
    if amount < 1:
        raise BadValue(f"size must be positive, got {text!r}")
    return int(amount)


def object_store_size(text: str) -> int:
    size = parse_bytes(text)
    if size < MIN_OBJECT_STORE:
        raise BadValue(f"{text!r} is below the 75M that Ray needs at least")
    return size


def count(text: str) -> int:
    value = _number(int, text)
    if value < 0:
        raise BadValue(f"must be >= 0, got {text}")
    if value > MAX_COUNT:
        raise BadValue(f"must be at most {MAX_COUNT}, got {text}")
    return value


def positive_count(text: str) -> int:
    value = count(text)
    if value == 0:
        raise BadValue(f"must be at least 1, got {text}")
    return value


def seconds(text: str) -> float:
    value = _number(float, text)
    if value < 0:
        raise BadValue(f"must be >= 0 seconds, got {text}")
    if value > MAX_SECONDS:
        raise BadValue(f"must be at most {MAX_SECONDS} seconds (~115 days), got {text}")
    return value


def positive_seconds(text: str) -> float:
    value = seconds(text)
    if value == 0:
        raise BadValue(f"must be > 0 seconds, got {text}")
    return value


def port(text: str) -> int:
    value = _number(int, text)
    if not 0 <= value <= 65535:
        raise BadValue(f"not a TCP port: {text} (use 1-65535, or 0 for a free one)")
    return value


def path(text: str) -> Path:
    if not text.strip():
        raise BadValue("empty path: give a directory")
    return Path(text)


def resources(text: str) -> str:
    """Ray's --resources: a JSON object of custom resource names and amounts, e.g. {"accel": 2}."""
    try:
        value = json.loads(text)
    except ValueError:
        raise BadValue(f"not JSON: {text!r} (give an object, e.g. '{{\"accel\": 2}}')") from None
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, (int, float)) and v >= 0
                                              and not isinstance(v, bool) for k, v in value.items()):
        raise BadValue(f"{text!r}: give an object of names and amounts >= 0, e.g. '{{\"accel\": 2}}'")
    return json.dumps(value, sort_keys=True)


def bounds(text: str) -> str:
    try:
        parse_bounds(text)
    except ValueError as error:
        raise BadValue(str(error)) from None
    return text


def interface(text: str) -> str:
    if not text.strip():
        raise BadValue("empty interface name: give one, e.g. ib0, or leave it out")
    return text


def job_id(text: str) -> str:
    if environment.safe_job_id(text) != text:
        raise BadValue(
            f"not a job id: {text!r} (use up to 100 letters, digits and . _ + -, not '.' or '..'; "
            "it names a directory under --log-dir)"
        )
    return text


def boolean(text: str) -> bool:
    """A switch's MPIRAY_* variable: 1/0, true/false, yes/no, on/off."""
    if text.strip().lower() in TRUE:
        return True
    if text.strip().lower() in FALSE:
        return False
    raise BadValue(f"{text!r} is not a boolean: use 1/0, true/false, yes/no")


def command(text: str) -> list[str]:
    """MPIRAY_DRIVER: a command line, split as a shell would."""
    try:
        return shlex.split(text)
    except ValueError as error:  # e.g. "No closing quotation"
        raise BadValue(f"{error} (it is split like a shell command line: close the quote or escape it)") from None
