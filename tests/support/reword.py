"""Every human log message reworded: the same fields, other words. What reads events must not notice."""

from __future__ import annotations

import re

from mpiray.logs import events

MARK = "<<reworded>>"


def reword(kinds: dict = events.KINDS) -> dict[str, str]:
    """Rewrite each kind's text in place; returns the old texts (to put back)."""
    old = {}
    for name, kind in kinds.items():
        old[name] = kind.text
        fields = sorted(set(re.findall(r"{(\w+)", kind.text)))
        kind.text = f"{MARK} {name.upper()[::-1]} " + " / ".join("{" + field + "}" for field in fields)
    return old


def put_back(old: dict[str, str], kinds: dict = events.KINDS) -> None:
    for name, text in old.items():
        kinds[name].text = text
