"""Schedulers: Slurm and local behind one interface; job records (docs/architecture.md)."""
