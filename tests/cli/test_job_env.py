"""The job's own environment, setup steps and activation, as rendered and as bash runs them.

``--env``/``--env-file``/``job.env``: owned names refused naming the setting to use, the site
file's trust boundary, ``${SLURM_*}``/``${CK_*}`` (and nothing else) expanded by each node,
an ``NCCL_*`` of the job's winning over policy and site; ``--setup``/``--node-setup`` in order
before the launcher; ``--venv``/``--conda``/``--module`` where they apply.  The exported words
are run by real bash here; the testbed runs them on real nodes (tests/slurm/test_job_setup.py).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, assert_one_line_error, shared_site


def render(ck, tmp_path: Path, *args: str, site: str | Path = "ib-h100", name: str = "run",
           command: tuple[str, ...] = ("python", "train.py")) -> Path:
    out = tmp_path / name
    result = ck("render", "--site", str(site), "--out", str(out), *args, "--", *command)
    assert result.code == 0, result.err
    return out


def site_with(tmp_path: Path, base: str = "ib-h100", **top: object) -> Path:
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump({"extends": str(REPO / "site_configs" / f"{base}.yaml"), **top}))
    return path


# ---- names -----------------------------------------------------------------------------------

@pytest.mark.parametrize("pair,needle", [
    ("MASTER_ADDR=10.0.0.1", "MASTER_ADDR is set by clusterkit, Slurm or the launcher for each job; use nothing: "
                             "the rendezvous is the allocation's first host (CK_HEAD)"),
    ("RANK=0", "use --nodes and --gpus-per-node"),
    ("CUDA_VISIBLE_DEVICES=0,1", "use --gpus-per-node (Slurm binds the GPUs)"),
    ("SLURM_CPUS_PER_TASK=4", "use --sbatch KEY=VALUE or --srun-arg"),
    ("CK_PORT=1234", "CK_* are clusterkit's runtime variables"),
    ("SRUN_CPUS_PER_TASK=2", "use --srun-arg"),
    ("BASH_ENV=/tmp/x", "changes how the job script's shells start; use --setup or --node-setup"),
    ("HF_HOME=${HOME}/hf", "${HOME} would not be expanded: values are literal except ${SLURM_*} and ${CK_*}"),
    ("PATH=/x:${CK_JOB_ID}:$PATH", "PATH: refers both to $PATH (expanded once, in the job script) and to "
                                   "${SLURM_*}/${CK_*}"),
])
def test_owned_names_are_refused_naming_the_setting(ck, tmp_path: Path, pair: str, needle: str) -> None:
    result = ck("render", "--site", "ib-h100", "--out", str(tmp_path / "run"), "--env", pair, "--", "python", "t.py")
    assert_one_line_error(result, 2, "clusterkit: error: --env '", needle)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("name", ["LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "PYTHONSTARTUP", "PATH",
                                  "BASH_ENV", "PERL5OPT", "NODE_OPTIONS", "LUA_INIT", "CONDA_PREFIX"])
def test_site_job_env_keeps_the_trust_boundary(ck, tmp_path: Path, name: str) -> None:
    site = site_with(tmp_path, job={"env": {"HF_HOME": "/data/hf", name: "/opt/x"}})
    result = ck("render", "--site", str(site), "--out", str(tmp_path / "run"), "--", "python", "t.py")
    assert_one_line_error(result, 2, "site.yaml:", name)
    assert name == "BASH_ENV" or "Security model" in result.err


def test_the_job_may_set_loader_and_interpreter_paths_for_itself(ck, tmp_path: Path) -> None:
    run = render(ck, tmp_path, "--env", "LD_LIBRARY_PATH=/opt/plugin/lib", "--env", "PYTHONPATH=/code/src")
    text = (run / "job.sbatch").read_text()
    assert "export LD_LIBRARY_PATH=/opt/plugin/lib\n" in text and "export PYTHONPATH=/code/src\n" in text


# ---- precedence and nccl.env -----------------------------------------------------------------

def test_an_nccl_value_of_the_job_wins_over_policy_and_site_and_nccl_env_says_so(ck, tmp_path: Path) -> None:
    site = site_with(tmp_path, nccl={"env": {"NCCL_IB_TIMEOUT": 22, "NCCL_SOCKET_NTHREADS": 2}},
                     storage=[{"path": str(tmp_path), "type": "local", "shared": True}])
    run = render(ck, tmp_path, "--stage", "multi-node", "--nodes", "2", "--env", "NCCL_IB_TIMEOUT=18",
                 "--env", "NCCL_IB_HCA==mlx5_0", "--env", "NCCL_DEBUG=INFO", site=site)
    env = {e["name"]: e for e in json.loads((run / "plan.json").read_text())["env"]}
    assert (env["NCCL_IB_TIMEOUT"]["value"], env["NCCL_IB_TIMEOUT"]["source"]) == ("18", "job")
    assert env["NCCL_IB_TIMEOUT"]["replaced"] == "22"                         # the site's
    assert env["NCCL_IB_HCA"]["value"] == "=mlx5_0"
    assert env["NCCL_IB_HCA"]["replaced"].startswith("=mlx5_0,mlx5_1")        # the policy's, from the HCAs
    assert env["NCCL_SOCKET_NTHREADS"]["source"] == "site"
    nccl = (run / "nccl.env").read_text()
    assert "NCCL_IB_TIMEOUT=18  # job: the job's environment (--env) (replaced 22)" in nccl
    assert "it wins over the site's\n# nccl.env too, NCCL_* included" in nccl
    sbatch = (run / "job.sbatch").read_text()
    assert sbatch.index("export NCCL_IB_TIMEOUT=18") > sbatch.index("export NCCL_SOCKET_NTHREADS=2")
    assert sbatch.count("export NCCL_IB_TIMEOUT=") == 1 and sbatch.count("export NCCL_DEBUG=") == 1


# ---- values: literal, except each node's ${SLURM_*} / ${CK_*} ----------------------------------

HOSTILE = ["it's \"quoted\"", "$(touch /tmp/ck-pwned)", "`id`", "a\nb\nc", "trailing\\", "${NOT_EXPANDED",
           "$HOME", "x" * 100_000, " lead and trail ", "ünïcödé ✓", "="]


def _bash_env(script: str, names: list[str], **env: str) -> dict[str, str]:
    """Run ``script`` in real bash, then print the named variables NUL-separated."""
    dump = "; ".join(f'printf "%s\\0" "${{{n}}}"' for n in names)
    proc = subprocess.run(["bash", "-c", script + "\n" + dump], capture_output=True, env={"PATH": "/usr/bin:/bin",
                          **env}, check=True)
    return dict(zip(names, proc.stdout.decode().split("\0")[:-1], strict=True))


def test_hostile_values_reach_bash_byte_for_byte(ck, tmp_path: Path) -> None:
    pairs = [f"V{i}={v}" for i, v in enumerate(HOSTILE)]
    run = render(ck, tmp_path, *[a for p in pairs for a in ("--env", p)], "--set", "container=false")
    exports = "\n".join(ln for ln in _export_block((run / "job.sbatch").read_text()))
    got = _bash_env(exports, [f"V{i}" for i in range(len(HOSTILE))])
    assert got == {f"V{i}": v for i, v in enumerate(HOSTILE)}
    assert not Path("/tmp/ck-pwned").exists()
    # nccl.env, sourced as its header says, gives the same bytes
    got = _bash_env(f"set -a; . {run / 'nccl.env'}; set +a", [f"V{i}" for i in range(len(HOSTILE))])
    assert got == {f"V{i}": v for i, v in enumerate(HOSTILE)}


def _export_block(text: str) -> list[str]:
    """The job script's environment exports (a value may span lines)."""
    start = text.index("# ---- NCCL / torch environment")
    end = text.index("\n# ----", start + 1)
    return [ln for ln in text[start:end].splitlines() if not ln.startswith("#")]


def test_slurm_and_ck_references_are_expanded_by_each_node_and_nothing_else(ck, tmp_path: Path) -> None:
    run = render(ck, tmp_path, "--env", "TRITON_CACHE_DIR=/tmp/triton_${SLURM_NODEID}",
                 "--env", "TAG=$(id)-${CK_JOB_ID}-${SLURM_PROCID}'", "--env", "PLAIN=/x",
                 "--set", "container=false")
    text = (run / "job.sbatch").read_text()
    body = re.search(r"bash -c ('(?:[^']|'\"'\"')*')", text)
    assert body, text
    body_text = subprocess.run(["bash", "-c", f"printf %s {body.group(1)}"], capture_output=True, text=True,
                               check=True).stdout
    # the launch body re-exports only the values with references, for the node it runs on
    assert body_text.startswith("export TRITON_CACHE_DIR=") and "PLAIN" not in body_text
    node_exports = body_text[:body_text.index("exec ")]
    for node, procid in (("0", "0"), ("3", "17")):
        got = _bash_env(node_exports, ["TRITON_CACHE_DIR", "TAG"], SLURM_NODEID=node, SLURM_PROCID=procid,
                        CK_JOB_ID="812")
        assert got == {"TRITON_CACHE_DIR": f"/tmp/triton_{node}", "TAG": f"$(id)-812-{procid}'"}


def test_values_referring_to_the_chosen_hosts_are_exported_again_once_they_are_known(ck, tmp_path: Path) -> None:
    """The environment is exported before the in-job preflight chooses the hosts: a value naming
    ${CK_HEAD} is exported again after the hosts block, in the batch shell (a launcher there reads it)."""
    run = render(ck, tmp_path, "--stage", "multi-node", "--nodes", "2", "--env", "STORE=tcp://${CK_HEAD}:29400",
                 "--env", "CACHE=/tmp/c_${SLURM_JOB_ID}", "--set", "container=false")
    text = (run / "job.sbatch").read_text()
    first, again = text.index("\nexport STORE="), text.rindex("\nexport STORE=")
    assert first < text.index("-m clusterkit.supervise.start") < text.index("\nexport CK_HEAD\n") < again
    assert text.count("\nexport CACHE=") == 1   # no ${CK_*} in it: the batch shell exports it once
    got = _bash_env(text[again + 1:text.index("\n", again + 1)], ["STORE"], CK_HEAD="node7")
    assert got == {"STORE": "tcp://node7:29400"}


def test_references_cannot_reach_ssh_started_workers(ck, tmp_path: Path) -> None:
    site = shared_site(tmp_path / "s", "testbed", tmp_path)
    result = ck("render", "--site", str(site), "--stage", "multi-node", "--nodes", "2", "--launcher", "horovod",
                "--set", "max_restarts=0", "--out", str(tmp_path / "run"), "--env", "D=/tmp/${SLURM_NODEID}",
                "--", "python", "t.py")
    assert_one_line_error(result, 2, "horovod starts its workers over SSH", "D='/tmp/${SLURM_NODEID}' (--env)")
    result = ck("render", "--site", str(site), "--stage", "multi-node", "--nodes", "2", "--launcher", "deepspeed",
                "--set", "ds_launcher=pdsh", "--set", "max_restarts=0", "--out", str(tmp_path / "run"),
                "--env", "D=a b", "--", "python", "t.py")
    assert_one_line_error(result, 2, "ds_launcher=pdsh", "D=")
    # what pdsh can carry goes into .deepspeed_env with the rest
    run = render(ck, tmp_path, "--stage", "multi-node", "--nodes", "2", "--launcher", "deepspeed", "--set",
                 "ds_launcher=pdsh", "--set", "max_restarts=0", "--env", "HF_HOME=/data/hf", site=site, name="pdsh")
    assert "HF_HOME=/data/hf\n" in (run / ".deepspeed_env").read_text()


def test_a_value_may_extend_its_own_variable_and_other_dollars_stay_literal_with_a_warning(
        ck, tmp_path: Path) -> None:
    """``PATH=/x:$PATH`` (issue 40): its own ``$PATH``/``${PATH}`` is the job's value before, expanded
    once in the job script (never again on each node); ``$SLURM_JOB_ID`` without braces stays as
    written, and render says so."""
    out = tmp_path / "run"
    result = ck("render", "--site", "ib-h100", "--out", str(out), "--set", "container=false",
                "--env", "PATH=/opt/tool/bin:$PATH", "--env", "LD_LIBRARY_PATH=/opt/tool/lib:${LD_LIBRARY_PATH}",
                "--env", "SAVE=/ckpt/$SLURM_JOB_ID", "--", "python", "t.py")
    assert result.code == 0, result.err
    assert ("clusterkit: warning: --env SAVE: $SLURM_JOB_ID is kept as written, not expanded (a value expands "
            "only ${SLURM_*} and ${CK_*}, braces included, and $SAVE itself)") in result.err
    assert "PATH" not in result.err
    text = (out / "job.sbatch").read_text()
    got = _bash_env("\n".join(_export_block(text)), ["PATH", "LD_LIBRARY_PATH", "SAVE"])
    assert got == {"PATH": "/opt/tool/bin:/usr/bin:/bin", "LD_LIBRARY_PATH": "/opt/tool/lib:",
                   "SAVE": "/ckpt/$SLURM_JOB_ID"}
    body = re.search(r"bash -c ('(?:[^']|'\"'\"')*')", text)
    assert body and "PATH" not in body.group(1)   # each node keeps what srun carried: no second prepend


@pytest.mark.parametrize("flag,step,name", [
    ("--setup", "module load cuda; export CUDA_VISIBLE_DEVICES=0,1", "CUDA_VISIBLE_DEVICES"),
    ("--setup", "unset CUDA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"),
    ("--node-setup", "MASTER_PORT=1234 ./prepare.sh", "MASTER_PORT"),
])
def test_setup_steps_may_not_set_what_env_refuses(ck, tmp_path: Path, flag: str, step: str, name: str) -> None:
    result = ck("render", "--site", "ib-h100", "--out", str(tmp_path / "run"), flag, step, "--", "python", "t.py")
    assert_one_line_error(result, 2, f"clusterkit: error: {flag} '", f"{name} is set by clusterkit, Slurm or the "
                          "launcher for each job; use")
    assert not (tmp_path / "run").exists()
    # a name that merely contains one is the step's own
    render(ck, tmp_path, flag, "export MY_CUDA_VISIBLE_DEVICES=0; echo RANK=$RANK", name="ok")


# ---- setup steps ------------------------------------------------------------------------------

def test_setup_steps_run_in_order_after_env_before_the_launcher(ck, tmp_path: Path) -> None:
    run = render(ck, tmp_path, "--env", "A=1", "--setup", "echo one", "--setup", "pip freeze > frozen.txt",
                 "--node-setup", "mkdir -p /tmp/cache_$SLURM_NODEID", "--set", "container=false")
    text = (run / "job.sbatch").read_text()
    order = [text.index(s) for s in ("module load cuda/12.4", "export A=1", "eval 'echo one'",
                                     "eval 'pip freeze > frozen.txt'", "bash -c 'mkdir -p /tmp/cache_$SLURM_NODEID'",
                                     "ck_launch=(\n  srun ", "\nexec \"$ck_python\" -m clusterkit.supervise ")]
    assert order == sorted(order)
    assert '"setup step 2 failed (exit $ck_step_rc)"' in text
    node = next(ln for ln in text.splitlines() if "mkdir -p /tmp/cache_" in ln and ln.startswith("srun "))
    assert node.startswith('srun --nodes=1 --nodelist="$CK_NODELIST" --ntasks=1 --ntasks-per-node=1 ')


# ---- activation -------------------------------------------------------------------------------

def test_venv_conda_and_modules_where_they_apply(ck, tmp_path: Path) -> None:
    run = render(ck, tmp_path, "--venv", "/shared/venvs/train", "--module", "gcc/12", "--set", "container=false")
    text = (run / "job.sbatch").read_text()
    assert text.index("module load gcc/12 ") > text.index("module load nccl/2.21 ")
    assert ". /shared/venvs/train/bin/activate || ck_fail 1 " in text
    assert text.index("/bin/activate") < text.index("# ---- NCCL / torch environment")
    # `purge`, where it stands in the list (real scripts start with `module purge`): never `module load purge`
    run = render(ck, tmp_path, "--module", "purge", "--module", "gcc/12", "--set", "container=false", name="purge")
    text = (run / "job.sbatch").read_text()
    assert "module load purge" not in text and "module load 'purge'" not in text
    assert text.index("module load nccl/2.21 ") < text.index("module purge || ck_fail 1 ") < text.index(
        "module load gcc/12 ")
    run = render(ck, tmp_path, "--conda", "train env", "--set", "container=false", name="conda")
    assert "conda activate 'train env' ||" in (run / "job.sbatch").read_text()
    # in the site's pyxis container: activated inside it, at the head of the launch body
    run = render(ck, tmp_path, "--venv", "/shared/venvs/train", name="pyxis")
    text = (run / "job.sbatch").read_text()
    assert "ck_fail 1 'cannot activate the venv" not in text
    assert "bash -c '. /shared/venvs/train/bin/activate || { echo " in text
    # host modules do not apply in a container; apptainer starts the launcher with no shell
    result = ck("render", "--site", "ib-h100", "--out", str(tmp_path / "x"), "--module", "gcc/12", "--", "python",
                "t.py")
    assert_one_line_error(result, 2, "--module gcc/12: the job runs in the site's container")
    apptainer = site_with(tmp_path, software={"container": {"runtime": "apptainer", "image": "/img/t.sif"}})
    result = ck("render", "--site", str(apptainer), "--out", str(tmp_path / "x"), "--conda", "train", "--",
                "python", "t.py")
    assert_one_line_error(result, 2, "--conda train: the site's apptainer container")
    result = ck("render", "--site", "ib-h100", "--out", str(tmp_path / "x"), "--venv", "/v", "--conda", "c",
                "--", "python", "t.py")
    assert_one_line_error(result, 2, "--venv /v: give --venv or --conda, not both")


def test_dry_run_shows_everything(ck, tmp_path: Path) -> None:
    result = ck("submit", "--site", "testbed", "--dry-run", "--no-snapshot",
                "--skip-preflight", "--out", str(tmp_path / "run"),
                "--env", "HF_HOME=/data/hf", "--setup", "echo prep", "--node-setup", "echo node", "--venv", "/v",
                "--", "python", "t.py")
    assert result.code == 0, result.err
    for needle in ("export HF_HOME=/data/hf", "eval 'echo prep'", "bash -c 'echo node'", ". /v/bin/activate"):
        assert needle in result.out


def test_site_setup_commands_only_from_files_no_one_else_can_write(ck, tmp_path: Path) -> None:
    site = site_with(tmp_path, job={"setup": ["echo from the site"]})
    site.chmod(0o644)
    tmp_path.chmod(0o755)
    run = render(ck, tmp_path, "--set", "container=false", site=site)
    assert "eval 'echo from the site'" in (run / "job.sbatch").read_text()
    site.chmod(0o666)
    result = ck("render", "--site", str(site), "--out", str(tmp_path / "x"), "--", "python", "t.py")
    assert_one_line_error(result, 2, "site.yaml:", "job.setup", "is writable by others",
                          "used only from site files that no other user can write")


@pytest.mark.skipif(__import__("shutil").which("shellcheck") is None, reason="shellcheck not installed")
def test_shellcheck_scripts_with_every_job_addition(ck, tmp_path: Path) -> None:
    common = ("--env", "A=/tmp/${SLURM_NODEID}", "--env", "B=$(x)", "--setup", "echo one", "--node-setup", "echo n")
    runs = [render(ck, tmp_path, *common, "--set", "container=false", "--conda", "my env", "--module", "gcc/12",
                   name="conda"),
            render(ck, tmp_path, *common, "--venv", "/shared/venv", name="pyxis-venv"),
            render(ck, tmp_path, *common, "--conda", "c", name="pyxis-conda"),
            render(ck, tmp_path, *common, "--venv", "/v", site="local", name="local")]
    p = subprocess.run(["shellcheck", "--shell=bash", "--severity=info", *(str(r / "job.sbatch") for r in runs)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout


def test_a_site_job_script_without_the_setup_include_is_refused_not_silently_skipped(ck, tmp_path: Path) -> None:
    from tests.hostile.test_templates import site_with_template

    site = site_with_template(tmp_path, "#!/bin/bash\n# an old copy for {{ plan.job_name }}\n")
    result = ck("render", "--site", str(site), "--out", str(tmp_path / "run"), "--setup", "echo prep", "--",
                "python", "t.py")
    assert_one_line_error(result, 2, "templates: the site's job script template does not include job-setup.j2")
    assert not (tmp_path / "run").exists()
    assert ck("render", "--site", str(site), "--out", str(tmp_path / "run"), "--", "python", "t.py").code == 0
