"""Preflight: check GPUs, drivers, InfiniBand/RoCE links and storage on the nodes before a job.

* :mod:`~clusterkit.preflight.parsers` - total, pure parsers of the node tools' output
* :mod:`~clusterkit.preflight.checks`  - declarative checks, the one remote script, evaluation
* :mod:`~clusterkit.preflight.report`  - per-node results, grouping, JSON, exit codes, site policy
* :mod:`~clusterkit.preflight.run`    - :func:`run_preflight`: fan the script out through a Runner

Importing this package is cheap: no SSH library is loaded until a transport is built.
"""
