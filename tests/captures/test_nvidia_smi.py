"""Real ``nvidia-smi`` captures (tests/data/captures/nvidia-smi): the CUDA version the driver
supports, read by the parser preflight uses, and for the plain table (what the CUDA section
falls back to when ``--version`` has no CUDA line) end to end: the real node script through the
real local transport with a stand-in nvidia-smi that prints the capture (its ``--query-gpu``
rows come from the SSH lab's 'healthy' stand-in; its ``--version`` answers as drivers without
that option do)."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterkit.config.load import load_file
from clusterkit.nodes import device_parsers as D
from clusterkit.nodes.transport import LocalRunner
from clusterkit.preflight.engine import Status
from clusterkit.preflight.run import run_preflight
from clusterkit.tooltext import ParseFailure
from tests.captures.capture import Capture, captures, env_with, stand_in
from tests.conftest import REPO

CAPTURES = captures("nvidia-smi")
TABLES = [c for c in CAPTURES if c.header["command"] == "nvidia-smi"]
HEALTHY_SMI = REPO / "tests" / "sshlab" / "profiles" / "healthy" / "bin" / "nvidia-smi"
NO_VERSION = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"

SITE = """\
name: cap
scheduler: {kind: slurm, partition: gpu}
nodes: {nodelist: "node1", gpus_per_node: 8}
software: {cuda: "%s"}
"""


@pytest.mark.parametrize("cap", CAPTURES, ids=[c.name for c in CAPTURES])
def test_cuda_version_read_off_by_hand(cap: Capture) -> None:
    got = D.parse_cuda_version(cap.body)
    if cap.expected["cuda"] is None:     # drivers before 410 print none; a vGPU host says "Not Found"
        assert isinstance(got, ParseFailure) and got.reason == cap.expected["why"], got
    else:
        assert got == cap.expected["cuda"]


@pytest.mark.parametrize("cap", TABLES, ids=[c.name for c in TABLES])
def test_preflight_reads_the_table_through_the_node_script(cap: Capture, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    stand_in(bin_dir, "nvidia-smi", cap.body, by_args={"--version": NO_VERSION}, other=str(HEALTHY_SMI))
    env = env_with(bin_dir)
    version = cap.expected["cuda"]
    for need, status in ((version or "10.0", Status.OK if version else Status.FAIL), ("99.0", Status.FAIL)):
        site_path = tmp_path / f"site-{need}.yaml"
        site_path.write_text(SITE % need)
        report = run_preflight(load_file(str(site_path)), stage="single-node", transport="local",
                               runner=LocalRunner(command_timeout_s=30, env=env))
        (node,) = report.nodes
        cuda = next(c for c in node.checks if c.check == "gpu.cuda")
        assert cuda.status is status
        assert cuda.message.split(" <")[0] == f"CUDA {version}" if version else cap.expected["why"] in cuda.message
