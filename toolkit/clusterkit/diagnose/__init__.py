"""``clusterkit doctor``: why a job died, on which node, and what to do now.

:mod:`lines` reads time, node and rank off one line; :mod:`catalogue` names the failures and
their signatures; :mod:`reader` streams log files and keeps the lines that matter;
:mod:`verdict` orders root cause before cascade; :mod:`doctor` joins logs and Slurm's view
(:func:`diagnose_job`, :func:`diagnose_logs`: what ``clusterkit doctor`` calls).
"""

from clusterkit.diagnose.catalogue import CATEGORIES
from clusterkit.diagnose.doctor import (
    Diagnosis,
    LogsUnreadable,
    diagnose_files,
    diagnose_job,
    diagnose_logs,
    one_line,
    slurm_view,
)

__all__ = ["CATEGORIES", "Diagnosis", "LogsUnreadable", "diagnose_files", "diagnose_job", "diagnose_logs", "one_line",
           "slurm_view"]
