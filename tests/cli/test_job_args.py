"""``--srun-arg``, ``--launcher-arg``, ``--sbatch`` and a user's own accelerate config, rendered.

Each argument lands where it is meant to (every srun step, the launcher's own argv, an #SBATCH
line), is parsed by the real tool's own parser where it installs here (torchrun, deepspeed's
runner, accelerate launch), and every flag clusterkit owns is refused before anything is written,
in one line naming the setting that controls it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import assert_one_line_error

SITE = """name: args
nodes: {nodelist: 'n[1-4]', gpus_per_node: 2, cpus_per_node: 8}
storage: [{path: /, type: nfs}]
"""


@pytest.fixture
def site(tmp_path: Path) -> Path:
    path = tmp_path / "site.yaml"
    path.write_text(SITE)
    return path


def render(ck, site: Path, out: Path, *args: str, command: tuple[str, ...] = ("python", "train.py")) -> Path:
    result = ck("render", "--site", str(site), "--out", str(out), *args, "--", *command)
    assert result.code == 0, result.err
    return out


def plan_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "plan.json").read_text())


def srun_words(run_dir: Path) -> list[str]:
    """The launch step's srun argv as bash hands it to srun."""
    text = (run_dir / "job.sbatch").read_text()
    line = next(ln.strip() for ln in text.splitlines() if ln.lstrip().startswith("srun "))
    opts = line.split(" \\")[0]
    out = subprocess.run(["bash", "-c", f"SLURM_RESTART_COUNT=0; printf '%s\\0' {opts}"], capture_output=True,
                         text=True, check=True).stdout
    return out.split("\0")[:-1]


def launcher_argv(run_dir: Path, node: int = 1) -> list[str]:
    """The launcher's argv on node ``node``, expanded by bash as the job's step body does."""
    plan = plan_of(run_dir)
    hosts = [f"n{i + 1}" for i in range(plan["nnodes"])]
    env = {"PATH": os.environ["PATH"], "CK_HEAD": "n1", "CK_PORT": "20123", "SLURM_NODEID": str(node),
           "SLURM_NNODES": str(plan["nnodes"]), "SLURM_JOB_ID": "123", "CK_HOSTFILE": f"{run_dir}/hostfile",
           "CK_NODELIST": ",".join(hosts), "SLURMD_NODENAME": hosts[node] if node < len(hosts) else "n0"}
    p = subprocess.run(["bash", "-c", "printf '%s\\0' " + plan["launch"]["line"] + ' "$@"', "ck",
                        *plan["launch"]["command"]], env=env, capture_output=True, text=True, check=True)
    return p.stdout.split("\0")[:-1]


# ---- --srun-arg ----------------------------------------------------------------------------

def test_srun_args_follow_clusterkits_own_on_the_step(ck, site: Path, tmp_path: Path) -> None:
    site.write_text(SITE + "job: {srun_args: ['--mpi=pmix']}\n")
    run_dir = render(ck, site, tmp_path / "r", "--stage", "multi-node", "--srun-arg=--label",
                     "--srun-arg=--distribution", "--srun-arg=block:cyclic", "--srun-arg=-u",
                     "--srun-arg=--cpu-bind=cores")
    words = srun_words(run_dir)
    assert words[-6:] == ["--mpi=pmix", "--label", "--distribution", "block:cyclic", "-u", "--cpu-bind=cores"]
    # the chosen nodes ($CK_NODELIST: unset here, so empty) and the step's own task count come first
    assert words[1:6] == ["--nodes=2", "--nodelist=", "--ntasks=2", "--kill-on-bad-exit=1", "--cpus-per-task=8"]
    assert plan_of(run_dir)["job"]["srun_args"] == words[-6:]


@pytest.mark.parametrize("args,needle", [
    (["--nodes=3"], "srun option --nodes is clusterkit's: it is set from --nodes and --gpus-per-node"),
    (["--nodes", "3"], "'--nodes': srun option --nodes is clusterkit's"),
    (["--nod=3"], "srun option --nodes is clusterkit's"),
    (["-N3"], "srun option -N is clusterkit's"),
    (["-lN", "3"], "'-lN': srun option -N is clusterkit's"),
    (["--ntasks-per-node=8"], "--ntasks-per-node is clusterkit's: it is set from --launcher"),
    (["-c", "4"], "srun option -c is clusterkit's: it is set from --set cpus_per_task=N"),
    (["--kill-on-bad-exit=0"], "--kill-on-bad-exit is clusterkit's"),
    (["--output=/tmp/x"], "--output is clusterkit's: it is set from --out"),
    (["--export=NONE"], "--export is clusterkit's: it is set from --env"),
    (["--container-image=x"], "the site's software.container"),
    (["--nodelist=n1"], "--nodelist is clusterkit's: it is set from --exclude"),
    (["--label", "hostname"], "'hostname': not an option, and no option before it takes a value: srun would take "
                              "it for the program to run"),
    (["--"], "'--' would end srun's options"),
])
def test_owned_srun_flags_are_refused(ck, site: Path, tmp_path: Path, args: list[str], needle: str) -> None:
    result = ck("render", "--site", str(site), "--out", str(tmp_path / "r"),
                *(f"--srun-arg={a}" for a in args), "--", "python", "train.py")
    assert_one_line_error(result, 2, "clusterkit: error: --srun-arg ", needle)
    assert not (tmp_path / "r").exists()


def test_a_sites_owned_srun_flag_names_the_site(ck, site: Path, tmp_path: Path) -> None:
    site.write_text(SITE + "job: {srun_args: ['--ntasks=2']}\n")
    result = ck("render", "--site", str(site), "--out", str(tmp_path / "r"), "--", "python", "train.py")
    assert_one_line_error(result, 2, "--ntasks is clusterkit's", "(from the site's job.srun_args)")


def test_a_local_site_has_no_srun_steps(ck, tmp_path: Path) -> None:
    result = ck("render", "--site", "local", "--out", str(tmp_path / "r"), "--srun-arg=--label",
                "--", "python", "train.py")
    assert_one_line_error(result, 2, "--srun-arg '--label': site local is a local site: no srun steps")


# ---- --launcher-arg --------------------------------------------------------------------------

def test_torchrun_takes_its_own_flags_as_given(ck, site: Path, tmp_path: Path) -> None:
    import torch.distributed.run as torchrun

    run_dir = render(ck, site, tmp_path / "r", "--stage", "multi-node", "--launcher-arg=--tee=3",
                     "--launcher-arg", "--max-restarts", "--launcher-arg", "2", "--launcher-arg=--log-dir=/tmp/l")
    words = launcher_argv(run_dir)
    args = torchrun.get_args_parser().parse_args(words[1:])
    assert (args.tee, args.max_restarts, args.log_dir) == ("3", 2, "/tmp/l")
    assert (args.nnodes, args.nproc_per_node, torchrun.get_rdzv_endpoint(args)) == ("2", "2", "n1:20123")
    assert args.rdzv_backend == "c10d"
    assert [args.training_script, *args.training_script_args] == ["train.py"]


def test_deepspeed_runner_takes_its_own_flags(ck, site: Path, tmp_path: Path) -> None:
    from deepspeed.launcher.runner import parse_args

    run_dir = render(ck, site, tmp_path / "r", "--stage", "multi-node", "--launcher", "deepspeed",
                     "--launcher-arg=--bind_cores_to_rank", "--launcher-arg=--enable_each_rank_log=/tmp/ranks")
    args = parse_args(launcher_argv(run_dir)[1:])
    assert args.bind_cores_to_rank and args.enable_each_rank_log == "/tmp/ranks"
    assert (args.node_rank, args.no_ssh, args.user_script) == (1, True, "train.py")


@pytest.mark.parametrize("launcher,arg,needle", [
    ("torchrun", "--nproc_per_node=4", "torchrun option --nproc-per-node is clusterkit's: it is set from --nodes"),
    ("torchrun", "--rdzv-endpoint=h:1", "torchrun option --rdzv-endpoint is clusterkit's"),
    ("torchrun", "--nnod=2", "torchrun option --nnodes is clusterkit's"),
    ("torchrun", "--node-rank", "torchrun option --node-rank is clusterkit's"),
    ("torchrun", "--rdzv_conf=timeout=5", "torchrun option --rdzv-conf is clusterkit's: it is set from clusterkit "
     "(the rendezvous timeout"),
    ("megatron", "--master_port=1", "megatron option --master-port is clusterkit's"),
    ("deepspeed", "--hostfile=/h", "deepspeed option --hostfile is clusterkit's"),
    ("deepspeed", "--include=n1", "deepspeed option --include is clusterkit's: it is set from --set include"),
    ("deepspeed", "--num-gpus=2", "deepspeed option --num_gpus is clusterkit's"),
    ("accelerate", "--machine_rank=0", "accelerate option --machine_rank is clusterkit's"),
    ("accelerate", "--num_processes=8", "accelerate option --num_processes is clusterkit's"),
    ("horovod", "-np", "horovod option -np is clusterkit's"),
    ("horovod", "-H=n1:2", "horovod option -H is clusterkit's"),
    ("colossalai", "--hostfile=/h", "colossalai option --hostfile is clusterkit's"),
    ("srun", "--foo", "the srun launcher starts every rank as an srun task, with no launcher process"),
    ("torchrun", "train2.py", "not an option, and no option before it takes a value: torchrun would take it"),
])
def test_owned_launcher_flags_are_refused(ck, site: Path, tmp_path: Path, launcher: str, arg: str,
                                          needle: str) -> None:
    result = ck("render", "--site", str(site), "--out", str(tmp_path / "r"), "--launcher", launcher,
                "--launcher-arg", arg, "--", "python", "train.py")
    assert_one_line_error(result, 2, "clusterkit: error: --launcher-arg ", needle)
    assert not (tmp_path / "r").exists()


# ---- --sbatch --------------------------------------------------------------------------------

def sbatch_lines(run_dir: Path) -> list[str]:
    return [ln for ln in (run_dir / "job.sbatch").read_text().splitlines() if ln.startswith("#SBATCH")]


def test_sbatch_options_per_job_win_over_the_sites(ck, site: Path, tmp_path: Path) -> None:
    site.write_text(SITE.replace("name: args\n", "name: args\nscheduler: {sbatch: {constraint: a100, "
                                 "exclusive: true}}\n"))
    run_dir = render(ck, site, tmp_path / "r", "--sbatch", "constraint=h100&ib", "--sbatch", "mail-type=END,FAIL",
                     "--sbatch", "begin=now+60", "--sbatch", "reservation=big", "--sbatch", "hold",
                     "--sbatch", "mem=20G")
    lines = sbatch_lines(run_dir)
    assert "#SBATCH --constraint=h100&ib" in lines and "#SBATCH --constraint=a100" not in lines
    assert {"#SBATCH --exclusive", "#SBATCH --mail-type=END,FAIL", "#SBATCH --begin=now+60",
            "#SBATCH --reservation=big", "#SBATCH --hold", "#SBATCH --mem=20G"} <= set(lines)
    # the job's own memory option replaces clusterkit's share of a partial node's
    assert [ln for ln in lines if ln.startswith("#SBATCH --mem")] == ["#SBATCH --mem=20G"]
    assert ["constraint", "h100&ib"] in plan_of(run_dir)["sbatch"]
    # what sbatch itself reads: bash sees comments, sbatch's own parser takes each line whole
    assert subprocess.run(["bash", "-n", str(run_dir / "job.sbatch")]).returncode == 0


@pytest.mark.parametrize("arg,needle", [
    ("nodes=3", "--sbatch 'nodes=3': sets --nodes, which clusterkit writes itself; use --nodes"),
    ("out=x", "sets --output, which clusterkit writes itself; use --out"),
    ("time=10", "sets --time, which clusterkit writes itself; use scheduler.time"),
    ("cpus-per-task=4", "use --set cpus_per_task=N"),
    ("wckey=a b", "whitespace, quotes and control characters are not allowed"),
    ("wckey=a\nsrun evil", "whitespace, quotes and control characters are not allowed"),
])
def test_owned_or_unsafe_sbatch_options_are_refused(ck, site: Path, tmp_path: Path, arg: str, needle: str) -> None:
    result = ck("render", "--site", str(site), "--out", str(tmp_path / "r"), "--sbatch", arg,
                "--", "python", "train.py")
    assert_one_line_error(result, 2, needle)
    assert not (tmp_path / "r").exists()


# ---- a user's own accelerate config ------------------------------------------------------------

ZERO3 = """compute_environment: LOCAL_MACHINE
distributed_type: DEEPSPEED
deepspeed_config:
  zero_stage: 3
  gradient_accumulation_steps: 2
  offload_optimizer_device: none
  offload_param_device: none
  zero3_init_flag: true
mixed_precision: bf16
num_machines: 2
num_processes: 4
machine_rank: 0
main_process_ip: 10.0.0.1
main_process_port: 29500
rdzv_backend: static
same_network: true
use_cpu: false
"""


def test_users_accelerate_config_with_zero3_per_node(ck, site: Path, tmp_path: Path) -> None:
    import torch.distributed.run as torchrun
    from accelerate.commands import launch as acc_launch

    cfg = tmp_path / "zero3.yaml"
    cfg.write_text(ZERO3)
    run_dir = render(ck, site, tmp_path / "r", "--stage", "multi-node", "--launcher", "accelerate",
                     "--launcher-arg=--config_file", f"--launcher-arg={cfg}", "--launcher-arg=--gpu_ids=all")
    # the rendered copy: the job's keys, the rest of the user's file as written
    copy = yaml.safe_load((run_dir / "accelerate.yaml").read_text())
    assert copy == {k: v for k, v in yaml.safe_load(ZERO3).items() if k not in ("main_process_ip", "main_process_port")}
    plan = plan_of(run_dir)
    assert "a copy of the user's own" in plan["launch"]["notes"][0] and "ZeRO stage 3" in plan["launch"]["notes"][1]
    for node in (0, 1):
        words = launcher_argv(run_dir, node)
        args = acc_launch.launch_command_parser().parse_args(words[2:])
        args, _defaults, _mp = acc_launch._validate_launch_command(args)   # loads the user's file
        assert args.config_file == str(run_dir / "accelerate.yaml") and args.use_deepspeed and args.zero_stage == 3
        assert args.gradient_accumulation_steps == 2 and args.mixed_precision == "bf16"
        # the per-node values win over the file's machine_rank 0 and main_process_ip
        assert (args.machine_rank, args.main_process_ip, args.main_process_port) == (node, "n1", 20123)
        assert args.deepspeed_multinode_launcher == "standard" and args.gpu_ids == "all"
        # what launch_command does next, up to the deepspeed_launcher it then calls
        assert not args.cpu
        args.deepspeed_fields_from_accelerate_config = ",".join(_defaults.deepspeed_config)
        cmd, env = acc_launch.prepare_deepspeed_cmd_env(args)
        assert env["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == "3" and env["ACCELERATE_USE_DEEPSPEED"] == "true"
        assert (env["ACCELERATE_DEEPSPEED_ZERO3_INIT"], env["ACCELERATE_MIXED_PRECISION"]) == ("true", "bf16")
        assert cmd is None   # standard: torch.distributed.run on this node, with this namespace
        ns = acc_launch._filter_args(args, torchrun.get_args_parser(),
                                     ["--training_script", args.training_script,
                                      "--training_script_args", args.training_script_args])
        assert (int(ns.node_rank), int(ns.nproc_per_node), torchrun.get_rdzv_endpoint(ns)) == (node, 2, "n1:20123")


@pytest.mark.parametrize("edit,args,needle", [
    (("LOCAL_MACHINE", "AMAZON_SAGEMAKER"), (), "zero3.yaml:1: compute_environment: 'AMAZON_SAGEMAKER'"),
    (("deepspeed_config:", "deepspeed_config: ["), (), "not valid YAML or JSON"),
    (("", ""), ("--set", "precision=fp16"), "accelerate: --set precision writes clusterkit's own accelerate config"),
])
def test_users_accelerate_config_checked_before_queueing(ck, site: Path, tmp_path: Path, edit: tuple[str, str],
                                                          args: tuple[str, ...], needle: str) -> None:
    cfg = tmp_path / "zero3.yaml"
    cfg.write_text(ZERO3.replace(*edit, 1) if edit[0] else ZERO3)
    result = ck("render", "--site", str(site), "--out", str(tmp_path / "r"), "--stage", "multi-node",
                "--launcher", "accelerate", f"--launcher-arg=--config_file={cfg}", *args, "--", "python", "train.py")
    assert_one_line_error(result, 2, needle)
    assert not (tmp_path / "r").exists()


def test_an_accelerate_config_written_for_one_machine_runs_on_the_jobs_nodes(ck, site: Path, tmp_path: Path) -> None:
    """Issue 40: num_machines, num_processes, machine_rank and main_process_ip are the job's; the
    rendered copy carries the job's counts, the command line the rest, and the file's other keys stay."""
    cfg = tmp_path / "one.yaml"
    one = (ZERO3.replace("num_machines: 2", "num_machines: 1").replace("num_processes: 4", "num_processes: 2")
           .replace("rdzv_backend: static", "rdzv_backend: c10d"))
    cfg.write_text(one)
    run_dir = render(ck, site, tmp_path / "r", "--stage", "multi-node", "--launcher", "accelerate",
                     f"--launcher-arg=--config_file={cfg}")
    copy = yaml.safe_load((run_dir / "accelerate.yaml").read_text())
    mine = yaml.safe_load(cfg.read_text())
    assert (copy["num_machines"], copy["num_processes"], copy["machine_rank"]) == (2, 4, 0)
    # the rendezvous is the job's too: a file's c10d (which torchrun's own restarts need) is not what
    # the job runs; its restarts are the supervisor's relaunches
    assert (copy["rdzv_backend"], copy["same_network"]) == ("static", True)
    assert "main_process_ip" not in copy and "main_process_port" not in copy
    assert {k: v for k, v in copy.items() if k not in OWN} == {k: v for k, v in mine.items() if k not in OWN}
    note = plan_of(run_dir)["launch"]["notes"][0]
    assert ("num_machines 1 -> 2, num_processes 2 -> 4, rdzv_backend 'c10d' -> static, main_process_ip dropped, "
            "main_process_port dropped" in note), note
    for node in (0, 1):
        words = launcher_argv(run_dir, node)
        assert words[words.index("--config_file") + 1] == str(run_dir / "accelerate.yaml")
        assert words[words.index("--machine_rank") + 1] == str(node)


OWN = ("num_machines", "num_processes", "machine_rank", "main_process_ip", "main_process_port", "rdzv_backend",
       "same_network")


def test_missing_accelerate_config_is_one_line(ck, site: Path, tmp_path: Path) -> None:
    result = ck("render", "--site", str(site), "--out", str(tmp_path / "r"), "--launcher", "accelerate",
                "--launcher-arg=--config_file=nope.yaml", "--", "python", "train.py")
    assert_one_line_error(result, 2, "accelerate: --config_file nope.yaml: cannot read the accelerate config")


def test_dry_run_shows_every_added_argument(ck, site: Path, tmp_path: Path) -> None:
    result = ck("submit", "--dry-run", "--no-snapshot",
                "--site", str(site), "--stage", "multi-node", "--out", str(tmp_path / "r"),
                "--srun-arg=--label", "--launcher-arg=--tee=3", "--sbatch", "constraint=h100", "--json",
                "--", "python", "train.py")
    assert result.code == 0, result.err
    shown = json.loads(result.out)
    script = shown["job_sbatch"]
    assert "#SBATCH --constraint=h100\n" in script
    assert " --label \\\n" in script and "--tee=3 \"$@\"'" in script
    assert script == (tmp_path / "r" / "job.sbatch").read_text()


@pytest.mark.parametrize("launcher,command", [
    ("accelerate", ("accelerate", "launch", "--config_file", "zero3.yaml", "train.py")),
    ("torchrun", ("/opt/venv/bin/torchrun", "--nproc-per-node=8", "train.py")),
    ("megatron", ("torchrun", "pretrain_gpt.py")),
])
def test_a_command_that_starts_the_launcher_itself_is_refused(ck, site: Path, tmp_path: Path, launcher: str,
                                                               command: tuple[str, ...]) -> None:
    result = ck("render", "--site", str(site), "--out", str(tmp_path / "r"), "--launcher", launcher,
                "--", *command)
    program = command[0].rsplit("/", 1)[-1]
    assert_one_line_error(result, 2, f"the command starts {program} itself", "put its options in --launcher-arg")


def test_in_job_preflight_step_gets_the_srun_args(ck, site: Path, tmp_path: Path) -> None:
    from clusterkit.config.load import load_site
    from clusterkit.nodes.runners import make_runner
    from clusterkit.supervise.start import parse

    run_dir = render(ck, site, tmp_path / "r", "--stage", "multi-node", "--set", "preflight_in_job=true",
                     "--srun-arg=--mpi=pmix", "--srun-arg=--comment=a b")
    text = (run_dir / "job.sbatch").read_text().replace("\\\n", " ")   # the start's call, its lines joined
    call = '"$ck_python" -m clusterkit.supervise.start '
    line = next(ln.strip() for ln in text.splitlines() if ln.strip().startswith(call))
    words = subprocess.run(["bash", "-c", "printf '%s\\0' " + line.split(" >")[0].replace('"$ck_python"', "python3")
                            .replace('"$ck_max_restarts"', "2")],
                           capture_output=True, text=True, check=True).stdout.split("\0")[:-1]
    assert "--srun-arg=--mpi=pmix" in words and "--srun-arg=--comment=a b" in words, words
    # the supervisor's start reads them and hands them to its preflight step
    env = {"CK_RUN_DIR": str(run_dir), "CK_JOB_ID": "7", "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-2]"}
    assert parse(words[3:], env).srun_arg == ["--mpi=pmix", "--comment=a b"]
    # what that command does with them: the srun step carries them after its own options
    runner = make_runner(load_site(str(site)), "srun", srun_args=("--mpi=pmix", "--comment=a b"))
    argv = runner.argv(["n1", "n2"], "true", 10, "M")
    bash = argv.index("bash")
    assert argv[bash - 4:bash] == ["--job-name", "clusterkit-preflight", "--mpi=pmix", "--comment=a b"]


@pytest.mark.parametrize("args,needle", [
    (["--transport", "ssh", "--srun-arg=--label"], "--srun-arg '--label': is for the srun transport only"),
    (["--transport", "srun", "--srun-arg=--ntasks=3"], "srun option --ntasks is clusterkit's"),
])
def test_preflight_srun_args_checked(ck, site: Path, args: list[str], needle: str) -> None:
    assert_one_line_error(ck("preflight", "--site", str(site), *args), 2, needle)
