"""The job: stage plan, launchers, NCCL policy, rendering and the run directory (docs/architecture.md §5)."""
