"""Per-task GPU binding for ``--launcher srun`` (``--set gpu_bind=task``, the site's ``nodes.gpu_bind``,
``stages.<stage>.gpu_bind``): the task's body keeps its own GPU of those Slurm gave the step on
its node, run here by bash as each task runs it; the setting is refused for a launcher that starts
its ranks itself, and its source is on the choices line."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from clusterkit.job.gpubind import task_binding
from tests.conftest import REPO, assert_one_line_error


def _bound(vendor: str = "nvidia", localid: int = 1, **env: str) -> subprocess.CompletedProcess[str]:
    """The binding as one task runs it: what the task's program then sees."""
    var = {"nvidia": "CUDA_VISIBLE_DEVICES", "amd": "ROCR_VISIBLE_DEVICES", "intel": "ZE_AFFINITY_MASK"}[vendor]
    base = {k: v for k, v in os.environ.items() if not k.endswith(("_VISIBLE_DEVICES", "AFFINITY_MASK"))}
    body = task_binding(vendor) + f'bash -c \'printf "%s\\n" "${var}"\''   # type: ignore[arg-type]
    return subprocess.run(["bash", "-c", body], capture_output=True, text=True, timeout=10,
                          env={**base, "SLURM_LOCALID": str(localid), "SLURM_PROCID": "5", **env})


@pytest.mark.parametrize("vendor,var", [("nvidia", "CUDA_VISIBLE_DEVICES"), ("amd", "ROCR_VISIBLE_DEVICES"),
                                        ("intel", "ZE_AFFINITY_MASK")])
def test_a_task_keeps_its_own_gpu_of_the_steps(vendor: str, var: str) -> None:
    done = _bound(vendor, 2, **{var: "4,5,6,7"})
    assert (done.returncode, done.stdout) == (0, "6\n"), done.stderr


def test_without_slurms_list_the_task_takes_the_gpu_of_its_number() -> None:
    done = _bound(localid=3)
    assert (done.returncode, done.stdout) == (0, "3\n"), done.stderr


def test_a_task_slurm_bound_already_keeps_its_gpu() -> None:
    done = _bound(localid=3, CUDA_VISIBLE_DEVICES="GPU-1f2e")
    assert (done.returncode, done.stdout) == (0, "GPU-1f2e\n"), done.stderr


def test_a_task_beyond_the_steps_gpus_ends_with_why() -> None:
    done = _bound(localid=2, CUDA_VISIBLE_DEVICES="0,1")
    assert done.returncode == 1 and done.stdout == ""
    assert "clusterkit: task 5: no GPU 2 among CUDA_VISIBLE_DEVICES=0,1" in done.stderr


def _render(ck, tmp_path: Path, *args: str, site: str = "testbed", launcher: str = "srun"):  # type: ignore[no-untyped-def]
    out = tmp_path / "run"
    result = ck("render", "--site", site, "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "4",
                "--launcher", launcher, *args, "--out", str(out), "--", "python", "train.py")
    return result, out


def _site(tmp_path: Path, body: str) -> str:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\nextends: {REPO / 'site_configs' / 'testbed.yaml'}\n{body}")
    return str(path)


def test_the_flag_binds_and_says_so(ck, tmp_path: Path) -> None:
    result, out = _render(ck, tmp_path, "--set", "gpu_bind=task")
    assert result.code == 0, result.err
    script = (out / "job.sbatch").read_text()
    assert "ck_gpu_list[$SLURM_LOCALID]" in script and "export CUDA_VISIBLE_DEVICES; " in script
    assert "GPU binding one GPU per task (flag)" in result.out


def test_unbound_by_default(ck, tmp_path: Path) -> None:
    result, out = _render(ck, tmp_path)
    assert result.code == 0, result.err
    assert "ck_gpu_list" not in (out / "job.sbatch").read_text()
    assert "GPU binding none (default)" in result.out


def test_the_site_binds_the_stage_and_the_flag_turn_it_off(ck, tmp_path: Path) -> None:
    site = _site(tmp_path, "nodes:\n  nodelist: node[1-4]\n  gpus_per_node: 4\n  gpu_bind: task\n")
    result, out = _render(ck, tmp_path, site=site)
    assert result.code == 0, result.err
    assert "ck_gpu_list" in (out / "job.sbatch").read_text() and "one GPU per task (site)" in result.out
    result, out = _render(ck, tmp_path / "off", "--set", "gpu_bind=none", site=site)
    assert "ck_gpu_list" not in (out / "job.sbatch").read_text() and "GPU binding none (flag)" in result.out
    staged = _site(tmp_path / "st", "nodes:\n  nodelist: node[1-4]\n  gpus_per_node: 4\n  gpu_bind: task\n"
                   "stages:\n  multi-node:\n    gpu_bind: none\n")
    result, out = _render(ck, tmp_path / "st", site=staged)
    assert "ck_gpu_list" not in (out / "job.sbatch").read_text() and "GPU binding none (stage)" in result.out


def test_refused_for_a_launcher_that_starts_its_ranks_itself(ck, tmp_path: Path) -> None:
    result, _ = _render(ck, tmp_path, "--set", "gpu_bind=task", launcher="torchrun")
    assert_one_line_error(result, 2, "gpu_bind", "srun")


def test_a_bad_value_is_refused(ck, tmp_path: Path) -> None:
    result, _ = _render(ck, tmp_path, "--set", "gpu_bind=single")
    assert_one_line_error(result, 2, "gpu_bind")
    assert_one_line_error(ck("sites", "validate", _site(tmp_path, "nodes:\n  nodelist: node1\n  gpus_per_node: 1\n"
                                                                  "  gpu_bind: yes\n")), 2, "nodes.gpu_bind")
