"""Each kind of value the trainer's flags take, as argparse types (in the manner of mpiray/values.py): the value,
or argparse.ArgumentTypeError whose message says what was given and what to give instead. argparse prefixes the
flag: `python -m train: error: argument --stop-iters: expected a whole number of at least 1, or 'none', got 'x'`.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any, Optional

NONE_WORDS = ("none", "off", "no")
_OR_NONE = " or 'none'"


def _fail(message: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(message)


def _int(text: str, minimum: int, none: str = "") -> int:
    wanted = f"a whole number of at least {minimum}{none}"
    try:
        value = int(text)
    except ValueError:
        raise _fail(f"expected {wanted}, got {text!r}") from None
    if value < minimum:
        raise _fail(f"expected {wanted}, got {value}")
    return value


def _float(text: str, above: Optional[float], at_least: Optional[float], none: str = "") -> float:
    wanted = ("a number" + (f" above {above:g}" if above is not None else "")
              + (f" of at least {at_least:g}" if at_least is not None else "") + none)
    try:
        value = float(text)
    except ValueError:
        raise _fail(f"expected {wanted}, got {text!r}") from None
    if not math.isfinite(value) or (above is not None and value <= above) or (at_least is not None and value < at_least):
        raise _fail(f"expected {wanted}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """A whole number of at least 1."""
    return _int(text, 1)


def non_negative_int(text: str) -> int:
    """A whole number of at least 0."""
    return _int(text, 0)


def positive_float(text: str) -> float:
    """A finite number above 0."""
    return _float(text, above=0, at_least=None)


def non_negative_float(text: str) -> float:
    """A finite number of at least 0."""
    return _float(text, above=None, at_least=0)


def optional_int(text: str) -> Optional[int]:
    """A whole number of at least 1, or none/off/no (no limit)."""
    return None if text.lower() in NONE_WORDS else _int(text, 1, _OR_NONE)


def optional_float(text: str) -> Optional[float]:
    """A finite number of at least 0, or none/off/no."""
    return None if text.lower() in NONE_WORDS else _float(text, above=None, at_least=0, none=_OR_NONE)


def reward_target(text: str) -> float:
    """A finite number; none/off/no is +inf, a target never reached."""
    return math.inf if text.lower() in NONE_WORDS else _float(text, above=None, at_least=None,
                                                              none=" or 'none' (never stop on reward)")


def optional_str(text: str) -> Optional[str]:
    """A string, or none/off/no."""
    return None if text.lower() in NONE_WORDS else text


def json_object(text: str) -> dict[str, Any]:
    """A JSON object: '{"key": 1}'."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise _fail(f"not valid JSON ({error}): {text!r}; give an object like '{{\"key\": 1}}'") from None
    if not isinstance(value, dict):
        raise _fail(f"expected a JSON object like '{{\"key\": 1}}', got {text!r}")
    return value


def int_tuple(text: str) -> tuple[int, ...]:
    """Layer sizes: '256,256' or '[256, 256]'."""
    try:
        sizes = tuple(int(part) for part in text.strip("[]() ").split(",") if part.strip())
    except ValueError:
        raise _fail(f"expected comma-separated whole numbers like 256,256, got {text!r}") from None
    if not sizes or min(sizes) <= 0:
        raise _fail(f"expected layer sizes of at least 1 like 256,256, got {text!r}")
    return sizes


def str_tuple(text: str) -> tuple[str, ...]:
    """Comma-separated strings."""
    return tuple(part.strip() for part in text.split(","))
