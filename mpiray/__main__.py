"""`python -m mpiray COMMAND ...`: the `mpiray` command (mpiray.cli.main)."""

import sys

from mpiray.cli import main

sys.exit(main())
