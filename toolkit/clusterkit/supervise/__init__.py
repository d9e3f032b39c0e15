"""The job's supervisor: the one Python process a job script ``exec``s once its environment is
set up (docs/architecture.md §1, and §3 "Signals, requeue, budget").  It starts the launch
step, hears Slurm's signals itself (the time-limit warning, TERM), keeps the grace time, looks
for a preemption, requeues within the restart budget, judges a failed chain member and writes
the result and reason files.

:mod:`~clusterkit.supervise.decide` holds the decisions (facts in, an action out, no process);
:mod:`~clusterkit.supervise.endgame` acts on them through :mod:`clusterkit.slurmclient`;
``python -m clusterkit.supervise`` is its entry (:mod:`~clusterkit.supervise.__main__`).
"""
