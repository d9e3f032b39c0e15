"""CPUs, ports, storage and settings as rendered through the CLI.

What the job asks Slurm for (CPUs and memory of a partial node, CPUs on every srun step), the
per-job port every launcher uses, where a multi-node run directory may live, and that no
``--set`` key is accepted and then ignored; containers and host modules:
``tests/cli/test_launch_containers.py``.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from clusterkit.job import settings as settings_mod
from tests.cli.launch_helpers import env_of, render, sbatch_lines, srun_line
from tests.conftest import REPO, assert_one_line_error

GOLDEN = REPO / "tests" / "golden"


# ---- CPUs and memory -------------------------------------------------------------------------

def test_every_rendered_srun_step_asks_for_cpus_per_task() -> None:
    steps = [(p, ln) for p in sorted(GOLDEN.glob("*/*/*/job.sbatch"))
             for ln in p.read_text().splitlines() if ln.lstrip().startswith("srun ")]
    assert len(steps) > 40
    for path, line in steps:
        plan = json.loads((path.parent / "plan.json").read_text())
        assert f" --cpus-per-task={plan['cpus_per_task']} " in line, path
        assert dict(plan["sbatch"])["cpus-per-task"] == str(plan["cpus_per_task"]), path
    assert not any("SRUN_CPUS_PER_TASK" in p.read_text() for p in GOLDEN.glob("*/*/*/job.sbatch"))


@pytest.mark.parametrize("launcher,gpn,cpus,omp", [
    ("torchrun", "2", "4", "2"),      # one task per node: 16 CPUs x 2/8 GPUs, 2 ranks share it
    ("srun", "2", "2", "2"),          # one task per GPU
    ("deepspeed", "8", "16", "2"),    # whole node: no --mem, the site's default
])
def test_partial_node_asks_for_its_share(ck, tmp_path: Path, launcher: str, gpn: str, cpus: str, omp: str) -> None:
    site = tmp_path / "part.yaml"
    site.write_text("name: part\nnodes: {nodelist: 'n[1-2]', gpus_per_node: 8, cpus_per_node: 16, mem_gb: 64}\n")
    run_dir = render(ck, tmp_path / "r", "--site", str(site), "--launcher", launcher, "--gpus-per-node", gpn)
    lines = sbatch_lines(run_dir)
    assert lines["cpus-per-task"] == cpus and f"--cpus-per-task={cpus}" in srun_line(run_dir)
    assert lines.get("mem") == (None if gpn == "8" else "16384M")
    assert env_of(run_dir)["OMP_NUM_THREADS"] == omp
    assert f"export OMP_NUM_THREADS={omp}\n" in (run_dir / "job.sbatch").read_text()


def test_cpus_per_task_setting_reaches_step_and_omp(ck, tmp_path: Path) -> None:
    run_dir = render(ck, tmp_path / "r", "--site", "testbed", "--gpus-per-node", "2", "--set", "cpus_per_task=6")
    assert sbatch_lines(run_dir)["cpus-per-task"] == "6" and "--cpus-per-task=6" in srun_line(run_dir)
    assert env_of(run_dir)["OMP_NUM_THREADS"] == "3"


def test_a_site_memory_option_wins_over_the_share(ck, tmp_path: Path) -> None:
    site = tmp_path / "memsite.yaml"
    site.write_text("name: memsite\nscheduler: {sbatch: {mem-per-cpu: 4G}}\n"
                    "nodes: {nodelist: 'n[1-2]', gpus_per_node: 8, cpus_per_node: 16, mem_gb: 64}\n")
    lines = sbatch_lines(render(ck, tmp_path / "r", "--site", str(site), "--gpus-per-node", "2"))
    assert lines["mem-per-cpu"] == "4G" and "mem" not in lines


# ---- ports -----------------------------------------------------------------------------------

def _port_line(run_dir: Path) -> str:
    return next(ln for ln in (run_dir / "job.sbatch").read_text().splitlines() if ln.startswith("export CK_PORT="))


@pytest.mark.parametrize("site", ["testbed", "local"])
def test_job_port_is_below_the_ephemeral_range(ck, tmp_path: Path, site: str) -> None:
    line = _port_line(render(ck, tmp_path / "r", "--site", site))
    var = "SLURM_JOB_ID" if site == "testbed" else "$"
    ports = set()
    for job_id in (0, 1, 11999, 12000, 19999, 20000, 39999, 4_294_967_294):
        script = line.replace("$$", "CK_FAKE_PID") if var == "$" else line
        env = f"SLURM_JOB_ID={job_id}" if var != "$" else f"CK_FAKE_PID={job_id}"
        p = subprocess.run(["bash", "-c", f"{env}\n{script}\necho $CK_PORT"], capture_output=True, text=True)
        ports.add(int(p.stdout))
    # Linux's ephemeral range is 32768-60999; the testbed's slurmd ports are 10000-19000 and up
    assert min(ports) >= 20000 and max(ports) < 32768, ports


@pytest.mark.parametrize("launcher", ["torchrun", "deepspeed", "accelerate", "colossalai", "megatron"])
def test_single_node_launchers_use_the_job_port(ck, tmp_path: Path, launcher: str) -> None:
    run_dir = render(ck, tmp_path / "r", "--site", "testbed", "--launcher", launcher)
    body = next(ln for ln in (run_dir / "job.sbatch").read_text().splitlines() if ln.lstrip().startswith("bash -c '"))
    assert '"$CK_PORT"' in body and "29500" not in body and "--standalone" not in body


@pytest.mark.parametrize("launcher", ["torchrun", "deepspeed", "accelerate"])
def test_single_node_ports_reach_the_launchers_own_parsers(ck, tmp_path: Path, launcher: str) -> None:
    run_dir = render(ck, tmp_path / "r", "--site", "testbed", "--launcher", launcher)
    plan = json.loads((run_dir / "plan.json").read_text())
    words = shlex.split(plan["launch"]["line"].replace('"$CK_PORT"', "21234")) + plan["launch"]["command"]
    if launcher == "torchrun":
        import torch.distributed.run as torchrun
        ns = torchrun.get_args_parser().parse_args(words[1:])
        assert (ns.standalone, ns.master_addr, ns.master_port) == (False, "127.0.0.1", 21234)
    elif launcher == "deepspeed":
        from deepspeed.launcher.runner import parse_args
        assert parse_args(words[1:]).master_port == 21234
    else:
        from accelerate.commands.launch import launch_command_parser
        assert launch_command_parser().parse_args(words[2:]).main_process_port == 21234


# ---- run directory on shared storage ---------------------------------------------------------

def test_multi_node_run_dir_off_shared_storage_is_a_warning_in_render(ck, tmp_path: Path) -> None:
    out = tmp_path / "r"
    result = ck("render", "--site", "ib-h100", "--stage", "multi-node", "--out", str(out), "--", "python", "t.py")
    assert result.code == 0, result.err
    warning = [line for line in result.err.splitlines() if "shared storage" in line]
    assert len(warning) == 1 and warning[0].startswith("clusterkit: warning: ")
    assert f"run directory {out} is not on ib-h100's shared storage (/lustre/scratch, /home)" in warning[0]
    assert "`submit` refuses this run directory" in warning[0]
    assert (out / "job.sbatch").is_file()


def test_submit_refuses_it_too_before_anything_is_queued(ck, tmp_path: Path) -> None:
    out = tmp_path / "r"
    result = ck("submit", "--site", "eth-nfs", "--stage", "multi-node", "--skip-preflight", "--out", str(out),
                "--", "python", "t.py")
    assert_one_line_error(result, 2, "not on eth-nfs's shared storage (/shared)")
    assert not out.exists()


def test_a_site_can_declare_more_shared_paths(ck, tmp_path: Path) -> None:
    site = tmp_path / "more.yaml"
    site.write_text("name: more\nnodes: {nodelist: 'n[1-4]', gpus_per_node: 8}\nstorage:\n"
                    "  - {path: /lustre, type: lustre}\n"
                    f"  - {{path: {tmp_path}/scratch, type: local, shared: true}}\n"
                    f"  - {{path: {tmp_path}/nodelocal, type: local}}\n")
    render(ck, tmp_path / "scratch" / "r", "--site", str(site), "--stage", "multi-node")
    result = ck("submit", "--site", str(site), "--stage", "multi-node", "--skip-preflight",
                "--out", str(tmp_path / "nodelocal" / "r"), "--", "python", "t.py")
    assert_one_line_error(result, 2, f"(/lustre, {tmp_path}/scratch)")
    # one node reads its own disk: fine
    render(ck, tmp_path / "nodelocal" / "s", "--site", str(site))


# ---- settings --------------------------------------------------------------------------------

@pytest.mark.parametrize("setting,line", [
    ("time=90", "time=90"), ("account=1234", "account=1234"), ("partition=007", "partition=007"),
    ("qos=0", "qos=0"),
])
def test_string_settings_take_the_text_as_given(ck, tmp_path: Path, setting: str, line: str) -> None:
    run_dir = render(ck, tmp_path / "r", "--site", "testbed", "--set", setting)
    assert f"#SBATCH --{line}\n" in (run_dir / "job.sbatch").read_text()


@pytest.mark.parametrize("args,needle", [
    (["--set", "tp=2"], "--set tp: the torchrun launcher does not use it; it is used by megatron"),
    (["--set", "zero_stage=3", "--launcher", "accelerate"],
     "--set zero_stage: the accelerate launcher does not use it; it is used by deepspeed"),
    (["--set", "offload=optimizer", "--launcher", "megatron"], "it is used by deepspeed, accelerate"),
    (["--set", "strategy=fsdp", "--launcher", "srun"],
     "--set strategy: the srun launcher does not use it; it is used by accelerate, torchrun"),
    (["--set", "precision=fp16", "--launcher", "srun"], "it is used by deepspeed, accelerate, megatron"),
    (["--set", "micro_batch=2", "--launcher", "horovod"],
     "it is used by deepspeed, megatron, torchrun, accelerate, srun"),
    (["--set", "offload=optimizer+params", "--launcher", "accelerate"],
     "accelerate: offload=optimizer+params needs strategy=fsdp"),
    (["--set", "offload=optimizer", "--set", "strategy=fsdp", "--launcher", "accelerate"],
     "use offload=optimizer+params"),
    (["--launcher", "megatron", "--set", "global_batch=12"],
     "global batch 12 is not a multiple of micro batch 1 x data parallel 8"),
    (["--launcher", "megatron", "--set", "global_batch=16", "--set", "grad_accum=4"],
     "global_batch 16 != micro_batch 1 x grad_accum 4 x data parallel 8"),
])
def test_settings_a_launcher_ignores_are_refused(ck, tmp_path: Path, args: list[str], needle: str) -> None:
    out = tmp_path / "r"
    assert_one_line_error(ck("render", "--site", "testbed", *args, "--out", str(out), "--", "python", "t.py"),
                          2, needle)
    assert not out.exists()


@pytest.mark.parametrize("key", ["partition=gpu", "account=ml", "qos=high", "max_restarts=1", "preflight_in_job=true"])
def test_slurm_settings_are_refused_on_a_local_site(ck, tmp_path: Path, key: str) -> None:
    name = key.split("=")[0]
    assert_one_line_error(ck("render", "--site", "local", "--set", key, "--out", str(tmp_path / "r"),
                             "--", "python", "t.py"),
                          2, f"--set {name}: site local is a local site (no Slurm)")


def test_colossalai_refuses_a_script_without_py(ck, tmp_path: Path) -> None:
    result = ck("render", "--site", "testbed", "--launcher", "colossalai", "--out", str(tmp_path / "r"),
                "--", "python", "train")
    assert_one_line_error(result, 2, "colossalai run only starts files ending in .py, not 'train'")


def test_megatron_gets_batch_sizes_and_user_args_win(ck, tmp_path: Path) -> None:
    import torch.distributed.run as torchrun

    def megatron_args(out: str, *args: str, command: tuple[str, ...] = ("python", "pretrain_gpt.py")) -> list[str]:
        run_dir = render(ck, tmp_path / out, "--site", "testbed", "--launcher", "megatron", "--set", "tp=2", *args,
                         command=command)
        plan = json.loads((run_dir / "plan.json").read_text())
        words = shlex.split(plan["launch"]["line"].replace('"$CK_PORT"', "20001"))[1:] + plan["launch"]["command"]
        return torchrun.get_args_parser().parse_args(words).training_script_args

    # 8 GPUs / tp 2 = data parallel 4
    args = megatron_args("a", "--set", "micro_batch=2", "--set", "grad_accum=3", "--set", "precision=bf16")
    assert args == ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "1",
                    "--micro-batch-size", "2", "--global-batch-size", "24", "--bf16"]
    args = megatron_args("b", "--set", "global_batch=64")
    assert args[-4:] == ["--micro-batch-size", "1", "--global-batch-size", "64"]
    args = megatron_args("c", command=("python", "pretrain_gpt.py", "--micro-batch-size", "4", "--fp16"))
    assert args.count("--micro-batch-size") == 1 and args[-2:] == ["--global-batch-size", "16"]
    assert "--bf16" not in args


def test_accelerate_fsdp_offload_reaches_accelerates_config(ck, tmp_path: Path) -> None:
    from accelerate.commands.config.config_args import load_config_from_file

    run_dir = render(ck, tmp_path / "r", "--site", "testbed", "--launcher", "accelerate", "--set", "strategy=fsdp",
                     "--set", "offload=optimizer+params")
    cfg = load_config_from_file(str(run_dir / "accelerate.yaml"))       # accelerate's own loader
    assert cfg.distributed_type == "FSDP" and cfg.fsdp_config["fsdp_offload_params"] is True


# Every setting, for every launcher that uses it: the render differs outside plan.json.
# (value, site, extra --set for the baseline and the changed render)
CHANGES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "micro_batch": ("2", "testbed", ()), "grad_accum": ("2", "testbed", ()),
    "global_batch": ("64", "testbed", ("micro_batch=2",)), "precision": ("fp16", "testbed", ()),
    "zero_stage": ("3", "testbed", ()), "offload": ("optimizer+params", "testbed", ("zero_stage=3", "strategy=fsdp")),
    "ds_launcher": ("pdsh", "testbed", ("max_restarts=0",)), "ds_args": ("hf", "testbed", ()),
    "strategy": ("fsdp", "testbed", ()),
    "tp": ("2", "testbed", ()), "pp": ("2", "testbed", ()), "cp": ("2", "testbed", ()),
    "time": ("90", "testbed", ()), "partition": ("other", "testbed", ()), "account": ("1234", "testbed", ()),
    "qos": ("high", "testbed", ()), "max_restarts": ("0", "testbed", ()), "cpus_per_task": ("3", "testbed", ()),
    "container": ("false", "ib-h100", ()), "preflight_in_job": ("true", "testbed", ()),
    "stop_signal": ("USR1", "testbed", ()), "requeue_by": ("framework", "testbed", ()),
    "spares": ("1", "testbed", ("preflight_in_job=true",)),
    "stall_floor_s": ("15", "testbed", ()), "stall_factor": ("4", "testbed", ()),
    "warmup_steps": ("0", "testbed", ()), "save_limit_s": ("120", "testbed", ()),
    "straggler_replace": ("true", "testbed", ()),
    "gpu_bind": ("task", "testbed", ()),
    # the in-job preflight's checkpoint capacity check (tests/preflight/test_checkpoint_room.py runs it)
    "model_params": ("7B", "testbed", ("preflight_in_job=true",)),
    "keep_checkpoints": ("3", "testbed", ("preflight_in_job=true", "model_params=7B")),
}
# include and exclude_slots change deepspeed's argv; their own tests cover the host filters;
# gpu_type (tests/cli/test_gpu_type.py), max_relaunches (the supervisor's argv, tests/supervise)
# node_history (tests/history) and node_setup_in (a --node-setup step and a container: tests/cli/test_containers.py)
# have tests of their own; straggler_ratio changes only plan.json, which status reads (tests/progress/test_progress.py);
# code_max_*: the code snapshot's limits, not the job's text (tests/submit/test_local_snapshot.py);
# recheck_after_hang changes only a job with recovery inside its allocation (tests/cli/test_recheck_after_hang.py)
OWN_TESTS = {"include", "exclude_slots", "gpu_type", "max_relaunches", "node_history", "node_setup_in",
             "straggler_ratio", "code_max_files", "code_max_mb", "recheck_after_hang"}
# deepspeed takes its global batch from micro x accum x dp: global_batch is checked against it
CHECKED = {("global_batch", "deepspeed"):
           "deepspeed: global_batch 64 != micro_batch 2 x grad_accum 1 x data parallel 16"}


def _texts(run_dir: Path) -> dict[str, str]:
    return {p.name: p.read_text().replace(str(run_dir), "@") for p in run_dir.iterdir()
            if p.is_file() and p.name != "plan.json"}


def test_every_setting_is_covered() -> None:
    assert set(CHANGES) | OWN_TESTS == set(settings_mod.valid_keys())


@pytest.mark.parametrize("key", sorted(CHANGES))
def test_every_setting_changes_the_job_for_the_launchers_that_use_it(ck, tmp_path: Path, key: str) -> None:
    value, site, extra = CHANGES[key]
    for launcher in settings_mod.used_by(key):
        # testbed: /tmp is shared.  horovod, colossalai and mpirun refuse requeue (multi-node's default):
        # their single-node jobs carry every setting they use all the same
        multi = site == "testbed" and launcher not in ("horovod", "colossalai", "mpirun")
        stage = ["--stage", "multi-node", "--nodes", "2"] if multi else []
        base_sets = [a for s in extra if launcher in settings_mod.used_by(s.split("=")[0]) for a in ("--set", s)]
        args = ["--site", site, *stage, "--launcher", launcher, *base_sets]
        base = ck("render", *args, "--out", str(tmp_path / f"{launcher}-base"), "--", "python", "t.py")
        changed = ck("render", *args, "--set", f"{key}={value}", "--out", str(tmp_path / f"{launcher}-set"),
                     "--", "python", "t.py")
        if (key, launcher) in CHECKED:
            assert_one_line_error(changed, 2, CHECKED[key, launcher])
            continue
        assert base.code == 0 and changed.code == 0, (launcher, base.err, changed.err)
        assert _texts(tmp_path / f"{launcher}-base") != _texts(tmp_path / f"{launcher}-set"), (key, launcher)
