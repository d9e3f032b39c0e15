"""A user's sweep script, checked with ``mypy --strict`` against the installed package (py.typed).

Not collected as a test: tests/api/test_api.py copies it out and runs mypy on it.
"""

from __future__ import annotations

from pathlib import Path

from clusterkit import ClusterkitError, InputError, Job, JobResult, Plan, RunDir, Site, WaitTimeout, jobs
from clusterkit.vocab import JobState


def sweep(site_name: str, stages: list[int]) -> dict[int, JobResult]:
    site: Site = Site.load(site_name)
    results: dict[int, JobResult] = {}
    for zero in stages:
        plan: Plan = site.plan(["python", "train.py"], launcher="deepspeed", settings={"zero_stage": zero})
        run: RunDir = plan.render(Path("runs") / f"zero{zero}")
        print(run.script, run.plan.world_size, len(run.sbatch))
        job: Job = site.submit(["python", "train.py"], settings={"zero_stage": zero}, preflight=False)
        try:
            results[zero] = job.wait(timeout=3600.0)
        except WaitTimeout:
            job.cancel(now=True)
            continue
        state: JobState = job.state()
        print(job.id, job.key, state.value, job.record.run_dir, results[zero].exit_status)
        for line in job.logs(follow=False):
            print(line.path, line)
        verdict = job.doctor().report["verdict"]
        print(verdict["category"])
    return results


def recent() -> list[str]:
    view = jobs(limit=5)
    return [str(row["job"]) for row in view.rows]


def field_of(err: ClusterkitError) -> str | None:
    if isinstance(err, InputError):
        return err.field
    return None


if __name__ == "__main__":
    print(sweep("local", [0, 1]), recent(), Job.find("1").id)
