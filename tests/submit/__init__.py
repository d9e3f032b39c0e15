"""Job records, status parsers and the local site (no Slurm needed)."""
