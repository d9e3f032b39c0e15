"""The checkpoint capacity check of the preflight catalogue (clusterkit/preflight/capacity.py):
``clusterkit preflight --model-params N --keep-checkpoints K`` on this machine (the local
transport runs the real node script) against a real file system of a set size, a tmpfs mounted
by the test, so the check fails for real on space and on inodes; and the job's in-job preflight
asked for it from the job's settings (``--set model_params=``, or ``plan --render``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterkit.preflight.capacity import Space, parse_space
from tests.conftest import CLI

SITE = 'name: room\nnodes: {nodelist: "gpu[01-04]", gpus_per_node: 8}\n'
INODES = 64          # the tmpfs's inode limit: the root directory takes one
SIZE = 1 << 20       # and its size, 1 MiB


@pytest.fixture(scope="module")
def small_fs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A 1 MiB tmpfs of 64 inodes, unmounted after the module."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs of a set size needs root")
    mnt = tmp_path_factory.mktemp("room") / "mnt"
    mnt.mkdir()
    got = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE},nr_inodes={INODES},mode=0755",
                          "ck-room-test", str(mnt)], capture_output=True, text=True, check=False)
    if got.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {got.stderr.strip()[:200]}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


@pytest.fixture
def site(tmp_path: Path) -> Path:
    path = tmp_path / "room.yaml"
    path.write_text(SITE)
    return path


def room(ck: CLI, site: Path, *args: str) -> tuple[int, list[dict[str, str]]]:
    """The exit status and this node's checkpoint.* results of one local preflight."""
    res = ck("preflight", "--site", str(site), "--transport", "local", "--json", *args)
    assert res.code in (0, 1), res.err
    (node,) = json.loads(res.out)["nodes"]
    return res.code, [c for c in node["checks"] if c["check"].startswith("checkpoint.")]


def test_too_little_space_fails_the_node_naming_the_directory_the_need_and_what_is_free(
        ck: CLI, site: Path, small_fs: Path) -> None:
    target = small_fs / "checkpoints" / "run"          # not made yet: measured at the mount
    code, (cap, margin) = room(ck, site, "--model-params", "1M", "--keep-checkpoints", "2",
                               "--checkpoint-dir", str(target))
    assert code == 1 and cap["status"] == "fail" and cap["target"] == str(target)
    # 2 x 14 MB against the 1 MiB tmpfs (1.0 MB free)
    assert cap["message"].startswith("checkpoints: 2 x 14.0 MB (1e+06 parameters x 14 bytes) = 28.0 MB "
                                     f"does not fit in {target}: 1.0 MB free"), cap["message"]
    assert f"measured at {small_fs}" in cap["message"]
    assert margin["status"] == "skip"
    plain = ck("preflight", "--site", str(site), "--transport", "local", "--model-params", "1M",
               "--checkpoint-dir", str(target))
    assert plain.code == 1 and "checkpoint.capacity: checkpoints: 2 x 14.0 MB" in plain.out, plain.out


def test_too_few_inodes_fail_it_too(ck: CLI, site: Path, small_fs: Path) -> None:
    # 100 parameters: 1.4 kB a checkpoint, but 9 files each (8 GPUs and metadata): 8 x 9 = 72 files
    code, (cap, _) = room(ck, site, "--model-params", "100", "--keep-checkpoints", "8",
                          "--checkpoint-dir", str(small_fs))
    assert code == 1 and cap["status"] == "fail"
    assert f"{INODES - 1} inodes free for 72 files" in cap["message"], cap["message"]


def test_checkpoints_that_fit_pass_and_a_tight_fit_warns(ck: CLI, site: Path, small_fs: Path) -> None:
    _, (cap, margin) = room(ck, site, "--model-params", "10K", "--checkpoint-dir", str(small_fs))
    assert cap["status"] == "ok" and margin["status"] == "ok", (cap, margin)
    assert f"{small_fs} has 1.0 MB and {INODES - 1} inodes free" in cap["message"]
    # 2 x 476 kB = 952 kB of the 1,048 kB free: fits, with under 10 % left
    _, (cap, margin) = room(ck, site, "--model-params", "34K", "--checkpoint-dir", str(small_fs))
    assert cap["status"] == "ok" and margin["status"] == "warn" and "leaves under 10%" in margin["message"]


def test_the_in_job_preflight_only_warns(ck: CLI, site: Path, small_fs: Path) -> None:
    """In the job a checkpoint directory too small is not the nodes' fault: no node is dropped for it."""
    _, (cap, _) = room(ck, site, "--model-params", "1M", "--checkpoint-dir", str(small_fs), "--checkpoint-warn-only")
    assert cap["status"] == "warn" and "does not fit in" in cap["message"]


def test_the_node_output_parser(small_fs: Path) -> None:
    st = os.statvfs(small_fs)
    real = f"dir {small_fs}\n{st.f_bavail} {st.f_frsize} {st.f_ffree} {st.f_files}\n"
    got = parse_space(real)
    assert isinstance(got, Space) and got.free_bytes == st.f_bavail * st.f_frsize and got.measured == str(small_fs)
    unlimited = parse_space(f"dir {small_fs}\n10 4096 0 0\n")   # 0 inodes in all: no inode limit
    assert isinstance(unlimited, Space) and unlimited.free_inodes == 2**62
    bad = parse_space("stat: cannot read file system information for '/x': Permission denied\n")
    assert getattr(bad, "tool_error", False) and "Permission denied" in getattr(bad, "reason", "")
    assert "four numbers" in getattr(parse_space("dir /x\n1 2 three 4\n"), "reason", "")


@pytest.mark.parametrize("args,message", [
    (("--keep-checkpoints", "3"), "--keep-checkpoints only make sense with --model-params"),
    (("--model-params", "7B", "--keep-checkpoints", "0"), "--keep-checkpoints '0': keep 1 to 1000 checkpoints"),
    (("--model-params", "seven"), "--model-params: cannot read 'seven' as a parameter count"),
    (("--model-params", "7B", "--perf"), "--model-params checks the checkpoint directory: not with --perf"),
])
def test_bad_options_are_one_line_and_exit_2(ck: CLI, site: Path, args: tuple[str, ...], message: str) -> None:
    res = ck("preflight", "--site", str(site), *args)
    assert res.code == 2 and res.err.startswith(f"clusterkit: error: {message}") and res.err.count("\n") == 1, res


def test_the_job_asks_its_own_preflight_from_its_settings(ck: CLI, tmp_path: Path) -> None:
    base = ["--site", "testbed", "--nodes", "2", "--set", "preflight_in_job=true"]
    res = ck("render", *base, "--set", "model_params=7B", "--set", "keep_checkpoints=3",
             "--out", str(tmp_path / "a"), "--", "python", "t.py")
    assert res.code == 0, res.err
    script = (tmp_path / "a" / "job.sbatch").read_text()
    # the supervisor's start passes them to its preflight, with the job's CK_CHECKPOINT_DIR
    assert "--model-params 7000000000 --keep-checkpoints 3" in script.replace("\\\n", " ")
    from clusterkit.supervise.start import Start, parse
    env = {"CK_RUN_DIR": str(tmp_path), "CK_JOB_ID": "7", "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-2]",
           "CK_CHECKPOINT_DIR": "/shared/ckpt/run"}
    a = parse(["--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--model-params", "7000000000",
               "--keep-checkpoints", "3"], env)
    assert Start.capacity_args(type("S", (), {"a": a, "env": env})()) == [   # type: ignore[arg-type]
        "--model-params", "7000000000", "--keep-checkpoints", "3", "--checkpoint-dir", "/shared/ckpt/run",
        "--checkpoint-warn-only"]
    off = ck("render", "--site", "testbed", "--nodes", "2", "--set", "preflight_in_job=false",
             "--set", "model_params=7B", "--", "python", "t.py")
    assert off.code == 2 and "--set model_params: the checkpoint directory's room is checked by the job's own " \
        "preflight, which is off" in off.err
    # plan --render passes the model's size and --keep-checkpoints where the job's preflight runs
    planned = ck("plan", "--site", "testbed", "--model-params", "1M", "--keep-checkpoints", "4", "--render",
                 "--set", "preflight_in_job=true", "--out", str(tmp_path / "b"), "--", "python", "t.py")
    assert planned.code == 0, planned.err
    assert "--model-params 1000000 --keep-checkpoints 4 " in (tmp_path / "b" / "job.sbatch").read_text()


def test_the_api_checks_what_it_is_given(tmp_path: Path) -> None:
    from clusterkit.api import Site
    from clusterkit.errors import InputError

    site = Site.load("testbed")
    need = site.checkpoint_need(7 * 10**9, 3, str(tmp_path / "ck"))
    assert (need.path, need.params, need.keep, need.gpus, need.warn_only) == (str(tmp_path / "ck"), 7e9, 3, 0, False)
    assert site.checkpoint_need(10**6).path.endswith("/checkpoints")      # the site's checkpoint directory
    for bad in ({"params": 0}, {"params": 10**6, "keep": 0}, {"params": 10**6, "path": "a\nb"}):
        with pytest.raises(InputError):
            site.checkpoint_need(**bad)  # type: ignore[arg-type]
