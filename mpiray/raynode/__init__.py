"""One Ray node: its `ray start` command lines (commands.py), the private dir it lives in (private.py),
its whole life on a rank (node.py), the wrapper process that holds `ray start` until released and
watches the GCS (starter.py), what that process writes (output.py), the GCS queries (gcs.py), and
Ray's internals across releases (raycompat.py)."""
