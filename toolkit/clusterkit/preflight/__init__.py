"""Preflight: check GPUs, drivers, InfiniBand/RoCE links and storage on the nodes before a job.

* :mod:`~clusterkit.preflight.parsers` - total, pure parsers of the node tools' output (mounts, df, modules)
* :mod:`~clusterkit.preflight.device_parsers` - the same for nvidia-smi and InfiniBand (sysfs, ibstat)
* :mod:`~clusterkit.preflight.engine`  - the check set, the one remote script, judging a node's output
* :mod:`~clusterkit.preflight.catalogue` - the checks (GPU, driver, InfiniBand, storage) chosen per stage
* :mod:`~clusterkit.preflight.report`  - per-node results, grouping, JSON, exit codes, site policy
* :mod:`~clusterkit.preflight.run`    - :func:`run_preflight`: fan the script out through a Runner

Importing this package is cheap: no SSH library is loaded until a transport is built.
"""
