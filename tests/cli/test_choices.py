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
    r = resolve(site, JobRequest(stage="multi-node", command=("python", "t.py"), settings={"precision": "fp16"}),
                allocates=True)
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
    result = ck("submit", "--site", "testbed", "--dry-run", "--no-snapshot",
                "--out", str(tmp_path / "r"), "--", "python", "t.py")
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


def _choices(ck, *args: str) -> dict[str, dict[str, str]]:
    result = ck("render", "--site", "ib-h100", "--nodes", "2", "--json", *args)
    assert result.code == 0, result.err
    return json.loads(result.out)["choices"]


def test_choices_read_what_the_users_own_command_and_configs_say(ck, tmp_path: Path) -> None:
    """Issue 40: not bf16/ddp/ZeRO 2 where the command or the user's own config decides otherwise."""
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
                              "fp16": {"enabled": True}, "zero_optimization": {
                                  "stage": 3, "offload_optimizer": {"device": "cpu"}}}))
    got = _choices(ck, "--launcher", "deepspeed", "--", "python", "train.py", "--deepspeed_config", str(ds))
    where = f"config {ds}"
    assert {k: (got[k]["value"], got[k]["from"]) for k in ("precision", "zero_stage", "offload", "micro_batch",
                                                         "grad_accum")} == {
        "precision": ("fp16", where), "zero_stage": ("3", where), "offload": ("optimizer", where),
        "micro_batch": ("4", where), "grad_accum": ("2", where)}
    # DeepSpeed's own defaults where the file says nothing
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1}))
    got = _choices(ck, "--launcher", "deepspeed", "--", "python", "train.py", "--deepspeed_config", str(bare))
    assert (got["precision"]["value"], got["zero_stage"]["value"]) == ("fp32", "0")
    # clusterkit's own config: its settings, as before
    got = _choices(ck, "--launcher", "deepspeed", "--", "python", "train.py")
    assert (got["precision"], got["zero_stage"]) == ({"value": "bf16", "from": "default"},
                                                     {"value": "2", "from": "default"})


def test_megatron_choices_follow_its_flags_and_its_fp32_default(ck) -> None:
    got = _choices(ck, "--launcher", "megatron", "--", "python", "pretrain_gpt.py", "--fp16",
                   "--micro-batch-size", "2", "--global-batch-size", "64")
    assert got["precision"] == {"value": "fp16", "from": "command --fp16"}
    assert got["micro_batch"] == {"value": "2", "from": "command --micro-batch-size"}
    assert got["grad_accum"] == {"value": "2", "from": "command --global-batch-size"}   # 64 / (2 x 16)
    got = _choices(ck, "--launcher", "megatron", "--", "python", "pretrain_gpt.py")
    assert got["precision"]["value"] == "fp32"
    got = _choices(ck, "--launcher", "megatron", "--set", "precision=bf16", "--", "python", "pretrain_gpt.py")
    assert got["precision"] == {"value": "bf16", "from": "flag"}


def test_accelerate_and_torchrun_choices_follow_the_users_config_and_flags(ck, tmp_path: Path) -> None:
    cfg = tmp_path / "acc.yaml"
    cfg.write_text("distributed_type: FSDP\nmixed_precision: fp16\n")
    got = _choices(ck, "--launcher", "accelerate", f"--launcher-arg=--config_file={cfg}", "--", "python", "t.py")
    assert (got["strategy"], got["precision"]) == ({"value": "fsdp", "from": f"config {cfg}"},
                                                   {"value": "fp16", "from": f"config {cfg}"})
    got = _choices(ck, "--launcher", "accelerate", "--", "python", "t.py", "--deepspeed", "ds.json", "--bf16", "True")
    assert (got["strategy"]["value"], got["precision"]) == ("deepspeed", {"value": "bf16", "from": "command --bf16"})
    got = _choices(ck, "--launcher", "accelerate", "--", "python", "t.py", "--fp16", "False")
    assert got["precision"] == {"value": "bf16", "from": "default"}
    got = _choices(ck, "--launcher", "torchrun", "--", "python", "t.py", "--deepspeed=ds.json")
    assert got["strategy"] == {"value": "deepspeed", "from": "command --deepspeed ds.json"}
