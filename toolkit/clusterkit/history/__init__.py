"""Nodes that keep failing, remembered across jobs (docs/architecture.md §3, Node history).

:mod:`.store` is the bounded, validated history file of a site; :mod:`.sources` turns what
clusterkit already records (a before-submit preflight's report, the nodes a job's in-job
preflight dropped, doctor's verdict, the nodes the recovery inside the allocation dropped, in
:mod:`.recovery`) into events; :mod:`.summary` counts them per node and
decides which nodes a new job keeps out.
"""
