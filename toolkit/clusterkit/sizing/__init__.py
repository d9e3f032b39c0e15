"""The memory model and recommendation behind ``clusterkit plan`` (docs/architecture.md)."""
