"""The job script's hand-over to clusterkit's supervisor (templates/job-supervise.j2), where it
cannot happen: the job ends at once with the reason, and no rank starts."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from clusterkit.api import Plan, Site
from tests.jobscript.conftest import site_file
from tests.jobscript.harness import RANK, Job


def test_a_python_that_cannot_run_clusterkit_on_the_batch_host_ends_the_job_with_the_reason(tmp_path: Path) -> None:
    site = Site.load("testbed")
    planned = site.plan([str(RANK)], stage="multi-node", nodes=2, gpus_per_node=1, launcher="srun")
    missing = tmp_path / "no-such-venv" / "bin" / "python3"
    run = Plan(site, replace(planned.request, python=str(missing))).render(tmp_path / "run").path
    j = Job(run, tmp_path / "work", nodes=2).start()
    try:
        assert j.wait() == 1, j.log()
    finally:
        j.kill()
    assert j.rank_pids() == [] and j.calls("srun") == []
    assert j.result() == "1\n"
    reason = j.reason() or ""
    assert reason.startswith(f"clusterkit's Python {missing} (the interpreter that submitted this job) cannot "
                             "run clusterkit on "), reason


def test_a_sites_launch_template_from_before_the_supervisor_ends_the_job_with_the_reason(job, tmp_path: Path) -> None:
    own = tmp_path / "tpl"
    own.mkdir(mode=0o755)
    (own / "job-launch.step.j2").write_text(    # the shape of clusterkit's own before the supervisor
        'ck_cmd=({{ command }})\nck_start_launcher() {\n  srun bash -c true &\n  ck_child=$!\n}\n')
    j = job(site=str(site_file(tmp_path, templates=str(own)))).start()
    assert j.wait() == 1, j.log()
    assert j.rank_pids() == [] and j.calls("srun") == []
    assert j.reason() == ("the launch template (job-launch.step.j2 or job-launch.here.j2) sets no ck_launch and "
                          "ck_launch_mode: a site's copy from before clusterkit's supervisor? Update it from "
                          "clusterkit's\n")
