"""Every step of the job script that can fail ends the job with a result and its reason
(`clusterkit status` shows it), and the launcher never starts."""

from __future__ import annotations

from pathlib import Path

from tests.jobscript.conftest import site_file
from tests.jobscript.harness import until


def assert_failed(j, status: int, reason: str) -> None:  # type: ignore[no-untyped-def]
    assert j.wait() == status, j.log()
    assert j.result() == f"{status}\n", j.log()
    assert j.reason() == reason + "\n"
    assert f"clusterkit: {reason}" in j.log() or f"clusterkit: error: {reason}" in j.log(), j.log()
    assert j.rank_pids() == [], "the launcher started after a failed step"
    assert j.calls("srun") == []


def test_allocation_that_cannot_be_listed(job) -> None:
    """No falling back to the render-time hostfile when Slurm cannot say which hosts it granted."""
    j = job(JS_HOSTNAMES="fail").start()
    assert_failed(j, 1, "cannot list the allocated hosts: scontrol show hostnames node[1-2] failed")
    assert "Unable to contact slurm controller" in j.log()


def test_allocation_listing_no_host(job) -> None:
    j = job(JS_HOSTNAMES="empty").start()
    assert_failed(j, 1, "scontrol show hostnames node[1-2] listed no host: no rendezvous head")


def test_hostfile_that_cannot_be_written(job) -> None:
    j = job(launcher="deepspeed")
    (j.run_dir / "hostfile.4321").mkdir()       # the temporary file's name is taken by a directory
    j.start()
    assert_failed(j, 1, f"cannot write the hostfile {j.run_dir}/hostfile.4321 from the allocation")


def test_hostfile_comes_from_the_allocation(job) -> None:
    """Slurm granted node3 and node4, not the render-time node1 and node2."""
    j = job(launcher="deepspeed", SLURM_JOB_NODELIST="node[3-4]")
    assert (j.run_dir / "hostfile").read_text() == "node1 slots=1\nnode2 slots=1\n"
    j.start()
    until("the hostfile from the allocation",
          lambda: (j.run_dir / "hostfile").read_text() == "node3 slots=1\nnode4 slots=1\n")
    assert "-o show job" not in " ".join(j.calls("scontrol"))


def test_missing_module_command(job, tmp_path: Path) -> None:
    site = site_file(tmp_path, software__modules=["cuda/12.4"])
    j = job(site=str(site))
    j.env["PATH"] = j.env["PATH"].replace(str(Path(__file__).parent / "standins"), str(_without_module(tmp_path)))
    j.start()
    assert_failed(j, 1, "the site lists modules but this node has no 'module' command (Lmod or Environment Modules)")


def _without_module(tmp_path: Path) -> Path:
    """The stand-ins without ``module``: what a node without Lmod looks like."""
    here = Path(__file__).parent / "standins"
    out = tmp_path / "standins-no-module"
    out.mkdir(exist_ok=True)
    for f in here.iterdir():
        if f.name != "module":
            (out / f.name).symlink_to(f)
    return out


def test_failed_module_load(job, tmp_path: Path) -> None:
    site = site_file(tmp_path, software__modules=["cuda/12.4", "nccl/2.21"])
    j = job(site=str(site), JS_MODULE_FAIL="nccl/2.21").start()
    assert_failed(j, 1, "module load nccl/2.21 failed (see the module error above)")
    assert j.calls("module") == ["load cuda/12.4", "load nccl/2.21"]


def test_deepspeed_filter_naming_a_host_outside_the_allocation(job) -> None:
    j = job("--set", "exclude_slots=node3:1", "--set", "max_restarts=0", launcher="deepspeed", gpus=2,
            SLURM_JOB_NODELIST="node[1-2]")
    j.start()
    assert_failed(j, 2, "deepspeed exclude_slots node3:1: host node3 is not among the allocated nodes node[1-2]")
