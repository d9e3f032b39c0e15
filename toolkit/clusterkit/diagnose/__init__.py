"""``clusterkit doctor``: why a job died, on which node, and what to do now.

:mod:`lines` reads time, node and rank off one line; :mod:`catalogue` names the failures and
their signatures; :mod:`reader` streams log files and keeps the lines that matter;
:mod:`verdict` orders root cause before cascade; :mod:`core` joins logs and Slurm's view.
"""

from clusterkit.diagnose.catalogue import CATEGORIES
from clusterkit.diagnose.doctor import LogsUnreadable, diagnose_files, one_line, slurm_view

__all__ = ["CATEGORIES", "LogsUnreadable", "diagnose_files", "one_line", "slurm_view"]
