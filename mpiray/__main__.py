"""`python -m mpiray logs JOB` (the `mpiray` command): as `mpiray.cli.main`."""

import sys

from mpiray.cli import main

sys.exit(main())
