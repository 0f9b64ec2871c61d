#!/usr/bin/env python3
"""The options table of docs/options.md, made from the one declaration of the options (mpiray/options.py's
OPTIONS): a new or changed option is a new table here, never one edited by hand.

    python docs/options_table.py      # rewrite the table in docs/options.md

tests/unit/test_docs.py checks that the page shows the table this makes.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's mpiray, not another one installed

from mpiray.options import OPTIONS  # noqa: E402

PAGE = ROOT / "docs" / "options.md"
MARKED = re.compile(r"(<!-- options table[^\n]*-->\n)(.*?)(\n<!-- end of options table -->)", re.S)


def options_table() -> str:
    """Every option, its variable and init() keyword, its default and what it does."""
    rows = ["| option | variable, `init()` keyword | default | meaning |", "|---|---|---|---|"]
    for o in OPTIONS:
        flag = f"`{o.flag}` / `--no-{o.flag[2:]}`" if o.switch else f"`{o.flag}`"
        default = o.shown_default or str(o.default)
        choices = f" ({' / '.join(o.choices)})" if o.choices else ""
        keyword = f"`{o.name}=`" if not o.not_a_keyword else "not an `init()` keyword"
        rows.append(f"| {flag} | `{o.variable}`, {keyword} | {default} | {o.help}{choices} |")
    return "\n".join(rows)


def main() -> int:
    page = PAGE.read_text()
    written = MARKED.sub(lambda found: found.group(1) + options_table() + found.group(3), page, count=1)
    PAGE.write_text(written)
    print(f"{PAGE.relative_to(ROOT)}: the options table {'rewritten' if written != page else 'was up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
