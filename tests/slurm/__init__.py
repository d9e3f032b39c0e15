"""Tests that need the Slurm test cluster (tests/slurm/testbed.sh)."""
