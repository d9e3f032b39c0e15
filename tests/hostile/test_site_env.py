"""Environment from a site file and the command line: one rule for every place a site file sets
environment (``job.env``, ``software.container.env``), the launchers' environment twins of the
flags clusterkit writes are clusterkit's (``PET_*``, ``ACCELERATE_USE_*``, ``PDSH_*``), the
container's environment reaches the launcher's step alone (never clusterkit's own Python in the
batch shell), and no value reaches a rendered comment with a newline in it."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error

SITE = "name: hs\nnodes: {nodelist: 'n[1-2]', gpus_per_node: 2}\nstorage: [{path: /, type: nfs}]\n"

# the loader and interpreter names a site's job.env refuses, and the launchers' environment twins
LOADER_NAMES = ["PYTHONPATH", "GCONV_PATH", "PERL5LIB", "RUBYOPT", "JAVA_TOOL_OPTIONS", "MODULEPATH", "PYTHONWARNINGS",
                "LUA_PATH", "LMOD_RC", "CONDA_PREFIX", "VIRTUAL_ENV", "TCLLIBPATH", "LOCPATH", "HOSTALIASES",
                "_JAVA_OPTIONS", "RUBYLIB", "PERLLIB", "LD_AUDIT", "BASH_ENV", "CDPATH", "GLOBIGNORE"]
# ... and, round three's own cases, names that make a program load code or run another program:
# Java's other options variable and class path, HOME (Python's user site-packages, whose .pth
# files run), OpenSSL's configuration (engines and providers it loads), git's ssh, the MPI
# launchers' remote agents (mpirun's --mca plm_rsh_agent as environment), zsh's start files
PROGRAM_NAMES = ["JDK_JAVA_OPTIONS", "CLASSPATH", "HOME", "ZDOTDIR", "OPENSSL_CONF", "OPENSSL_MODULES",
                 "GLIBC_TUNABLES", "GIT_SSH_COMMAND", "GIT_CONFIG_GLOBAL", "OMPI_MCA_plm_rsh_agent",
                 "OMPI_MCA_orte_launch_agent", "PRTE_MCA_plm_ssh_agent", "HYDRA_LAUNCHER_EXEC",
                 "I_MPI_HYDRA_BOOTSTRAP_EXEC", "PERL5DB", "LESSOPEN", "R_PROFILE_USER"]
TWINS = ["PET_STANDALONE", "PET_NO_PYTHON", "PET_RDZV_ENDPOINT", "PET_RDZV_BACKEND", "PET_RDZV_ID", "PET_NNODES",
         "PET_NPROC_PER_NODE", "PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_NODE_RANK", "PET_MODULE", "PET_RUN_PATH",
         "ACCELERATE_USE_DEEPSPEED", "ACCELERATE_USE_FSDP", "ACCELERATE_USE_CPU", "ACCELERATE_DEEPSPEED_ZERO_STAGE",
         "ACCELERATE_DEEPSPEED_CONFIG_FILE", "PDSH_SSH_ARGS_APPEND", "PDSH_RCMD_TYPE", "WCOLL"]


def _site(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "site.yaml"
    path.write_text(SITE + extra)
    return path


def _render(ck, tmp_path: Path, *args: str, site: str | Path = "testbed"):  # type: ignore[no-untyped-def]
    return ck("render", "--site", str(site), "--out", str(tmp_path / "run"), *args, "--", "python", "t.py",
              cwd=tmp_path)


@pytest.mark.parametrize("name", LOADER_NAMES + PROGRAM_NAMES + TWINS)
def test_container_env_refuses_what_job_env_refuses(ck, tmp_path: Path, name: str) -> None:
    site = _site(tmp_path, f"software:\n  container:\n    runtime: pyxis\n    image: i\n    env: {{{name}: /x}}\n")
    result = _render(ck, tmp_path, site=site)
    assert_one_line_error(result, 2, "site.yaml:8", "software.container.env", name)
    assert not (tmp_path / "run").exists()
    # and the site's job.env the same, at its own line
    site = _site(tmp_path, f"job:\n  env: {{{name}: /x}}\n")
    assert_one_line_error(_render(ck, tmp_path, site=site), 2, "site.yaml:5", "job.env", name)


@pytest.mark.parametrize("name", ["HOME", "CLASSPATH", "OMPI_MCA_plm_rsh_agent", "OPENSSL_CONF"])
def test_a_jobs_own_env_may_set_what_a_site_may_not(ck, tmp_path: Path, name: str) -> None:
    result = _render(ck, tmp_path, "--env", f"{name}=/mine")
    assert result.code == 0, result
    assert f"{name}=/mine" in (tmp_path / "run" / "job.sbatch").read_text()


@pytest.mark.parametrize("name", TWINS)
@pytest.mark.parametrize("how", ["--env", "--env-file"])
def test_launcher_twins_are_owned_from_the_command_line(ck, tmp_path: Path, name: str, how: str) -> None:
    if how == "--env":
        args = ("--env", f"{name}=1")
    else:
        (tmp_path / "job.env").write_text(f"# mine\n{name}=1\n")
        args = ("--env-file", str(tmp_path / "job.env"))
    result = _render(ck, tmp_path, *args)
    assert_one_line_error(result, 2, name, "is set by clusterkit, Slurm or the launcher")
    assert not (tmp_path / "run").exists()


def test_every_owned_torchrun_flag_twin_is_owned(ck, tmp_path: Path) -> None:
    """Read torchrun's own parser (the installed torch): each flag clusterkit owns that torchrun
    also reads from PET_<DEST> is an owned name, and so is every other PET_ name."""
    run = pytest.importorskip("torch.distributed.run")
    from clusterkit.job.launchers.torchrun import OWNED_ARGS

    owned = {o.replace("_", "-") for o in OWNED_ARGS}
    twins = [f"PET_{a.dest.upper()}" for a in run.get_args_parser()._actions
             if type(a).__name__ in ("env", "check_env")]
    assert "PET_STANDALONE" in twins and "PET_NO_PYTHON" in twins and "PET_RDZV_ENDPOINT" in twins
    for action in run.get_args_parser()._actions:
        if type(action).__name__ in ("env", "check_env") and owned & {o.replace("_", "-") for o in
                                                                        action.option_strings}:
            name = f"PET_{action.dest.upper()}"
            assert_one_line_error(_render(ck, tmp_path, "--env", f"{name}=1"), 2, name, "--launcher-arg")
    for name in twins:
        assert_one_line_error(_render(ck, tmp_path, "--env", f"{name}=x"), 2, name)


def test_torchrun_reads_the_twin(tmp_path: Path) -> None:
    """Why PET_* is owned: torchrun takes PET_STANDALONE for --standalone (the installed torch)."""
    run = pytest.importorskip("torch.distributed.run")
    env = dict(os.environ, PET_STANDALONE="1", PET_NNODES="3")
    code = ("import torch.distributed.run as r; a = r.get_args_parser().parse_args(['t.py']); "
            "print(a.standalone, a.nnodes)")
    out = subprocess.run(["python3", "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "3"], (run, out)


@pytest.mark.parametrize("name", ["PET_STANDALONE", "ACCELERATE_USE_DEEPSPEED", "PDSH_SSH_ARGS_APPEND"])
def test_launcher_twins_are_owned_in_a_stage_job_env(ck, tmp_path: Path, name: str) -> None:
    site = _site(tmp_path, f"stages:\n  multi-node:\n    job:\n      env: {{{name}: '1'}}\n")
    assert_one_line_error(_render(ck, tmp_path, site=site), 2, "site.yaml:7", name)


@pytest.mark.parametrize("name", ["PETS", "PET", "ACCELERATE_LOG_LEVEL", "MY_PET_NAME", "PDSH"])
def test_names_near_the_twins_are_the_job_s_own(ck, tmp_path: Path, name: str) -> None:
    result = _render(ck, tmp_path, "--env", f"{name}=1")
    assert result.code == 0, result.err


def test_container_env_reaches_the_launcher_step_alone(ck, tmp_path: Path) -> None:
    site = _site(tmp_path, "software:\n  container:\n    runtime: pyxis\n    image: i\n"
                           "    env: {HF_HOME: /data/hf, CK_MARK_NOT: 1, SITE_ONLY_VAR: 'a b'}\n"
                 .replace("CK_MARK_NOT: 1, ", ""))
    result = _render(ck, tmp_path, site=site)
    assert result.code == 0, result.err
    text = (tmp_path / "run" / "job.sbatch").read_text()
    head, launcher = text.split("ck_launch=(\n", 1)
    launcher, tail = launcher.split("\n)\n", 1)
    for outside in (head, tail):   # the batch shell: clusterkit's preflight, choose-nodes, doctor run here
        assert "HF_HOME" not in outside and "SITE_ONLY_VAR" not in outside
    prefix = launcher.split("\n  srun ", 1)[0].strip().rstrip("\\").strip()
    assert prefix.startswith("env "), prefix   # the launch argv: env with the assignments, then srun
    prefix = prefix.removeprefix("env ")
    got = subprocess.run(["bash", "-c", prefix + ' bash -c \'printf "%s|%s" "$HF_HOME" "$SITE_ONLY_VAR"\'; '
                          'printf "|%s" "${HF_HOME-unset}"'], capture_output=True, text=True, env={}).stdout
    assert got == "/data/hf|a b|unset"      # set for the command, not for the shell after it
    names = re.search(r"--container-env=(\S+)", launcher)
    assert names and "HF_HOME" in names.group(1) and "SITE_ONLY_VAR" in names.group(1)


# nccl.env's comments: a value with a newline never becomes a live line.
HOSTILE_VALUES = ["eth0\ntouch PWNED", "eth0\r\ntouch PWNED2", "eth0\n#\ntouch PWNED3 #", "eth0\\\ntouch PWNED4",
                  "eth0\u2028touch PWNED5"]


@pytest.mark.parametrize("value", HOSTILE_VALUES)
def test_replaced_site_value_never_becomes_a_live_line(ck, tmp_path: Path, value: str) -> None:
    site = _site(tmp_path, "nccl:\n  env: {NCCL_SOCKET_IFNAME: " + __import__("json").dumps(value) + "}\n")
    result = _render(ck, tmp_path, "--env", "NCCL_SOCKET_IFNAME=eth1", site=site)
    assert result.code == 0, result.err
    run = tmp_path / "run"
    env_text = (run / "nccl.env").read_text()
    line = next(ln for ln in env_text.splitlines() if ln.startswith("NCCL_SOCKET_IFNAME="))
    assert "(replaced eth0\\x" in line or "(replaced eth0\\\\" in line or "(replaced eth0\\u2028" in line, line
    # sourced as its header says: the values, and nothing run
    got = subprocess.run(["bash", "-c", "set -a; . ./nccl.env; set +a; printf %s \"$NCCL_SOCKET_IFNAME\""],
                         cwd=run, capture_output=True, text=True)
    assert got.returncode == 0 and got.stdout == "eth1", got
    assert not list(run.glob("PWNED*")) and not list(tmp_path.glob("PWNED*"))
    assert subprocess.run(["bash", "-n", str(run / "job.sbatch")]).returncode == 0


def test_env_file_name_with_a_newline_stays_in_its_comment(ck, tmp_path: Path) -> None:
    env_file = tmp_path / "a\ntouch PWNED\n.env"
    env_file.write_text("NCCL_DEBUG=WARN\n")
    result = _render(ck, tmp_path, "--env-file", str(env_file))
    assert result.code == 0, result.err
    run = tmp_path / "run"
    for ln in (run / "nccl.env").read_text().splitlines():
        assert ln.startswith("#") or re.match(r"[A-Z_][A-Z0-9_]*=", ln), ln
    got = subprocess.run(["bash", "-c", "set -a; . ./nccl.env"], cwd=run, capture_output=True, text=True)
    assert got.returncode == 0 and not list(run.glob("PWNED*")), got
