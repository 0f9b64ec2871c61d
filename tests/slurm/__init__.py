"""The multi-host Slurm testbed (network namespaces on one machine); see README.md."""
