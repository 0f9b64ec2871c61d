"""Clusters across batch jobs: the user's registry of running clusters (registry.py), Ray's autoscaler
configured for worker jobs (autoscale.py) and the node provider it runs (provider.py), and what a user
runs from a shell against a running cluster: `mpiray attach` (attach.py) and `mpiray list` (listing.py)."""
