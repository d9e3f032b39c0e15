"""Every golden site x stage x launcher, through the launchers' own code.

The argv comes from plan.json: ``launch.line`` (the launcher words, as the job script's body
holds them) expanded by bash with the runtime variables a node would have, followed by
``launch.command``.  That argv, the hostfile and the config files then go through:

- torchrun / megatron: ``torch.distributed.run.get_args_parser()``;
- deepspeed: ``deepspeed.launcher.runner`` (``parse_args``, ``fetch_hostfile``,
  ``parse_inclusion_exclusion``, ``apply_num_nodes_and_gpus`` and main()'s own refusals) and
  ``DeepSpeedConfig`` with the job's data-parallel world (through an ``mpu``, as Megatron passes it);
- accelerate: its config loader, ``launch_command_parser``, ``_validate_launch_command`` and
  ``prepare_multi_gpu_env`` + the torchrun namespace it builds (all of ``accelerate launch`` but
  starting the processes).

- horovod, colossalai: they do not install here (horovod's pip install compiles Gloo/MPI,
  colossalai pins an older torch).  tests/run.sh unpacks pinned releases of their pure-Python code
  (horovod 0.28.1 and colossalai 0.5.0 source releases; fabric 3.2.2 and what it needs, wheels) into a side directory
  it names in ``CK_SIDE_LAUNCHERS``; side_launchers.py imports the packages from there, whole (their
  own ``__init__`` files, no package stub), in a subprocess, and runs horovodrun's ``parse_args`` +
  ``_run`` host resolution (``parse_host_files`` / ``parse_hosts_and_slots`` /
  ``get_host_assignments``) and colossalai's click command (``make_context`` + ``invoke``, through
  ``launch_multi_processes``: ``fetch_hostfile``, ``get_launch_command``).  Stand-ins, named as
  such there: what would contact the hosts (horovod's ``_run_static``/``_run_elastic``,
  colossalai's fabric ``MultiNodeRunner``, recorders both) and the resolution of the plan's host
  names (to TEST-NET-1 addresses).  The torchrun command colossalai builds per node then goes
  through ``torch.distributed.run``'s parser.  Without ``CK_SIDE_LAUNCHERS`` (pytest run directly)
  these cases skip and say why; under tests/run.sh a missing side directory fails.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import assert_one_line_error
from tests.render.test_golden import CASES, GOLDEN

pytest.importorskip("torch", reason="torch (CPU build) is in the examples extra")
ds_runner = pytest.importorskip("deepspeed.launcher.runner", reason="deepspeed is in the test extra")
acc_launch = pytest.importorskip("accelerate.commands.launch", reason="accelerate is in the test extra")

# horovod and colossalai do not install here; their launcher code runs from the side directory
SIDE_LAUNCHERS = {"horovod": "its pip install compiles Gloo/MPI", "colossalai": "it pins an older torch"}
SIDE_SCRIPT = Path(__file__).parent / "side_launchers.py"
RENDERED = [c for c in CASES if (GOLDEN / c[0] / c[1] / c[2] / "plan.json").exists()]


class DataParallel:
    """The ``mpu`` argument of DeepSpeedConfig: it asks for the data-parallel world size."""

    def __init__(self, size: int) -> None:
        self.size = size

    def get_data_parallel_world_size(self) -> int:
        return self.size


@pytest.fixture(scope="module")
def ds_comm() -> Iterator[None]:
    """DeepSpeedConfig reads the world from deepspeed.comm (world 1 when it is not initialised):
    start a one-process gloo group so the ``mpu`` it is given counts; end it after the module."""
    import deepspeed
    import deepspeed.comm as dist
    import torch.distributed

    started = not dist.is_initialized()
    if started:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False,
                                   init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    if started and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def materialise(src: Path, run_dir: Path) -> dict[str, Any]:
    """Copy a golden (or rendered) run directory to run_dir with @RUN_DIR@ put back; plan.json."""
    run_dir.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file():
            (run_dir / f.name).write_text(f.read_text().replace("@RUN_DIR@", str(run_dir)))
    return json.loads((run_dir / "plan.json").read_text())


def argv(plan: dict[str, Any], run_dir: Path, node: int) -> list[str]:
    """The launcher's argv on node ``node``: bash expands the line as the job's body does.
    (The ``nodes`` of a ``check_*``: those to check, every node when None.)"""
    hosts = plan["hosts"]
    env = {"PATH": os.environ["PATH"], "CK_RUN_DIR": str(run_dir), "CK_HOSTFILE": str(run_dir / "hostfile"),
           "CK_HEAD": hosts[0], "CK_PORT": "20123", "SLURM_NODEID": str(node), "SLURM_NNODES": str(plan["nnodes"]),
           "SLURM_JOB_ID": "123", "CK_NNODES": str(plan["nnodes"]),
           "CK_HOSTS_SLOTS": ",".join(f"{h}:{plan['gpus_per_node']}" for h in hosts),
           "CK_NODELIST": ",".join(hosts), "SLURMD_NODENAME": hosts[node]}
    p = subprocess.run(["bash", "-c", "printf '%s\\0' " + plan["launch"]["line"] + ' "$@"', "ck",
                        *plan["launch"]["command"]], env=env, capture_output=True, text=True, check=True)
    return p.stdout.split("\0")[:-1]


def check_torchrun(plan: dict[str, Any], run_dir: Path, nodes: Sequence[int] | None = None) -> None:
    import torch.distributed.run as torchrun

    for node in range(plan["nnodes"]) if nodes is None else nodes:
        words = argv(plan, run_dir, node)
        assert words[0] == "torchrun"
        ns = torchrun.get_args_parser().parse_args(words[1:])
        assert int(ns.nproc_per_node) == plan["gpus_per_node"]
        assert [ns.training_script, *ns.training_script_args] == plan["launch"]["command"]
        if plan["nnodes"] == 1:
            # one node: a static rendezvous on loopback at the job's port (--standalone's store
            # would take a port from the ephemeral range)
            assert not ns.standalone and ns.master_addr == "127.0.0.1" and ns.master_port == 20123
        else:
            assert ns.nnodes == str(plan["nnodes"]) and ns.rdzv_backend == "c10d"
            assert ns.rdzv_endpoint == f"{plan['hosts'][0]}:20123"
            conf = dict(kv.split("=", 1) for kv in ns.rdzv_conf.split(","))
            assert int(conf["join_timeout"]) >= 600


def check_deepspeed(plan: dict[str, Any], run_dir: Path, nodes: Sequence[int] | None = None) -> None:
    from deepspeed.runtime.config import DeepSpeedConfig

    for node in range(plan["nnodes"]) if nodes is None else nodes:
        words = argv(plan, run_dir, node)
        assert words[0] == "deepspeed"
        args = ds_runner.parse_args(words[1:])
        if plan["nnodes"] > 1:
            pool = ds_runner.fetch_hostfile(args.hostfile)
            assert list(pool) == plan["hosts"] and set(pool.values()) == {plan["gpus_per_node"]}
        else:
            assert not Path(args.hostfile).exists()          # main() then pools the local devices
            pool = {"localhost": plan["gpus_per_node"]}
        if args.num_nodes >= 0 or args.num_gpus >= 0:         # main()'s own refusal
            assert args.include == "" and args.exclude == "", "Cannot specify num_nodes/gpus with include/exclude"
        active = ds_runner.parse_inclusion_exclusion(pool, args.include, args.exclude)
        active = ds_runner.apply_num_nodes_and_gpus(active, args.num_nodes, args.num_gpus)
        assert sum(len(v) for v in active.values()) == plan["world_size"]
        if args.no_ssh:
            assert 0 <= args.node_rank < len(active) and args.node_rank == node
            assert args.master_addr == plan["hosts"][0] and args.master_port == 20123
        assert [args.user_script, *args.user_args] == plan["launch"]["command"]
    config = next(e["value"] for e in plan["env"] if e["name"] == "CK_DS_CONFIG")
    cfg = DeepSpeedConfig(config, mpu=DataParallel(plan["world_size"]))
    assert cfg.world_size == plan["world_size"]
    assert cfg.train_batch_size == (cfg.train_micro_batch_size_per_gpu * cfg.gradient_accumulation_steps
                                    * plan["world_size"])


def check_accelerate(plan: dict[str, Any], run_dir: Path, nodes: Sequence[int] | None = None) -> None:
    import torch.distributed.run as torchrun
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.utils.launch import prepare_multi_gpu_env

    loaded = load_config_from_file(str(run_dir / "accelerate.yaml"))
    assert (loaded.num_machines, loaded.num_processes) == (plan["nnodes"], plan["world_size"])
    for node in range(plan["nnodes"]) if nodes is None else nodes:
        words = argv(plan, run_dir, node)
        assert words[:2] == ["accelerate", "launch"]
        args = acc_launch.launch_command_parser().parse_args(words[2:])
        args, _defaults, _mp = acc_launch._validate_launch_command(args)
        assert [args.training_script, *args.training_script_args] == plan["launch"]["command"]
        if not (args.multi_gpu or args.use_fsdp):
            assert plan["world_size"] == 1
            continue
        prepare_multi_gpu_env(args)
        # the torchrun namespace multi_gpu_launcher hands to torch.distributed.run.run()
        ns = acc_launch._filter_args(args, torchrun.get_args_parser(),
                                     ["--training_script", args.training_script,
                                      "--training_script_args", args.training_script_args])
        assert int(ns.nproc_per_node) * int(ns.nnodes.split(":")[-1]) == plan["world_size"]   # torchrun's MIN:MAX
        if plan["nnodes"] > 1:
            assert int(ns.node_rank) == node
            assert torchrun.get_rdzv_endpoint(ns) == f"{plan['hosts'][0]}:20123"   # what torchrun will use


def check_srun(plan: dict[str, Any], run_dir: Path, nodes: Sequence[int] | None = None) -> None:
    # no launcher: each Slurm task runs the command as given, ranks from SLURM_PROCID
    assert plan["launch"]["mode"] == "per_gpu"
    assert argv(plan, run_dir, 0) == plan["command"]


def side_dir(launcher: str) -> Path:
    """The side directory tests/run.sh prepares (CK_SIDE_LAUNCHERS): skip when unset, fail when
    it is set but lacks the unpacked package."""
    value = os.environ.get("CK_SIDE_LAUNCHERS")
    if not value:
        pytest.skip(f"{launcher} does not install here ({SIDE_LAUNCHERS[launcher]}): its launcher code is "
                    "unpacked into a side directory by tests/run.sh, which sets CK_SIDE_LAUNCHERS; unset here")
    side = Path(value)
    if not (side / launcher / "__init__.py").is_file():
        pytest.fail(f"CK_SIDE_LAUNCHERS={side} has no {launcher} package: tests/run.sh's side step did not "
                    "unpack it (delete build/side-launchers and rerun tests/run.sh)")
    return side


def run_side(launcher: str, plan: dict[str, Any], run_dir: Path, words: list[str]) -> dict[str, Any]:
    """side_launchers.py in a subprocess: the launcher's own code on ``words`` and the hostfile."""
    side = side_dir(launcher)
    hostfile = run_dir / "hostfile"
    request, result = run_dir / f"{launcher}.request.json", run_dir / f"{launcher}.result.json"
    request.write_text(json.dumps({"argv": words, "hosts": plan["hosts"],
                                   "hostfile": str(hostfile) if hostfile.exists() else None}))
    p = subprocess.run([sys.executable, str(SIDE_SCRIPT), str(side), launcher, str(request), str(result)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    out = json.loads(result.read_text())
    out["stdout"] = p.stdout[-2000:]            # the launcher's own messages (click.echo), for failures
    assert out["loaded"] and all(Path(f).is_relative_to(side.resolve()) for f in out["loaded"]), out["loaded"]
    return out


def check_horovod(plan: dict[str, Any], run_dir: Path, nodes: Sequence[int] | None = None) -> None:
    # horovodrun runs once, on the first node; it starts every rank itself
    assert plan["launch"]["mode"] == "once"
    words = argv(plan, run_dir, 0)
    assert words[0] == "horovodrun"
    out = run_side("horovod", plan, run_dir, words)
    hosts, gpus, world = plan["hosts"], plan["gpus_per_node"], plan["world_size"]
    assert out["mode"] == "static"
    assert out["num_proc"] == world == len(hosts) * gpus                      # -np = total slots
    assert out["names"] == hosts and out["slots"] == {h: gpus for h in hosts}
    assert out["command"] == plan["launch"]["command"]
    # gloo_run's rank placement: every slot of every host, local ranks 0..gpus-1, in host order
    assert [(a[0], a[1], a[2], a[3], a[4]) for a in out["alloc"]] == [
        (h, n * gpus + i, i, world, gpus) for n, h in enumerate(hosts) for i in range(gpus)]
    if "hostfile_names" in out:       # the rendered hostfile says the same, read horovod's way
        assert out["hostfile_names"] == hosts and out["hostfile_slots"] == out["slots"]


def check_colossalai(plan: dict[str, Any], run_dir: Path, nodes: Sequence[int] | None = None) -> None:
    import torch.distributed.run as torchrun

    assert plan["launch"]["mode"] == "once"
    words = argv(plan, run_dir, 0)
    out = run_side("colossalai", plan, run_dir, words)
    hosts, gpus, nnodes = plan["hosts"], plan["gpus_per_node"], plan["nnodes"]
    params = out["params"]
    assert out["exit"] == 0, out["stdout"]    # its refusals exit() without a code, after a message
    assert params["nproc_per_node"] == gpus and params["master_port"] == 20123
    assert [params["user_script"], *params["user_args"]] == plan["launch"]["command"]
    if nnodes > 1:
        assert out["hostfile_hosts"] == hosts                  # fetch_hostfile on the bare hostfile
        assert [h for h, _port, _local in out["connected"]] == hosts
    else:
        assert out["connected"] == [["127.0.0.1", None, True]]    # no hosts given: the local node
    assert [h for h, _cmd in out["sent"]] == [h for h, _p, _l in out["connected"]]
    # the torchrun command colossalai sends each node, through torchrun's own parser
    for node, (_host, cmd) in enumerate(out["sent"]):
        cmd_words = shlex.split(cmd)
        assert cmd_words[0] == "torchrun"
        ns = torchrun.get_args_parser().parse_args(cmd_words[1:])
        assert int(ns.nproc_per_node) == gpus and ns.nnodes == str(nnodes) and ns.node_rank == node
        assert ns.master_addr == (hosts[0] if nnodes > 1 else "127.0.0.1") and ns.master_port == 20123
        assert [ns.training_script, *ns.training_script_args] == plan["launch"]["command"]


def check_mpirun(plan: dict[str, Any], run_dir: Path, nodes: Sequence[int] | None = None) -> None:
    # Open MPI's own mpirun (Debian's openmpi-bin) reads the argv and the hostfile and maps the
    # ranks without starting them (--do-not-launch --display-map)
    from clusterkit.job.launchers.mpirun import RANKS

    if shutil.which("mpirun") is None:
        pytest.skip("Open MPI's mpirun is not installed (apt-get install openmpi-bin; tests/run.sh does)")
    assert plan["launch"]["mode"] == "once"
    words = argv(plan, run_dir, 0)
    gpus, command = plan["gpus_per_node"], plan["launch"]["command"]
    assert words[0] == "mpirun" and words[-len(command) - 4:] == ["bash", "-c", RANKS, "clusterkit-rank", *command]
    env = {"PATH": os.environ["PATH"], "HOME": str(run_dir), "TMPDIR": str(run_dir),
           "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    p = subprocess.run(["mpirun", "--do-not-launch", "--display-map", *words[1:]], env=env, capture_output=True,
                       text=True, timeout=60, cwd=run_dir)
    out = p.stdout + p.stderr
    placed = re.findall(r"Data for node: (\S+)\s+Num slots: (\d+)\s+Max slots: \d+\s+Num procs: (\d+)", out)
    ranks = [int(r) for r in re.findall(r"Process rank: (\d+)", out)]
    hosts = plan["hosts"] if plan["scheduler"] == "slurm" else [socket.gethostname()]
    assert [(h, int(s), int(n)) for h, s, n in placed] == [(h, gpus, gpus) for h in hosts], out[-3000:]
    assert ranks == list(range(plan["world_size"])), out[-3000:]   # in host order, G ranks each


CHECKS = {"torchrun": check_torchrun, "megatron": check_torchrun, "deepspeed": check_deepspeed,
          "accelerate": check_accelerate, "srun": check_srun, "horovod": check_horovod,
          "colossalai": check_colossalai, "mpirun": check_mpirun}


@pytest.mark.parametrize("site,stage,launcher", RENDERED, ids=["-".join(c) for c in RENDERED])
def test_golden_case_through_launcher_code(request: pytest.FixtureRequest, tmp_path: Path, site: str, stage: str,
                                           launcher: str) -> None:
    if launcher in SIDE_LAUNCHERS:
        side_dir(launcher)            # skip (CK_SIDE_LAUNCHERS unset) or fail (set, not unpacked) first
    if launcher == "deepspeed":
        request.getfixturevalue("ds_comm")
    run_dir = tmp_path / "run"
    plan = materialise(GOLDEN / site / stage / launcher, run_dir)
    CHECKS[launcher](plan, run_dir)


def _render(ck, tmp_path: Path, *args: str, command: tuple[str, ...] = ("python", "train.py", "--lr", "1")) -> Path:
    out = tmp_path / "rendered"
    result = ck("render", *args, "--launcher", "deepspeed", "--out", str(out), "--", *command)
    assert result.code == 0, result.err
    return out


@pytest.mark.parametrize("args,world", [
    (["--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--set", "exclude_slots=node2:1,3"], 14),
    (["--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--set", "include=node1:0,1@node2"], 10),
    (["--site", "testbed", "--stage", "multi-node", "--nodes", "3", "--set", "ds_launcher=pdsh",
      "--set", "max_restarts=0", "--set", "include=node1@node3:2"], 9),
    (["--site", "testbed", "--set", "include=localhost:0,1,2"], 3),
    (["--site", "testbed", "--set", "exclude_slots=localhost:7", "--set", "micro_batch=3"], 7),
])
def test_filters_through_deepspeed_code(ck, ds_comm: None, tmp_path: Path, args: list[str], world: int) -> None:
    """include / exclude_slots: world size and batch math as DeepSpeed itself resolves them."""
    out = _render(ck, tmp_path, *args)
    plan = json.loads((out / "plan.json").read_text())
    assert plan["world_size"] == world
    check_deepspeed(plan, out)
    script = out / "job.sbatch"
    assert f"= world size {world}" in script.read_text()
    if shutil.which("shellcheck"):        # the allocation check the filter adds is clean shell too
        p = subprocess.run(["shellcheck", "--shell=bash", "--severity=info", str(script)],
                           capture_output=True, text=True)
        assert p.returncode == 0, p.stdout


@pytest.mark.parametrize("ds_args,extra", [("deepspeed", ["--deepspeed_config"]), ("hf", ["--deepspeed"]),
                                           ("none", [])])
def test_ds_args_tell_the_script_the_config(ck, tmp_path: Path, ds_args: str, extra: list[str]) -> None:
    out = _render(ck, tmp_path, "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--set",
                  f"ds_args={ds_args}")
    plan = json.loads((out / "plan.json").read_text())
    config = str(out / "ds_config.json")
    assert plan["launch"]["command"] == ["train.py", "--lr", "1", *([*extra, config] if extra else [])]
    assert {e["name"]: e["value"] for e in plan["env"]}["CK_DS_CONFIG"] == config
    assert f"export CK_DS_CONFIG={config}" in (out / "job.sbatch").read_text()


@pytest.mark.parametrize("form", [["--deepspeed", "{}"], ["--deepspeed={}"], ["--deepspeed_config", "{}"],
                                  ["--deepspeed_config={}"], ["--deepspeed", "--deepspeed_config", "{}"]])
def test_the_commands_own_config_wins(ck, ds_comm: None, tmp_path: Path, form: list[str]) -> None:
    user = tmp_path / "my ds.json"
    user.write_text(json.dumps({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4,
                                "zero_optimization": {"stage": 1}}))
    words = [w.format(user) for w in form]
    out = _render(ck, tmp_path, "--site", "testbed", "--set", "ds_args=hf", command=("python", "train.py", *words))
    plan = json.loads((out / "plan.json").read_text())
    assert plan["launch"]["command"] == ["train.py", *words]          # nothing added, nothing doubled
    assert not (out / "ds_config.json").exists()
    assert {e["name"]: e["value"] for e in plan["env"]}["CK_DS_CONFIG"] == str(user)
    check_deepspeed(plan, out)


@pytest.mark.parametrize("content,needle", [
    ('{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 1}', "16 != micro 1 x accum 1 x data parallel 15"),
    ('{"train_batch_size": 16,', "not valid JSON"),
    ('[1, 2]', "JSON object"),
    ('{"gradient_accumulation_steps": 2}', "neither train_batch_size nor train_micro_batch_size_per_gpu"),
    (None, "cannot read the DeepSpeed config"),
])
def test_bad_user_config_is_one_line_error(ck, tmp_path: Path, content: str | None, needle: str) -> None:
    user = tmp_path / "ds.json"
    if content is not None:
        user.write_text(content)
    result = ck("render", "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "8",
                "--launcher", "deepspeed", "--set", "exclude_slots=node1:7", "--out", str(tmp_path / "r"),
                "--", "python", "train.py", "--deepspeed", str(user))
    assert_one_line_error(result, 2, needle, str(user))
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("args,needle", [
    (["--stage", "multi-node", "--nodes", "2", "--set", "exclude_slots=node2"], "drops every slot of node2"),
    (["--stage", "multi-node", "--nodes", "2", "--set", "exclude_slots=node2:0,1,2,3,4,5,6,7"], "--exclude instead"),
    (["--stage", "multi-node", "--nodes", "3", "--set", "include=node1@node2"], "must name every allocated host"),
    (["--stage", "multi-node", "--nodes", "2", "--set", "include=node9"], "node9 is not one of the site's nodes"),
    (["--set", "include=node1:0"], "deepspeed calls its one host 'localhost'"),
    (["--set", "exclude_slots=localhost"], "leaves no slots"),
    (["--set", "include=localhost:8"], "slot 8 on localhost is out of range 0-7"),
    (["--set", "include=localhost", "--set", "exclude_slots=localhost:1"], "mutually exclusive"),
    (["--set", "ds_args=hf"], "bare --deepspeed flag"),
])
def test_filters_deepspeed_would_get_wrong_are_refused(ck, tmp_path: Path, args: list[str], needle: str) -> None:
    result = ck("render", "--site", "testbed", "--launcher", "deepspeed", *args, "--out", str(tmp_path / "r"),
                "--", "python", "train.py", "--deepspeed")
    assert_one_line_error(result, 2, needle)
    assert not (tmp_path / "r").exists()
