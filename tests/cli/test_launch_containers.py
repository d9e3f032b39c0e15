"""Containers and host modules as rendered through the CLI: where pyxis and apptainer run, what
they are given (environment, home, GPUs), and host modules outside a container."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.cli.launch_helpers import render, srun_line
from tests.conftest import assert_one_line_error

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
