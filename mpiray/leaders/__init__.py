"""Rank 0's step once the cluster is up (rank.state.Leader): the command line's driver command
(command.py), mpiray.init()'s calling script (script.py), or a joining job's nodes that just serve
(stay.py)."""
