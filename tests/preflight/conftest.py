"""Preflight end-to-end fixtures: an SSH lab of mixed virtual nodes and site files pointing at it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CLI
from tests.sshlab.lab import REFUSED, TARPIT, SSHLab, lab_unavailable_reason, start_lab

# 12 virtual nodes, one per kind of trouble plus four healthy ones, a dead address and a tarpit.
MIXED = {
    "node01": "healthy", "node02": "healthy", "node03": "gpu_missing", "node04": "ib_down",
    "node05": "old_driver", "node06": "no_lustre", "node07": "ecc_errors", "node08": "garbage_smi",
    "node09": "hung_mount", "node10": "hung_command", "node11": "healthy", "node12": "healthy",
    "dead01": REFUSED, "tarpit01": TARPIT,
}

SITE = """\
name: lab
scheduler: {{kind: slurm, partition: gpu}}
nodes: {{nodelist: "{nodelist}", gpus_per_node: 8, gpu_model: H100}}
ssh:
  port: {port}
  known_hosts: "{known_hosts}"
  connect_timeout_s: 2
  command_timeout_s: {command_timeout_s}
  fanout: 16
software: {{driver_min: "535.104", cuda: "12.4"}}
network:
  fabric: infiniband
  hcas: [mlx5_0, mlx5_1, mlx5_2, mlx5_3, mlx5_4, mlx5_5, mlx5_6, mlx5_7]
  port_rate_gbps: 400
storage:
  - {{path: /lustre/scratch, type: lustre, min_free_gb: 0.001, use: [data, checkpoints], timeout_s: 2}}
  - {{path: /home, type: nfs, use: [home]}}
preflight: {{policy: exclude, max_excluded_fraction: 0.9}}
"""


def write_site(path: Path, lab: SSHLab, nodelist: str = "node[01-12],dead01,tarpit01",
               known_hosts: str | None = None, command_timeout_s: float = 6) -> Path:
    """A site file for the lab (its port and known_hosts) with this nodelist."""
    path.write_text(SITE.format(nodelist=nodelist, port=lab.port, known_hosts=known_hosts or lab.known_hosts,
                                command_timeout_s=command_timeout_s))
    return path


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHLab]:
    reason = lab_unavailable_reason()
    if reason:
        pytest.skip(reason)
    lab = start_lab(MIXED, tmp_path_factory.mktemp("sshlab"))
    try:
        yield lab
    finally:
        lab.stop()


@pytest.fixture(scope="session")
def lab_site(lab: SSHLab, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_site(tmp_path_factory.mktemp("site") / "lab.yaml", lab)


@pytest.fixture(scope="session")
def lab_ck(lab: SSHLab) -> CLI:
    """The CLI as a process inside the lab's namespace with the lab's env (its ssh config, no
    agent), as a user would run it.  Session-wide like the lab, so a process-only ``CLI()``
    bound there rather than the per-test ``ck``."""
    return CLI().bind(process=True, wrap=lab.wrap, env={**lab.env(), "SSH_AUTH_SOCK": None})


def groups_by_node(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["host"]: n for n in report["nodes"]}
