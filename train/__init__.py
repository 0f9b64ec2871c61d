"""RLlib training driver for clusters started by start_ray.py (or a local Ray).

``python -m train --help`` lists the flags; ``python -m train plot`` and
``python -m train evaluate`` draw reward curves and roll out checkpoints.
"""
