"""Batch systems: what started a rank (environment.py: every scheduler's and launcher's variables, as
tables), what a rank must say to its process manager itself (pmi.py: Hydra's finalize before an os._exit), and
the worker jobs an elastic cluster submits (jobs.py: one interface, BatchSystem, with a back end per scheduler in
slurm.py and pbs.py).

    systems.SYSTEMS["slurm"]() / systems.SYSTEMS["pbs"]()   -> a BatchSystem: script, submit, states, cancel

Importing the package imports none of them: every rank reads environment.py and pmi.py, only an elastic cluster the rest.
"""
