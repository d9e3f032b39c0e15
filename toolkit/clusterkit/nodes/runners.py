"""The runner for a transport, configured from a site: what ``preflight`` and the admin
commands' ``--probe`` both start from (imports paramiko only for ssh)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from clusterkit.errors import InputError
from clusterkit.vocab import TRANSPORTS


def make_runner(site: Any, transport: str, *, accept_new_host_keys: bool = False,
                srun_args: Sequence[str] = ()) -> Any:
    """The Runner for a transport, configured from the site (imports paramiko only for ssh);
    ``srun_args`` follow the srun step's own options."""
    from clusterkit.nodes import transport as R

    ssh = site.ssh
    if transport == "ssh":
        return R.SSHRunner.from_site(ssh, accept_new_host_keys=accept_new_host_keys)
    if transport == "local":
        return R.LocalRunner(command_timeout_s=float(ssh.command_timeout_s), fanout=int(ssh.fanout))
    if transport == "srun":
        return R.SrunRunner(command_timeout_s=float(ssh.command_timeout_s), fanout=int(ssh.fanout),
                            extra_args=[*site_srun_args(site), *srun_args])
    raise InputError(f"choose one of {', '.join(TRANSPORTS)}", field="transport", value=repr(transport))


def site_srun_args(site: Any) -> list[str]:
    """Outside an allocation srun asks Slurm for one: in the site's partition and account.
    Inside one (a job script's first step) the allocation already says where."""
    if os.environ.get("SLURM_JOB_ID"):
        return []
    sched = site.scheduler
    args = [f"--partition={sched.partition}"] if sched.partition else []
    return args + ([f"--account={sched.account}"] if sched.account else [])
