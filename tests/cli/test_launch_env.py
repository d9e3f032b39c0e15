"""CPUs, ports, containers, storage and settings as rendered through the CLI.

What the job asks Slurm for (CPUs and memory of a partial node, CPUs on every srun step), the
per-job port every launcher uses, how containers and host modules are handled, where a
multi-node run directory may live, and that no ``--set`` key is accepted and then ignored.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from clusterkit.job import settings as settings_mod
from tests.conftest import REPO, assert_one_line_error

GOLDEN = REPO / "tests" / "golden"


def render(ck, out: Path, *args: str, command: tuple[str, ...] = ("python", "train.py")) -> Path:
    result = ck("render", *args, "--out", str(out), "--", *command)
    assert result.code == 0, result.err
    return out


def sbatch_lines(run_dir: Path) -> dict[str, str]:
    text = (run_dir / "job.sbatch").read_text()
    return {m.group(1): m.group(2) or "" for m in re.finditer(r"^#SBATCH --([a-z-]+)(?:=(\S+))?$", text, re.M)}


def srun_line(run_dir: Path) -> str:
    return next(ln.strip() for ln in (run_dir / "job.sbatch").read_text().splitlines()
                if ln.lstrip().startswith("srun "))


def env_of(run_dir: Path) -> dict[str, str]:
    return {e["name"]: e["value"] for e in json.loads((run_dir / "plan.json").read_text())["env"]}


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


# ---- containers and modules ------------------------------------------------------------------

def test_pyxis_runs_where_the_job_was_submitted(ck, tmp_path: Path) -> None:
    run_dir = render(ck, tmp_path / "r", "--site", "ib-h100")
    line = srun_line(run_dir)
    assert '--container-workdir="$PWD"' in line
    assert f"--container-mounts=/lustre:/lustre,/home:/home,{run_dir},\"$PWD\"" in line
    # what bash hands to srun: the workdir and a mount of it, from the batch shell's cwd
    opts = line.split(" \\")[0].removeprefix("srun ")
    words = subprocess.run(["bash", "-c", f"cd {tmp_path} && printf '%s\\n' {opts}"],
                           capture_output=True, text=True).stdout.splitlines()
    assert f"--container-workdir={tmp_path}" in words
    assert f"--container-mounts=/lustre:/lustre,/home:/home,{run_dir},{tmp_path}" in words


def test_container_sites_do_not_load_host_modules(ck, tmp_path: Path) -> None:
    text = (render(ck, tmp_path / "a", "--site", "ib-h100") / "job.sbatch").read_text()
    assert "module load" not in text and "site modules: cuda/12.4, nccl/2.21" in text
    text = (render(ck, tmp_path / "b", "--site", "ib-h100", "--set", "container=false") / "job.sbatch").read_text()
    assert "module load cuda/12.4 " in text and "--container-image" not in text


def _module_block(text: str) -> str:
    start = text.index("set +u\n")
    return text[start:text.index("\nset -u\n", start) + len("\nset -u\n")]


# Stand-in for Lmod's `module` (Lmod is not installed here): like Lmod 8's shell function it
# reads variables that may be unset, and it fails for modules it does not know.
FAKE_LMOD = """
module() {
  : "$LMOD_SH_DBG_ON" "$__LMOD_REF_COUNT_MODULEPATH"
  if [ "$2" = cuda/12.1 ]; then echo "lmod: loaded $2" >> "$CK_RUN_DIR/loaded"; return 0; fi
  echo "Lmod has detected the following error: The following module(s) are unknown: \\"$2\\"" >&2
  return 1
}
"""


def _run_modules(run_dir: Path, modules_ok: bool) -> subprocess.CompletedProcess[str]:
    text = (run_dir / "job.sbatch").read_text()
    ck_result = "".join(text[text.index(f"{fn}() {{"):text.index("\n}\n", text.index(f"{fn}() {{")) + 3]
                        for fn in ("ck_result", "ck_fail"))
    block = _module_block(text) if modules_ok else _module_block(text).replace("cuda/12.1", "cuda/99")
    script = (f"set -uo pipefail\nexport CK_RUN_DIR={run_dir} CK_JOB_ID=7\n{ck_result}{FAKE_LMOD}{block}"
              "echo after-modules\n")
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True)


def test_module_load_runs_without_nounset_and_reports_failure(ck, tmp_path: Path) -> None:
    run_dir = render(ck, tmp_path / "r", "--site", "roce-a100")
    ok = _run_modules(run_dir, modules_ok=True)
    assert ok.returncode == 0 and ok.stdout == "after-modules\n", ok.stderr
    assert (run_dir / "loaded").read_text() == "lmod: loaded cuda/12.1\n"
    bad = _run_modules(run_dir, modules_ok=False)
    assert bad.returncode == 1 and "after-modules" not in bad.stdout
    assert "clusterkit: module load cuda/99 failed" in bad.stderr and "unknown" in bad.stderr
    assert (run_dir / "7.result").read_text() == "1\n"
    assert (run_dir / "7.reason").read_text() == "module load cuda/99 failed (see the module error above)\n"


@pytest.mark.parametrize("launcher", ["horovod", "colossalai"])
def test_single_node_once_launchers_run_inside_the_container(ck, tmp_path: Path, launcher: str) -> None:
    run_dir = render(ck, tmp_path / "r", "--site", "ib-h100", "--launcher", launcher)
    line = srun_line(run_dir)
    assert "--nodes=1 " in line and "--ntasks-per-node=1 " in line and "--container-image=" in line
    after = (run_dir / "job.sbatch").read_text().split(line, 1)[1]
    body = after.lstrip().splitlines()[0]
    # the step sources the NCCL/torch probe in the container, then the launcher replaces the shell
    assert body.startswith(f"bash -c '. {run_dir}/nccl-probe.sh || ")
    assert f"; exec {'horovodrun' if launcher == 'horovod' else 'colossalai'} " in body


def test_apptainer_wraps_a_single_node_once_launcher(ck, tmp_path: Path) -> None:
    site = tmp_path / "app.yaml"
    site.write_text("name: app\nnodes: {nodelist: 'n[1-2]', gpus_per_node: 4}\n"
                    "software: {container: {runtime: apptainer, image: /img/pt.sif}}\n")
    run_dir = render(ck, tmp_path / "r", "--site", str(site), "--launcher", "horovod")
    assert "exec apptainer exec --nv --bind" in (run_dir / "job.sbatch").read_text()
    assert srun_line(run_dir).startswith("srun --nodes=1 ")
    # the probe's Python runs in the same image, with the same flags
    probe = (run_dir / "nccl-probe.sh").read_text()
    assert f"CK_PROBE_FULL=$ck_probe_full apptainer exec --nv --bind {run_dir} /img/pt.sif python3 - " in probe
    assert "'python3 did not run in the container image /img/pt.sif'" in probe



def _step_words(run_dir: Path, cwd: Path) -> list[str]:
    """The srun options of the launch step as bash hands them to srun (quotes removed, $PWD expanded)."""
    opts = srun_line(run_dir).split(" \\")[0].removeprefix("srun ")
    return subprocess.run(["bash", "-c", f"cd {cwd} && printf '%s\\n' {opts}"],
                          capture_output=True, text=True, check=True).stdout.splitlines()


def _exports(run_dir: Path) -> dict[str, str]:
    """What the job script's export lines set, as bash reads them."""
    lines = [ln for ln in (run_dir / "job.sbatch").read_text().splitlines() if ln.startswith("export ")
             and "$" not in ln.split("=", 1)[0]]
    script = "\n".join(lines).replace("$CK_JOB_ID", "7") + "\nenv -0"
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env={}).stdout
    return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)


def launcher_env(run_dir: Path) -> dict[str, str]:
    """What the launcher's command (srun, or bash on the batch host) gets set on its own: the
    assignments of the ``env`` that heads the launch argv (``ck_launch``), as bash reads them."""
    text = (run_dir / "job.sbatch").read_text()
    body = text.split("ck_launch=(\n", 1)[1]
    prefix = re.split(r"^  (?:srun|bash -c) ", body, maxsplit=1, flags=re.M)[0].strip().rstrip("\\").strip()
    if not prefix:
        return {}
    assert prefix.startswith("env "), prefix
    out = subprocess.run(["bash", "-c", "printf '%s\\0' " + prefix.removeprefix("env ")], capture_output=True,
                         text=True, env={}).stdout
    return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)


CONTAINER_ENV = "{HF_HOME: /lustre/hf cache, WANDB_MODE: offline, NVTE_FLASH_ATTN: 0}"


def test_pyxis_container_env_name_and_home(ck, tmp_path: Path) -> None:
    site = tmp_path / "px.yaml"
    site.write_text("name: px\nnodes: {nodelist: 'n[1-2]', gpus_per_node: 4}\n"
                    "software: {container: {runtime: pyxis, image: 'nvcr.io#nvidia/pytorch:24.05-py3', "
                    f"env: {CONTAINER_ENV}, name: pt2405, mount_home: false}}}}\n")
    run_dir = render(ck, tmp_path / "r", "--site", str(site))
    words = _step_words(run_dir, tmp_path)
    # the site's container env, after every name the job exports (nccl.env's), so the image's own cannot win
    names = next(w for w in words if w.startswith("--container-env=")).split("=", 1)[1].split(",")
    assert names[-3:] == ["HF_HOME", "WANDB_MODE", "NVTE_FLASH_ATTN"] and "NCCL_DEBUG" in names
    assert "--container-name=pt2405" in words and "--no-container-mount-home" in words
    env = launcher_env(run_dir)
    assert (env["HF_HOME"], env["WANDB_MODE"], env["NVTE_FLASH_ATTN"]) == ("/lustre/hf cache", "offline", "0")
    assert not any(k.startswith("APPTAINERENV_") for k in env)
    # set on the launcher's step alone: the batch shell (clusterkit's own preflight, choose-nodes) never has them
    assert not {"HF_HOME", "WANDB_MODE", "NVTE_FLASH_ATTN"} & set(_exports(run_dir))
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["container"]["env"] == {"HF_HOME": "/lustre/hf cache", "WANDB_MODE": "offline", "NVTE_FLASH_ATTN": "0"}
    assert (plan["container"]["name"], plan["container"]["mount_home"]) == ("pt2405", False)
    # mount_home: true asks for it; unset leaves the runtime's default, and nothing is added
    site.write_text(site.read_text().replace("mount_home: false", "mount_home: true"))
    assert "--container-mount-home" in _step_words(render(ck, tmp_path / "t", "--site", str(site)), tmp_path)
    words = _step_words(render(ck, tmp_path / "d", "--site", "ib-h100"), tmp_path)
    assert not [w for w in words if "mount-home" in w]
    # ib-h100 stages its image (cache_dir) and names no container: the job-scoped name (ck-<job id>)
    named = [w for w in words if w.startswith("--container-name")]
    assert len(named) == 1 and named[0].startswith("--container-name=ck-"), named
    assert "HF_HOME" not in next(w for w in words if w.startswith("--container-env="))


@pytest.mark.parametrize("model,gpu_flag", [("H100", ["--nv"]), (None, ["--nv"]), ("MI300X", ["--rocm"]),
                                            ("Gaudi2", [])])
def test_apptainer_gpu_flag_home_and_env(ck, tmp_path: Path, model: str | None, gpu_flag: list[str]) -> None:
    site = tmp_path / "app.yaml"
    gpu_model = f", gpu_model: {model}" if model else ""
    site.write_text(f"name: app\nnodes: {{nodelist: 'n[1-2]', gpus_per_node: 4{gpu_model}}}\n"
                    "software: {container: {runtime: apptainer, image: /img/pt.sif, mount_home: false, "
                    f"env: {CONTAINER_ENV}}}}}\n")
    run_dir = render(ck, tmp_path / "r", "--site", str(site), "--launcher", "horovod")
    text = (run_dir / "job.sbatch").read_text()
    body = shlex.split(text.split(srun_line(run_dir), 1)[1].split("bash -c ", 1)[1].split(" \\\n", 1)[0])[0]
    exec_words = shlex.split(body.split("exec ", 1)[1])
    assert exec_words[:2 + len(gpu_flag) + 1] == ["apptainer", "exec", *gpu_flag, "--no-home"]
    assert ("--nv" in exec_words) == (gpu_flag == ["--nv"])
    env = launcher_env(run_dir)
    assert env["APPTAINERENV_HF_HOME"] == env["HF_HOME"] == "/lustre/hf cache"
    assert env["APPTAINERENV_NVTE_FLASH_ATTN"] == "0"
    assert not {"HF_HOME", "APPTAINERENV_HF_HOME"} & set(_exports(run_dir))


@pytest.mark.parametrize("container,needle", [
    ("{runtime: pyxis, image: i, env: {CK_RUN_DIR: /x}}", "software.container.env: CK_RUN_DIR: "),
    ("{runtime: pyxis, image: i, env: {MASTER_ADDR: h}}", "MASTER_ADDR: software.container.env cannot set it"),
    ("{runtime: pyxis, image: i, env: {LD_PRELOAD: /x.so}}", "LD_PRELOAD: software.container.env cannot set it"),
    ("{runtime: pyxis, image: i, env: {NCCL_DEBUG: INFO}}", "NCCL_DEBUG: set communication settings in nccl.env"),
    ("{runtime: pyxis, image: i, env: {'A B': x}}", "'A B' is not an environment variable name"),
    ("{runtime: pyxis, image: i, env: {A: \"x\\0y\"}}", "A: a value cannot hold a NUL byte"),
    ("{runtime: pyxis, image: i, name: 'a b'}", "container name 'a b'"),
    ("{runtime: apptainer, image: i, name: pt}", "apptainer exec has no named containers"),
    ("{runtime: pyxis, image: i, mount_home: 'no'}", "software.container.mount_home"),
])
def test_container_settings_refused_at_their_line(ck, tmp_path: Path, container: str, needle: str) -> None:
    site = tmp_path / "bad.yaml"
    site.write_text("name: bad\nnodes: {nodelist: 'n[1-2]', gpus_per_node: 4}\n"
                    f"software:\n  container: {container}\n")
    result = ck("render", "--site", str(site), "--out", str(tmp_path / "r"), "--", "python", "train.py")
    assert_one_line_error(result, 2, f"{site}:4", needle)
    assert not (tmp_path / "r").exists()

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
