"""Two partitions: a job for a partition that holds none of the site's nodes is refused before it
queues, naming the way (a site file per partition sharing a partial); a partition over the same
nodes (the testbed's ``high`` over its ``debug`` nodes) is the site's and queues."""

from __future__ import annotations

from pathlib import Path

import yaml

from .conftest import CK, REPO, Testbed
from .test_spares import _job_id


def _site(tmp_path: Path, nodelist: str) -> Path:
    data = yaml.safe_load((REPO / "site_configs" / "testbed.yaml").read_text())
    data["name"], data["nodes"]["nodelist"] = "testbed-parts", nodelist
    data["stages"] = {"multi-node": {"partition": "high"}}
    path = tmp_path / "testbed-parts.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_partition_without_the_sites_nodes_is_refused_before_queueing(ck, testbed: Testbed,  # type: ignore[no-untyped-def]
                                                                        tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    cli = CK(bed=testbed, state_dir=tmp_path / "state", runs=tmp_path / "runs", ck=ck)
    # the admin's site for another partition's nodes (gpu[01-04]), its multi-node stage in `high`
    site = _site(tmp_path, "gpu[01-04]")
    proc = cli("submit", "--site", str(site), "--nodes", "2", "--out", str(cli.runs / "other"), "--", "true")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert "partition high holds none of site testbed-parts's nodes (gpu[01-04])" in line, line
    assert "write a second site file, both extending one shared partial" in line, line
    assert not (cli.runs / "other").exists() and "Submitted" not in proc.stdout

    # the same partition over the site's own nodes queues
    same = _site(tmp_path, "node[1-4]")
    proc = cli("submit", "--site", str(same), "--nodes", "2", "--out", str(cli.runs / "same"), "--", "true")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "#SBATCH --partition=high\n" in (cli.runs / "same" / "job.sbatch").read_text()
    cli("cancel", _job_id(proc.stdout), timeout=120)
