"""clusterkit: from a laptop to a thousand-GPU Slurm cluster, one plan at a time."""

__version__ = "0.1.0"
