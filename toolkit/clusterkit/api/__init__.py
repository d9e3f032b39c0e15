"""clusterkit from Python: what the command line does, as objects (``from clusterkit import Site``).

The command line is a thin layer over this module: each command parses its options, calls one
of these functions or methods and prints what comes back, so the two cannot drift apart.
``docs/api.md`` is the reference; the README's "From Python" section has a runnable example.

::

    from clusterkit import Site

    site = Site.load("local")
    job = site.submit(["python", "examples/allreduce.py"], gpus_per_node=2)
    result = job.wait(timeout=300)
    print(result.state, result.exit_status)

Errors are :class:`~clusterkit.errors.ClusterkitError` subclasses; one about an input of the
request names its field path (``err.field == "settings.zero_stage"``), never a CLI option.

Heavy imports (paramiko, submitit) happen inside the method that needs them, so importing this
module costs no more than planning a job.
"""

from __future__ import annotations

from .job import Job, JobResult, LogLine, WaitTimeout, diagnose_logs, doctor_job, jobs
from .nodes import NodeHistory, node_history
from .request import job_request
from .rundir import RunDir
from .site import Plan, Site, drift, sites

__all__ = ["Job", "JobResult", "LogLine", "NodeHistory", "Plan", "RunDir", "Site", "WaitTimeout", "diagnose_logs",
           "doctor_job", "drift", "job_request", "jobs", "node_history", "sites"]

