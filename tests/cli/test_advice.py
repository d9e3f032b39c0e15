"""``plan``, ``render`` and ``doctor`` agree: every piece of advice is something the user can type
for that launcher.  torchrun takes ``--set strategy=`` and ``--set micro_batch=`` and hands them
to the training script (``CK_STRATEGY``, ``CK_MICRO_BATCH``); doctor's gpu-oom advice names only
what the job's launcher takes."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from clusterkit.diagnose import catalogue
from clusterkit.vocab import LAUNCHERS
from tests.conftest import CLI, REPO


def _sets(text: str) -> list[str]:
    return [pair.replace("=N", "=2") for pair in re.findall(r"--set (\w+=\S+)", text)]


def _renders(ck, tmp_path: Path, launcher: str, sets: list[str], name: str) -> None:
    args = [w for pair in sets for w in ("--set", pair)]
    result = ck("render", "--site", "ib-h100", "--launcher", launcher, *args, "--out", str(tmp_path / name),
                "--", "python", "train.py")
    assert result.code == 0, (launcher, sets, result.err)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_doctor_gpu_oom_advice_is_typable_for_each_launcher(ck, tmp_path: Path, launcher: str) -> None:
    advice = catalogue.advice("gpu-oom", launcher)
    sets = _sets(" ".join(advice))
    _renders(ck, tmp_path, launcher, sets, "oom")
    assert f"--launcher {launcher}" in advice[1]
    if launcher in ("torchrun", "accelerate", "srun"):
        assert sets == ["micro_batch=2"] and "$CK_MICRO_BATCH" in advice[0]
    elif launcher in ("horovod", "colossalai", "mpirun"):
        assert sets == [] and "training script" in advice[0]
    else:
        assert sets == ["micro_batch=2", "grad_accum=2"]


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_doctor_host_oom_advice_is_typable_for_each_launcher(ck, tmp_path: Path, launcher: str) -> None:
    _renders(ck, tmp_path, launcher, _sets(" ".join(catalogue.advice("host-oom", launcher))), "host")


def test_torchrun_hands_strategy_and_micro_batch_to_the_script(ck, tmp_path: Path) -> None:
    _renders(ck, tmp_path, "torchrun", ["strategy=fsdp", "micro_batch=4"], "set")
    script = (tmp_path / "set" / "job.sbatch").read_text()
    assert "export CK_STRATEGY=fsdp\n" in script and "export CK_MICRO_BATCH=4\n" in script
    notes = json.loads((tmp_path / "set" / "plan.json").read_text())["launch"]["notes"]
    assert notes == ["strategy fsdp: passed to the training script as CK_STRATEGY, which builds DDP or FSDP; "
                     "the launch is the same"]
    # not given: nothing exported, and plan.json says the script chooses
    _renders(ck, tmp_path, "torchrun", [], "unset")
    script = (tmp_path / "unset" / "job.sbatch").read_text()
    assert "CK_STRATEGY" not in script and "CK_MICRO_BATCH" not in script
    assert "the training script chooses DDP or FSDP" in json.loads(
        (tmp_path / "unset" / "plan.json").read_text())["launch"]["notes"][0]


@pytest.mark.parametrize("size, launcher", [("7B", None), ("7B", "torchrun"), ("70B", "torchrun"),
                                            ("13B", "deepspeed"), ("7B", "accelerate"), ("176B", None)])
def test_plans_render_hint_is_a_command_that_works(ck, tmp_path: Path, size: str, launcher: str | None) -> None:
    args = ["--launcher", launcher] if launcher else []
    result = ck("plan", "--site", "ib-h100", "--model-params", size, *args)
    assert result.code == 0, result.err
    hint = next(line for line in result.out.splitlines() if line.startswith("render it: "))
    words = shlex.split(hint.removeprefix("render it: ").split("  (or:")[0])
    assert words[:2] == ["clusterkit", "render"] and words[-2:] == ["--", "COMMAND"]
    rendered = ck(*words[1:-2], "--out", str(tmp_path / "run"), "--", "python", "train.py")
    assert rendered.code == 0, (hint, rendered.err)
    doc = json.loads((tmp_path / "run" / "plan.json").read_text())
    for pair in _sets(hint):
        key, _, value = pair.partition("=")
        assert str(doc["settings"][key]) == value


def test_plan_render_passes_fsdp_to_a_torchrun_script(ck, tmp_path: Path) -> None:
    out = tmp_path / "r"
    result = ck("plan", "--site", "ib-h100", "--model-params", "7B", "--launcher", "torchrun", "--render",
                "--out", str(out), "--", "python", "train.py")
    assert result.code == 0, result.err
    assert "torchrun passes strategy=fsdp to the training script as $CK_STRATEGY" in result.out
    assert json.loads((out / "plan.json").read_text())["settings"]["strategy"] == "fsdp"
    assert "export CK_STRATEGY=fsdp\n" in (out / "job.sbatch").read_text()


# A training script's side, run by real torchrun on a local site: it reads CK_MICRO_BATCH and
# fails as PyTorch does when a batch does not fit (the line is PyTorch's, as captured in
# tests/diagnose/corpus/ovdino-48-cuda-oom.log: this machine has no GPU to run out of).
TRAIN = """\
import os, sys
micro = int(os.environ.get("CK_MICRO_BATCH", "8"))
print(f"micro batch {micro}, strategy {os.environ.get('CK_STRATEGY', 'script default')}", flush=True)
if micro > 2:
    print("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 152.00 MiB (GPU 0; 23.64 GiB total "
          "capacity; 22.38 GiB already allocated; 91.31 MiB free; 22.97 GiB reserved in total by PyTorch)",
          file=sys.stderr, flush=True)
    sys.exit(1)
print("step 1 ok", flush=True)
"""


@pytest.mark.torch
def test_doctor_advice_for_a_torchrun_oom_fixes_it_when_typed(ck: CLI, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    local = ck.bind(process=True, cwd=REPO, timeout=180, env={"CLUSTERKIT_STATE_DIR": str(tmp_path / "state")})
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    first = local("submit", "--site", "local", "--gpus-per-node", "1", "--out", str(tmp_path / "a"), "--",
                  "python", str(script))
    assert first.code == 1, first.out + first.err
    job = re.search(r"Submitted job (\d+)", first.out)
    assert job is not None, first.out
    doc = json.loads(local("doctor", job.group(1), "--json").out)
    assert doc["verdict"]["category"] == "gpu-oom", doc["verdict"]
    advice = doc["verdict"]["advice"]
    assert "$CK_MICRO_BATCH" in advice[0] and "grad_accum" not in " ".join(advice)
    sets = [w for pair in _sets(advice[0]) for w in ("--set", pair)]
    second = local("submit", "--site", "local", "--gpus-per-node", "1", *sets, "--set", "strategy=fsdp",
                   "--out", str(tmp_path / "b"), "--", "python", str(script))
    assert second.code == 0, second.out + second.err
    assert "micro batch 2, strategy fsdp" in second.out and "step 1 ok" in second.out
