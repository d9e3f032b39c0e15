"""``render`` and ``submit`` say what was chosen and where from (flag, stage, site, default);
job.sbatch opens with what the job does and the command line that made it (quoted as data);
a request's problems are reported all at once."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from clusterkit.config.load import load_site
from clusterkit.job.request import JobRequest, resolve
from clusterkit.job.settings import Settings
from tests.conftest import assert_one_line_error

STAGED = """\
extends: {base}
name: staged
stages:
  multi-node: {{launcher: deepspeed, time: "02:00:00"}}
"""


def _staged(tmp_path: Path) -> Path:
    from tests.conftest import REPO

    site = tmp_path / "staged.yaml"
    site.write_text(STAGED.format(base=REPO / "site_configs" / "testbed.yaml"))
    return site


def test_render_prints_each_choice_with_its_source(ck, tmp_path: Path) -> None:
    out = tmp_path / "r"
    result = ck("render", "--site", str(_staged(tmp_path)), "--stage", "multi-node", "--set", "zero_stage=3",
                "--set", "max_restarts=1", "--out", str(out), "--", "python", "train.py")
    assert result.code == 0, result.err
    line = next(x for x in result.out.splitlines() if x.startswith("  choices: "))
    for piece in ("launcher deepspeed (stage)", "nodes 2 (default)", "GPUs per node 8 (site)", "ZeRO stage 3 (flag)",
                  "precision bf16 (default)", "micro batch 1 (default)", "time limit 02:00:00 (stage)",
                  "restarts 1 (flag)", "container none (default)", "preflight in job no (site)"):
        assert piece in line, (piece, line)
    assert f"# choices: {line.removeprefix('  choices: ')}\n" in (out / "job.sbatch").read_text()


def test_render_json_carries_the_choices(ck, tmp_path: Path) -> None:
    result = ck("render", "--json", "--site", "ib-h100", "--launcher", "torchrun", "--out", str(tmp_path / "r"),
                "--", "python", "train.py")
    assert result.code == 0, result.err
    doc = json.loads(result.out)["choices"]
    assert doc["launcher"] == {"value": "torchrun", "from": "flag"}
    assert doc["time"] == {"value": "12:00:00", "from": "site"}
    assert doc["strategy"] == {"value": "the training script's", "from": "default"}   # torchrun: the script chooses
    assert doc["max_restarts"] == {"value": "3", "from": "site"}   # a single-node job requeues too
    assert "zero_stage" not in doc and "grad_accum" not in doc and "gpus_per_node" in doc


def test_sources_are_kept_for_every_setting_by_name(tmp_path: Path) -> None:
    site = load_site(str(_staged(tmp_path)))
    r = resolve(site, JobRequest(stage="multi-node", command=("python", "t.py"), settings={"precision": "fp16"}))
    assert set(Settings.model_fields) <= set(r.sources)
    assert (r.sources["precision"], r.sources["launcher"], r.sources["time"], r.sources["grad_accum"]) == (
        "flag", "stage", "stage", "default")


def test_job_sbatch_opens_with_what_it_does_and_the_command_line(ck, tmp_path: Path) -> None:
    out = tmp_path / "r"
    hostile = "x'; echo pwned\n$(touch /tmp/ck-pwned)\\"
    argv = ["render", "--site", "testbed", "--out", str(out), "--job-name", "made", "--", "python", "train.py",
            "--tag", hostile]
    result = ck(*argv)
    assert result.code == 0, result.err
    script = (out / "job.sbatch").read_text()
    head = script.split("#SBATCH", 1)[0].splitlines()
    assert head[4:6] == ["#", "# ---- what this job does: runs train.py --tag $'x\\x27; echo pwned\\x0a$(touch "
                              "/tmp/ck-pwned)\\x5c'"]
    assert 'the launch line is under "# ---- launch" below' in head[6] and "# ---- launch: torchrun" in script
    made = next(x for x in head if x.startswith("# made by: ")).removeprefix("# made by: ")
    # the recorded words are data: bash reads them back as exactly the words given, running nothing
    words = subprocess.run(["bash", "-c", f"printf '%s\\0' {made}"], capture_output=True, text=True, check=True)
    assert words.stdout.split("\0")[:-1] == ["clusterkit", *argv]
    assert all(line.startswith("#") for line in head)
    subprocess.run(["bash", "-n", str(out / "job.sbatch")], check=True)


def test_the_python_api_says_so(tmp_path: Path) -> None:
    from clusterkit import Site

    run = Site.load("local").plan(["python", "t.py"]).render(tmp_path / "r")
    assert "# made by: the Python API (clusterkit.Site.plan)\n" in run.sbatch


def test_dry_run_prints_the_choices_on_stderr(ck, tmp_path: Path) -> None:
    result = ck("submit", "--site", "testbed", "--dry-run", "--out", str(tmp_path / "r"), "--", "python", "t.py")
    assert result.code == 0, result.err
    assert "clusterkit: dry run: choices: launcher torchrun (default), nodes 1 (default)" in result.err
    assert result.out == (tmp_path / "r" / "job.sbatch").read_text()


def test_plan_errors_are_reported_all_at_once(ck, tmp_path: Path) -> None:
    result = ck("render", "--site", "ib-h100", "--stage", "multi-node", "--nodes", "12", "--gpus-per-node", "9",
                "--set", "tp=2", "--set", "zero_stage=3", "--exclude", "gpu999", "--out", str(tmp_path / "r"),
                "--", "python", "t.py")
    assert_one_line_error(result, 2)
    assert result.err.splitlines() == [
        "clusterkit: error: --nodes 12 is outside stage multi-node (2-8 nodes); stage large-cluster holds 12 nodes; "
        "use --stage large-cluster",
        "clusterkit: error: --gpus-per-node 9: site ib-h100 nodes have 8 GPUs",
        "clusterkit: error: --exclude: cannot exclude gpu999: not in ib-h100's nodelist gpu[001-064]",
        "clusterkit: error: --set tp: the torchrun launcher does not use it; it is used by megatron",
        "clusterkit: error: --set zero_stage: the torchrun launcher does not use it; it is used by deepspeed",
    ]
    assert not (tmp_path / "r").exists()


def test_plan_render_says_which_choices_the_plan_made(ck, tmp_path: Path) -> None:
    out = tmp_path / "p"
    result = ck("plan", "--site", "ib-h100", "--model-params", "70B", "--nodes", "4", "--set", "micro_batch=2",
                "--render", "--out", str(out), "--", "python", "train.py", cwd=tmp_path)
    assert result.code == 0, result.err
    line = next(x for x in result.out.splitlines() if x.startswith("  choices: "))
    for piece in ("launcher deepspeed (plan)", "nodes 4 (flag)", "GPUs per node 8 (plan)", "ZeRO stage 3 (plan)",
                  "micro batch 2 (flag)", "precision bf16 (default)", "time limit 12:00:00 (site)"):
        assert piece in line, (piece, line)
    assert "(plan)" in (out / "job.sbatch").read_text()


def test_plan_render_of_a_torchrun_recommendation_says_plan(ck, tmp_path: Path) -> None:
    result = ck("plan", "--site", "ib-h100", "--model-params", "7B", "--render", "--json", "--out",
                str(tmp_path / "q"), "--", "python", "train.py", cwd=tmp_path)
    assert result.code == 0, result.err
    doc = json.loads(result.out)["rendered"]["choices"]
    assert doc["launcher"] == {"value": "torchrun", "from": "plan"}
    assert doc["strategy"] == {"value": "fsdp", "from": "plan"}
    assert doc["nodes"] == {"value": "1", "from": "plan"}
