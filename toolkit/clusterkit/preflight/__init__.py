"""Preflight: check GPUs, drivers, InfiniBand/RoCE links and storage on the nodes before a job.

Reaching the nodes and reading what they print is :mod:`clusterkit.nodes`; this package judges.

* :mod:`~clusterkit.preflight.engine`  - the check set, judging a node's script output
* :mod:`~clusterkit.preflight.catalogue` - the checks (GPU, driver, InfiniBand, storage) chosen per stage
* :mod:`~clusterkit.preflight.report`  - per-node results, grouping, JSON, exit codes, site policy
* :mod:`~clusterkit.preflight.run`    - :func:`run_preflight`: fan the script out through a Runner

Importing this package is cheap: no SSH library is loaded until a transport is built.
"""
