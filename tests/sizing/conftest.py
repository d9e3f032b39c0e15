"""Shared helpers for the ``clusterkit plan`` tests: site files in tmp_path, ``plan --json`` parsed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CLI

H100_SITE = """\
name: h100x64
scheduler: {kind: slurm, partition: gpu, time: "04:00:00"}
nodes: {nodelist: "gpu[001-064]", gpus_per_node: 8, gpu_mem_gb: 80, mem_gb: 1024}
network: {fabric: infiniband, hcas: [mlx5_0, mlx5_1], socket_ifname: ib0}
storage:
  - {path: /lustre/scratch, type: lustre, use: [data, checkpoints]}
cost: {gpu_hour: 2.5, currency: USD}
"""

# a 2-node copy: too small for a 176B model
H100_TWO_NODES = H100_SITE.replace("h100x64", "h100x2").replace("gpu[001-064]", "gpu[1-2]")

# small GPUs: 8 GiB each, 64 GiB host, 2 nodes, no price
SMALL_SITE = """\
name: small
nodes: {nodelist: "n[1-2]", gpus_per_node: 8, gpu_mem_gb: 8, mem_gb: 64}
"""

# GPUs of 1 GiB: nothing with a 1B-parameter layer can fit, however many there are
TINY_SITE = """\
name: tiny
nodes: {nodelist: "t[1-4]", gpus_per_node: 8, gpu_mem_gb: 1, mem_gb: 64}
"""


@pytest.fixture
def site_file(tmp_path: Path) -> Callable[[str], str]:
    """Write a site config into tmp_path and return its path."""

    def write(text: str) -> str:
        name = text.split("\n", 1)[0].split(":", 1)[1].strip()
        path = tmp_path / f"{name}.yaml"
        path.write_text(text)
        return str(path)

    return write


@pytest.fixture
def plan_json(ck: CLI) -> Callable[..., dict[str, Any]]:
    """``clusterkit plan --json ARGS`` -> the parsed document (and it must succeed)."""

    def run(*args: str) -> dict[str, Any]:
        code, out, err = ck("plan", "--json", *args)
        assert code == 0, err
        assert err == ""
        return json.loads(out)

    return run


def by_key(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Candidates of a ``plan --json`` document by method key."""
    return {c["key"]: c for c in doc["candidates"]}
