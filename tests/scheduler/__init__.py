"""The Slurm tables clusterkit reads (sacct, squeue, scontrol), on captured text."""
