"""Spare nodes and the in-job preflight's setting, as a request is planned and refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterkit.config.load import load_site
from clusterkit.errors import ConfigError, InputError, PlanError
from clusterkit.job.request import JobRequest
from tests.conftest import make_plan

SITE = """\
name: tb
scheduler: {{kind: slurm, time: "00:05:00"}}
nodes: {{nodelist: "node[1-4]", gpus_per_node: 8, cpus_per_node: 8}}
storage:
  - {{path: /tmp, type: local, shared: true}}
preflight: {{in_job: {in_job}}}
"""


def _site(tmp_path: Path, in_job: str = "true"):  # type: ignore[no-untyped-def]
    path = tmp_path / "tb.yaml"
    path.write_text(SITE.format(in_job=in_job))
    return load_site(str(path))


def _plan(site, nodes: int, **settings: object):  # type: ignore[no-untyped-def]
    return make_plan(site, JobRequest(stage="multi-node", command=("python", "t.py"), nodes=nodes,
                                      settings=settings, run_dir="/tmp/ck-spares-plan"))


def test_spares_add_to_the_allocation_not_to_the_job(tmp_path: Path) -> None:
    plan = _plan(_site(tmp_path), 3, spares=1)
    assert (plan.nnodes, plan.spares, plan.allocated, plan.world_size) == (3, 1, 4, 24)
    assert ("nodes", "4") in plan.sbatch
    assert json.loads(json.dumps(plan.to_dict()))["spares"] == 1


def test_spares_need_the_in_job_preflight_and_enough_nodes(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="spare nodes are chosen by the job's own preflight, which is off"):
        _plan(_site(tmp_path, "false"), 2, spares=1)
    with pytest.raises(PlanError, match="3 nodes and 2 spare\\(s\\) requested but site tb has 4 nodes"):
        _plan(_site(tmp_path), 3, spares=2)


def test_preflight_in_job_takes_perf_from_the_site_or_the_request(tmp_path: Path) -> None:
    assert _plan(_site(tmp_path, "perf"), 2).preflight_in_job == "perf"
    assert _plan(_site(tmp_path), 2, preflight_in_job="perf").preflight_in_job == "perf"
    assert _plan(_site(tmp_path, "perf"), 2, preflight_in_job="false").preflight_in_job is False
    with pytest.raises(InputError, match=r"settings\.preflight_in_job='fast': choose true, false or perf"):
        _plan(_site(tmp_path), 2, preflight_in_job="fast")
    with pytest.raises(ConfigError, match=r"preflight\.in_job: .*choose true, false or perf"):
        _site(tmp_path, "sometimes")


def test_the_command_line_names_the_setting_and_spares(ck, tmp_path: Path) -> None:
    bad = ck("render", "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--set", "preflight_in_job=fast",
             "--out", str(tmp_path / "r"), "--", "python", "t.py")
    assert bad.code == 2 and "Traceback" not in bad.err
    assert bad.err == "clusterkit: error: --set preflight_in_job='fast': choose true, false or perf\n", bad.err
    off = ck("submit", "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--spares", "1", "--dry-run",
             "--out", str(tmp_path / "s"), "--", "python", "t.py")
    assert off.code == 2 and off.err == ("clusterkit: error: --set spares=1: spare nodes are chosen by the job's own "
                                         "preflight, which is off: add --set preflight_in_job=true (or perf)\n")
    assert not (tmp_path / "s").exists()


BIG = """\
name: big
scheduler: {{kind: slurm, time: "01:00:00"}}
nodes: {{nodelist: "n[01-40]", gpus_per_node: 8}}
network: {{fabric: infiniband, hcas: [mlx5_0]}}
storage:
  - {{path: /lustre, type: lustre, shared: true}}
stages:
  large-cluster: {{launcher: torchrun{spares}}}
"""


def _render(ck, tmp_path: Path, spares: str, *args: str):  # type: ignore[no-untyped-def]
    site = tmp_path / "big.yaml"
    site.write_text(BIG.format(spares=spares))
    out = tmp_path / f"r{len(list(tmp_path.iterdir()))}"
    r = ck("render", "--site", str(site), *args, "--out", str(out), "--", "python", "t.py")
    nodes = next((ln for ln in (out / "job.sbatch").read_text().splitlines() if ln.startswith("#SBATCH --nodes=")),
                 None) if r.code == 0 else None
    return r, nodes


def test_large_cluster_jobs_take_three_percent_spares_unless_the_site_or_the_user_says(ck, tmp_path: Path) -> None:
    r, nodes = _render(ck, tmp_path, "", "--stage", "large-cluster", "--nodes", "34")
    assert r.code == 0 and nodes == "#SBATCH --nodes=36", r.err   # 3 % of 34, rounded up
    assert "spare nodes 2 (default)" in r.out
    r, nodes = _render(ck, tmp_path, ", spares: 10%", "--stage", "large-cluster", "--nodes", "20")
    assert nodes == "#SBATCH --nodes=22" and "spare nodes 2 (stage)" in r.out, r.out
    r, nodes = _render(ck, tmp_path, ", spares: 0", "--stage", "large-cluster", "--nodes", "20")
    assert nodes == "#SBATCH --nodes=20", r.out
    r, nodes = _render(ck, tmp_path, "", "--stage", "large-cluster", "--nodes", "20", "--set", "spares=0")
    assert nodes == "#SBATCH --nodes=20" and "spare nodes" not in r.out, r.out
    # multi-node keeps none; a default that does not fit takes what is left and says so
    r, nodes = _render(ck, tmp_path, "", "--stage", "multi-node", "--nodes", "8")
    assert nodes == "#SBATCH --nodes=8", r.out
    r, nodes = _render(ck, tmp_path, "", "--stage", "large-cluster", "--nodes", "39")
    assert r.code == 0 and nodes == "#SBATCH --nodes=40", r.err
    assert ("warning: 1 spare node(s), not the 2 of the large-cluster default (3%): the site has no more nodes "
            "beside the job's") in r.err
    # the in-job preflight off: no default spares, said once
    r, nodes = _render(ck, tmp_path, "", "--stage", "large-cluster", "--nodes", "20", "--set", "preflight_in_job=false")
    assert nodes == "#SBATCH --nodes=20" and "no spare nodes (the large-cluster default is 3%)" in r.err, r.err


@pytest.mark.parametrize("value", ["3 %", "101%", "-1", "true", "lots"])
def test_a_stage_spares_that_is_no_count_or_share_is_refused_at_its_line(ck, tmp_path: Path, value: str) -> None:
    r, _ = _render(ck, tmp_path, f", spares: {value}", "--stage", "large-cluster", "--nodes", "20")
    assert r.code == 2 and "Traceback" not in r.err, r.err
    assert r.err.startswith(f"clusterkit: error: {tmp_path / 'big.yaml'}:8: stages.large-cluster.spares"), r.err
    assert len(r.err.strip().splitlines()) == 1, r.err
