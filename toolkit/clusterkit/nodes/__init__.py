"""Reaching nodes and reading what they print: the layer ``preflight`` (checks) and ``sites``
(admin commands) both stand on.

* :mod:`~clusterkit.nodes.transport` - run one script on many hosts: local, ssh, srun
* :mod:`~clusterkit.nodes.runners`  - the runner for a transport, configured from a site
* :mod:`~clusterkit.nodes.script`   - the one remote script of sections, and splitting its output
* :mod:`~clusterkit.nodes.sections` - the fact sections (GPUs, CUDA, InfiniBand, modules, mounts, df, net)
* :mod:`~clusterkit.nodes.parsers`, :mod:`~clusterkit.nodes.device_parsers` - total, pure
  parsers of what the node tools print
* :mod:`~clusterkit.nodes.facts`    - a node's facts for the admin commands (no judging)

Importing this package is cheap: no SSH library is loaded until a transport is built.
"""
