"""``--array``/``--sweep`` on the command line: one-line errors with exit 2 and nothing written,
the dry run's task list, the site's ``scheduler.max_array_size``, and task ids on status/logs/cancel."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from clusterkit.actions import check_array_size
from clusterkit.api import job_request
from clusterkit.config.load import load_site
from clusterkit.errors import InputError, PlanError
from clusterkit.job import array as arrays
from tests.conftest import REPO, assert_one_line_error, make_plan


@pytest.mark.parametrize("args,needle", [
    (["--array", "0-3%0"], "--array '0-3%0': the throttle"),
    (["--array", "5-2"], "--array '5-2': the range '5-2' is empty"),
    (["--array", "0-3", "--sweep", "lr=1,2"], "--array '0-3': with --sweep"),
    (["--sweep", "lr"], "--sweep 'lr': give KEY=V1,V2"),
    (["--sweep", "lr=1", "--sweep", "Lr=2"], "swept twice"),
    (["--sbatch", "array=0-3"], "use submit --array or --sweep"),
])
def test_bad_array_options_are_one_line_errors_and_write_nothing(ck, tmp_path: Path, args: list[str],
                                                                 needle: str) -> None:
    out = tmp_path / "run"
    result = ck("submit", "--site", "testbed", "--out", str(out), "--dry-run", "--no-snapshot", *args, "--",
                "python", "t.py")
    assert_one_line_error(result, 2, needle)
    assert not out.exists()


def test_arrays_run_their_tasks_in_turn_on_a_local_site(ck, tmp_path: Path) -> None:
    result = ck("render", "--site", "local", "--out", str(tmp_path / "run"), "--array", "0-1", "--", "python", "t.py")
    assert result.code == 0, result.err
    assert "array: 2 task(s), one after another on this machine" in result.out
    script = (tmp_path / "run" / "job.sbatch").read_text()
    assert "for CK_ARRAY_INDEX in 0 1; do" in script and "#SBATCH" not in script


def test_the_sites_max_array_size_refuses_an_index_at_it(ck, tmp_path: Path) -> None:
    site = tmp_path / "small.yaml"
    site.write_text(f"extends: {REPO / 'site_configs' / 'testbed.yaml'}\nname: small\n"
                    "scheduler: {max_array_size: 4}\n")
    ok = ck("render", "--site", str(site), "--out", str(tmp_path / "ok"), "--array", "0-3", "--", "python", "t.py")
    assert ok.code == 0, ok.err
    bad = ck("render", "--site", str(site), "--out", str(tmp_path / "bad"), "--sweep", "a=1,2,3", "--sweep", "b=1,2",
             "--", "python", "t.py")
    assert_one_line_error(bad, 2, "6 tasks past MaxArraySize 4 (the site's scheduler.max_array_size)")
    assert not (tmp_path / "bad").exists()


def test_dry_run_lists_the_tasks_and_their_values(ck, tmp_path: Path) -> None:
    result = ck("submit", "--site", "testbed", "--out", str(tmp_path / "run"), "--dry-run", "--no-snapshot",
                "--sweep", "lr=0.1,0.2", "--sweep", "seed=1,2", "--array", "%3", "--", "python", "train.py", "--lr",
                "{lr}")
    assert result.code == 0, result.err
    assert "#SBATCH --array=0-3%3\n" in result.out and 'ck_cmd=(train.py --lr "${CK_SWEEP_LR}")' in result.out
    lines = [ln.removeprefix("clusterkit: dry run: ") for ln in result.err.splitlines()
             if "task" in ln and "run directory" not in ln]
    assert lines == ["array: 4 task(s) (#SBATCH --array=0-3%3), at most 3 at once", "  task 0: lr=0.1 seed=1",
                     "  task 1: lr=0.1 seed=2", "  task 2: lr=0.2 seed=1", "  task 3: lr=0.2 seed=2"]
    js = ck("submit", "--site", "testbed", "--out", str(tmp_path / "run2"), "--dry-run", "--no-snapshot", "--json",
            "--sweep", "lr=0.1,0.2", "--", "python", "train.py")
    assert json.loads(js.out)["array"] == {"spec": "0-1", "tasks": 2, "throttle": None, "task_list": [
        {"index": 0, "values": {"lr": "0.1"}}, {"index": 1, "values": {"lr": "0.2"}}]}


@pytest.mark.parametrize("ref", ["12_x", "12_3_4", "_3", "12_-1", "../12_3"])
def test_task_ids_from_users_are_checked(ck, tmp_path: Path, ref: str) -> None:
    result = ck("status", ref, env={"CLUSTERKIT_STATE_DIR": str(tmp_path)})
    assert_one_line_error(result, 2)


def test_a_task_of_a_job_that_is_no_array_names_no_record(ck, tmp_path: Path) -> None:
    result = ck("logs", "4242_1", env={"CLUSTERKIT_STATE_DIR": str(tmp_path)})
    assert_one_line_error(result, 2, "no job record")


@pytest.mark.parametrize("capture,limit,edit", [
    # read off by hand: "MaxArraySize            = 25000" / "= 1001"
    (REPO / "tests" / "data" / "captures" / "scontrol" / "config-gcm-23.02.2.txt", 25000, None),
    (REPO / "tests" / "data" / "sites" / "slurm-22.05" / "show-config.txt", 1001, None),
    # the 22.05 capture with its one MaxArraySize line changed to 500 (a cluster below the default)
    (REPO / "tests" / "data" / "sites" / "slurm-22.05" / "show-config.txt", 500,
     ("MaxArraySize            = 1001", "MaxArraySize            = 500")),
])
def test_submit_asks_slurm_for_max_array_size(capture: Path, limit: int, edit: tuple[str, str] | None) -> None:
    """Without the site key, planning holds an array to Slurm's default MaxArraySize (1001) before
    building it, and ``scontrol show config`` (here a real capture through the client seam)
    refuses, before queueing, an index at a lower cluster limit; one below it passes."""
    body = capture.read_text().split("# ---\n", 1)[-1]
    if edit is not None:
        assert edit[0] in body
        body = body.replace(*edit)
    asked: list[list[str]] = []

    def runner(argv, timeout):
        asked.append(list(argv))
        return subprocess.CompletedProcess(argv, 0, body, "")

    site = load_site("testbed")
    request = job_request(["python", "t.py"])
    below = min(limit, arrays.DEFAULT_MAX_ARRAY_SIZE) - 1
    check_array_size(site, make_plan(site, replace(request, array=arrays.request(f"0-{below}%8", []))), runner)
    if limit < arrays.DEFAULT_MAX_ARRAY_SIZE:
        plan = make_plan(site, replace(request, array=arrays.request(f"0-{limit}%8", [])))
        with pytest.raises(PlanError, match=rf"largest index {limit} past MaxArraySize {limit} "
                                            r"\(Slurm's scontrol show config\)"):
            check_array_size(site, plan, runner)
    else:   # past the default: refused while planning, naming the site key that allows more
        with pytest.raises(PlanError, match=r"past MaxArraySize 1001 \(Slurm's default; a cluster that allows "
                                            r"more: set the site's scheduler.max_array_size\)"):
            make_plan(site, replace(request, array=arrays.request(f"0-{limit}%8", [])))
    assert asked == [["scontrol", "show", "config"]] * (2 if limit < arrays.DEFAULT_MAX_ARRAY_SIZE else 1)


def test_the_python_api_takes_array_and_sweep(tmp_path: Path) -> None:
    from clusterkit.api import Site

    planned = Site.load("testbed").plan(["python", "t.py", "--seed", "{seed}"], sweep=["seed=1,2,3"], array="%1")
    assert planned.request.array is not None and planned.request.array.throttle_only == 1
    run = planned.render(tmp_path / "run")
    assert run.plan.array is not None and run.plan.array.spec == "0-2%1"
    assert 'ck_cmd=(t.py --seed "${CK_SWEEP_SEED}")' in run.sbatch and "#SBATCH --array=0-2%1\n" in run.sbatch
    with pytest.raises(InputError) as err:
        Site.load("testbed").plan(["python", "t.py"], array="0-")
    assert err.value.problems[0].field == "array"


def test_status_of_a_sweep_lists_each_task_with_its_values(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``status ARRAYJOB``'s task lines (the statuses as Slurm's tables give them) carry the sweep's values."""
    from clusterkit.cli.arrays import show_tasks
    from clusterkit.scheduler.base import JobStatus
    from clusterkit.scheduler.records import JobRecord

    arr = {"spec": "0-1", "indices": [0, 1], "throttle": None, "sweep_keys": ["lr", "seed"],
           "sweep_values": [["0.1", "1"], ["0.2", "1"]]}
    rec = JobRecord(job_id="4242", scheduler="slurm", site="testbed", site_source="s.yaml", stage="single-node",
                    launcher="torchrun", job_name="sw", nnodes=1, world_size=8, command=["python", "t.py"],
                    run_dir=str(tmp_path), script=str(tmp_path / "job.sbatch"), submitted_at="2026-01-01T00:00:00Z",
                    host="login", plan={"array": arr})
    st = JobStatus("RUNNING", tasks=(("4242_0", JobStatus("COMPLETED", exit_code=0)),
                                     ("4242_1", JobStatus("FAILED", exit_code=1))))
    show_tasks(rec, st)
    assert capsys.readouterr().out.splitlines() == [
        "  task 4242_0         COMPLETED   lr=0.1 seed=1, exit code 0",
        "  task 4242_1         FAILED      lr=0.2 seed=1, exit code 1"]
