"""The job's NCCL and torch probe (``nccl-probe.sh``, sourced by the launch body where the ranks
run): the line naming the NCCL they load, the warnings where it contradicts the plan's
assumptions, and the flight-recorder names kept for the torch found.

The real torch of this environment runs where it is installed (a CUDA wheel names its
nvidia-nccl; a CPU build says it has none).  Versions it cannot show come from stand-ins, named
as such: ``standin/libnccl.c`` (a libnccl.so.2 whose only entry point is ``ncclGetVersion``,
compiled here with gcc) and ``standin/torch-2.5.1.dist-info.METADATA`` (the metadata of an old
CPU torch, no code), under a real Python started with ``-S`` so the installed torch stays out.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.render.test_nccl_policy import render

STANDIN = Path(__file__).parent / "standin"
FR = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE",
      "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
HOST = socket.gethostname()


def python_bin(tmp_path: Path, *, isolated: bool) -> Path:
    """A directory whose ``python3`` is this test's Python (with ``-S``: without site-packages)."""
    bindir = tmp_path / ("bin-S" if isolated else "bin")
    bindir.mkdir(exist_ok=True)
    wrapper = bindir / "python3"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {'-S ' if isolated else ''}\"$@\"\n")
    wrapper.chmod(0o755)
    return bindir


def libnccl(tmp_path: Path, code: int) -> Path:
    """The stand-in libnccl.so.2 answering ``code``, in a directory of its own."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the stand-in libnccl.so.2")
    libdir = tmp_path / f"nccl-{code}"
    libdir.mkdir()
    subprocess.run(["gcc", "-shared", "-fPIC", f"-DCODE={code}", "-o", str(libdir / "libnccl.so.2"),
                    str(STANDIN / "libnccl.c")], check=True)
    return libdir


def old_cpu_torch(tmp_path: Path) -> Path:
    """A sys.path entry holding the stand-in torch 2.5.1 CPU build (metadata, an empty package, no libtorch_cuda.so)."""
    site = tmp_path / "standin-site"
    (site / "torch" / "lib").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("")
    (site / "torch-2.5.1.dist-info").mkdir()
    shutil.copy(STANDIN / "torch-2.5.1.dist-info.METADATA", site / "torch-2.5.1.dist-info" / "METADATA")
    return site


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def probe(out: Path, bindir: Path, **env: str) -> tuple[list[str], dict[str, str]]:
    """Source the rendered probe as the launch body does; (clusterkit's lines, the FR names left)."""
    show = "".join(f'printf "%s=%s\\n" {n} "${{{n}-unset}}"\n' for n in FR)
    p = subprocess.run(["bash", "-c", f". {out}/nccl-probe.sh\n{show}"], capture_output=True, text=True,
                       env={"PATH": f"{bindir}:/usr/bin:/bin", **{n: "x" for n in FR}, **env}, check=True)
    left = dict(ln.split("=", 1) for ln in p.stdout.splitlines())
    return [ln for ln in p.stderr.splitlines() if ln.startswith("clusterkit:")], left


def test_real_torch_names_the_nccl_its_ranks_load(ck: Any, tmp_path: Path) -> None:
    out = render(ck, tmp_path, "local")
    lines, left = probe(out, python_bin(tmp_path, isolated=False))
    torch_v = md.version("torch")
    spec = importlib.util.find_spec("torch")
    assert spec is not None and spec.submodule_search_locations
    tdir = Path(spec.submodule_search_locations[0])
    if (tdir / "lib" / "libtorch_cuda.so").exists():
        # the CUDA wheel: its NCCL is the nvidia-nccl wheel beside it, whose own metadata says the version
        nccl = next(d.version for d in md.distributions() if d.metadata["Name"].startswith("nvidia-nccl"))
        import torch  # torch's own answer agrees (it loads that library; no GPU needed to ask)
        assert ".".join(map(str, torch.cuda.nccl.version())) == nccl
        lib = (tdir.parent / "nvidia" / "nccl" / "lib" / "libnccl.so.2").resolve()
        assert lines == [f"clusterkit: NCCL {nccl} (torch {torch_v} wheel's nvidia-nccl, {lib}) on {HOST}"]
    else:
        assert lines == [f"clusterkit: NCCL not detected on {HOST}: torch {torch_v} has no CUDA (a CPU build) and "
                         "no libnccl.so.2 on the loader path (libnccl.so.2: cannot open shared object file: "
                         "No such file or directory)"]
    # torch 2.7+ reads TORCH_FR_* and warns about TORCH_NCCL_*: only the new names are left
    major, minor = (int(x) for x in torch_v.split(".")[:2])
    kept = ("TORCH_FR_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE") if (major, minor) >= (2, 7) else \
        ("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
    assert {n for n, v in left.items() if v != "unset"} == set(kept)


@pytest.mark.parametrize("code,version", [(21905, "2.19.5"), (2804, "2.8.4"), (22703, "2.27.3")])
def test_standin_libnccl_without_torch(ck: Any, tmp_path: Path, code: int, version: str) -> None:
    out = render(ck, tmp_path, "local")
    libdir = libnccl(tmp_path, code)
    lines, left = probe(out, python_bin(tmp_path, isolated=True), LD_LIBRARY_PATH=str(libdir))
    assert lines == [f"clusterkit: NCCL {version} ({libdir}/libnccl.so.2; no torch in this Python) on {HOST}"]
    assert set(left.values()) == {"x"}          # no torch found: both names stay
    # only the first task of a node logs; the others still choose the names
    lines, _ = probe(out, python_bin(tmp_path, isolated=True), LD_LIBRARY_PATH=str(libdir), SLURM_LOCALID="1")
    assert lines == []


def test_no_nccl_and_an_old_cpu_torch(ck: Any, tmp_path: Path) -> None:
    out = render(ck, tmp_path, "local")
    bindir = python_bin(tmp_path, isolated=True)
    lines, left = probe(out, bindir)
    assert lines == [f"clusterkit: NCCL not detected on {HOST}: no torch in this Python and no libnccl.so.2 on the "
                     "loader path (libnccl.so.2: cannot open shared object file: No such file or directory)"]
    lines, left = probe(out, bindir, PYTHONPATH=str(old_cpu_torch(tmp_path)))
    assert lines[0].startswith(f"clusterkit: NCCL not detected on {HOST}: torch 2.5.1 has no CUDA (a CPU build) and")
    # torch before 2.7 reads only TORCH_NCCL_*
    assert {n for n, v in left.items() if v != "unset"} == {"TORCH_NCCL_TRACE_BUFFER_SIZE",
                                                            "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"}
    # a site's or job's own flight-recorder name is never dropped
    own = render(ck, tmp_path, "local", "--env", "TORCH_NCCL_TRACE_BUFFER_SIZE=500")
    _, left = probe(own, python_bin(tmp_path, isolated=False))
    assert left["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "x" and left["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == "unset"


NO_PIN = "network: {roce: {gid_index: null}}\n"


def test_roce_gid_rule_warns_on_an_older_nccl(ck: Any, tmp_path: Path) -> None:
    out = render(ck, tmp_path, "roce-a100", "--stage", "multi-node", "--set", "container=false", extra=NO_PIN)
    checks = json.loads((out / "plan.json").read_text())["nccl_checks"]
    assert [c["detected_below"] for c in checks] == [22100]
    bindir = python_bin(tmp_path, isolated=True)
    lines, _ = probe(out, bindir, LD_LIBRARY_PATH=str(libnccl(tmp_path, 21905)))
    assert len(lines) == 2 and lines[1].startswith("clusterkit: warning: NCCL 2.19.5: NCCL_IB_ROCE_VERSION_NUM")
    assert "pin network.roce.gid_index" in lines[1]
    lines, _ = probe(out, bindir, LD_LIBRARY_PATH=str(libnccl(tmp_path, 22105)))
    assert len(lines) == 1 and lines[0].startswith("clusterkit: NCCL 2.21.5 (")
    # a pinned index needs no particular NCCL: nothing to check
    pinned = render(ck, tmp_path, "roce-a100", "--stage", "multi-node", "--set", "container=false")
    assert "nccl_checks\": []" in (pinned / "plan.json").read_text()


def test_site_nccl_version_is_assumed_and_checked(ck: Any, tmp_path: Path) -> None:
    old = "software: {nccl_version: '2.19.3'}\n"
    result_out = render(ck, tmp_path, "roce-a100", "--stage", "multi-node", "--set", "container=false",
                        extra=NO_PIN + old)
    warnings = json.loads((result_out / "plan.json").read_text())["warnings"]
    assert any(w.startswith("NCCL 2.19.3 (the site's software.nccl_version): NCCL_IB_ROCE_VERSION_NUM")
               for w in warnings), warnings
    stated = render(ck, tmp_path, "roce-a100", "--stage", "multi-node", "--set", "container=false",
                    extra="software: {nccl_version: '2.21.5'}\n")
    env = {e["name"]: e for e in json.loads((stated / "plan.json").read_text())["env"]}
    assert "(2.21.5, says the site)" in env["NCCL_IB_GID_INDEX"]["reason"]
    bindir = python_bin(tmp_path, isolated=True)
    lines, _ = probe(stated, bindir, LD_LIBRARY_PATH=str(libnccl(tmp_path, 21905)))
    assert lines[1] == ("clusterkit: warning: NCCL 2.19.5: the site says software.nccl_version 2.21.5, and the "
                        "plan's NCCL rules assume that release line: correct the site's key")
    lines, _ = probe(stated, bindir, LD_LIBRARY_PATH=str(libnccl(tmp_path, 22106)))
    assert len(lines) == 1                          # the same release line: nothing to say


def test_site_nccl_version_must_be_an_nccl_version(ck: Any, tmp_path: Path) -> None:
    site = tmp_path / "bad.yaml"
    parent = REPO / "site_configs" / "roce-a100.yaml"
    site.write_text(f"extends: {parent}\nname: bad\nsoftware:\n  nccl_version: 'latest'\n")
    result = ck("sites", "validate", str(site))
    assert result.code == 2
    assert f"{site}:4: software.nccl_version" in result.err and "not an NCCL version" in result.err


@pytest.mark.torch
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_real_torch_prints_no_deprecation_warning_in_a_job(ck: Any, tmp_path: Path) -> None:
    """A local job with the real torchrun and torch (gloo on CPU): every rank initialises its
    process group, whose flight recorder reads the names, and nothing warns.  The same torch run
    with the old name set beside the new one (as the job exported before) does warn: the check can fail."""
    train = tmp_path / "train.py"
    train.write_text("import torch, torch.distributed as dist\n"
                     "dist.init_process_group('gloo')\n"
                     "t = torch.ones(2)\ndist.all_reduce(t)\nassert t[0].item() == dist.get_world_size()\n"
                     "dist.destroy_process_group()\n")
    out = tmp_path / "run"
    result = ck("render", "--site", "local", "--launcher", "torchrun", "--out", str(out), "--", "python", str(train))
    assert result.code == 0, result.err
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    job = subprocess.run(["bash", str(out / "job.sbatch")], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert job.returncode == 0, job.stderr[-2000:]
    assert "launcher exited with status 0" in job.stderr
    assert "clusterkit: NCCL " in job.stderr
    assert "deprecated" not in job.stderr, [ln for ln in job.stderr.splitlines() if "deprecated" in ln]
    control = dict(env, RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                   TORCH_FR_BUFFER_SIZE="2000", TORCH_NCCL_TRACE_BUFFER_SIZE="2000")
    old = subprocess.run([sys.executable, str(train)], env=control, capture_output=True, text=True, timeout=300)
    assert old.returncode == 0, old.stderr[-2000:]
    major, minor = (int(x) for x in md.version("torch").split(".")[:2])
    if (major, minor) >= (2, 14):
        assert "TORCH_NCCL_TRACE_BUFFER_SIZE is deprecated" in old.stderr


def counting_python(tmp_path: Path) -> tuple[Path, Path]:
    """(a directory whose ``python3`` is this test's Python with ``-S`` and appends a line to a file
    at each start, that file): how many Pythons the tasks of a node started."""
    bindir = tmp_path / "bin-count"
    bindir.mkdir()
    starts = tmp_path / "python-starts"
    (bindir / "python3").write_text(f"#!/bin/sh\necho started >> {starts}\nexec {sys.executable} -S \"$@\"\n")
    (bindir / "python3").chmod(0o755)
    return bindir, starts


def test_one_python_per_node_the_other_tasks_read_its_answer(ck: Any, tmp_path: Path) -> None:
    """Four tasks on a node (a task per GPU): the first runs the probe's Python, the three others
    (started before it: they wait for its answer) start none and still keep the names torch 2.5.1 reads."""
    out = render(ck, tmp_path, "local")
    bindir, starts = counting_python(tmp_path)
    scratch = tmp_path / "node-tmp"
    scratch.mkdir()
    step = {"SLURM_STEP_NUM_TASKS": "4", "SLURM_STEP_NUM_NODES": "1", "SLURM_JOB_ID": "77", "SLURM_STEP_ID": "3",
            "TMPDIR": str(scratch), "PYTHONPATH": str(old_cpu_torch(tmp_path))}
    show = "".join(f'printf "%s=%s\\n" {n} "${{{n}-unset}}"\n' for n in FR)
    env = {"PATH": f"{bindir}:/usr/bin:/bin", **{n: "x" for n in FR}, **step}
    others = [subprocess.Popen(["bash", "-c", f". {out}/nccl-probe.sh\n{show}"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env={**env, "SLURM_LOCALID": str(i)})
              for i in (1, 2, 3)]
    lines, left = probe(out, bindir, **step, SLURM_LOCALID="0")
    assert lines[0].startswith(f"clusterkit: NCCL not detected on {HOST}: torch 2.5.1 has no CUDA")
    kept = {"TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"}
    assert {n for n, v in left.items() if v != "unset"} == kept
    for p in others:
        stdout, stderr = p.communicate(timeout=30)
        assert p.returncode == 0, stderr
        assert not [ln for ln in stderr.splitlines() if ln.startswith("clusterkit:")]   # only the first logs
        assert {n for n, v in (ln.split("=", 1) for ln in stdout.splitlines()) if v != "unset"} == kept
    assert starts.read_text().splitlines() == ["started"]   # one Python on the node, not four
    # the next step of the job clears this one's folder and makes its own
    probe(out, bindir, **{**step, "SLURM_STEP_ID": "4"}, SLURM_LOCALID="0")
    assert [p.name.split(".")[-2] for p in scratch.iterdir()] == ["4"]


def test_a_probe_folder_planted_as_a_link_is_not_read(ck: Any, tmp_path: Path) -> None:
    out = render(ck, tmp_path, "local")
    bindir, starts = counting_python(tmp_path)
    scratch, planted = tmp_path / "node-tmp", tmp_path / "planted"
    scratch.mkdir()
    planted.mkdir()
    (planted / "out").write_text("2.9.0\n2.27.3\nhere\n-\n")   # would drop the old names
    (scratch / f"ck-probe.{os.getuid()}.78.0.0.{HOST}").symlink_to(planted)
    _, left = probe(out, bindir, SLURM_STEP_NUM_TASKS="2", SLURM_STEP_NUM_NODES="1", SLURM_JOB_ID="78",
                    SLURM_STEP_ID="0", TMPDIR=str(scratch), SLURM_LOCALID="1")
    assert set(left.values()) == {"x"}   # not read: torch unknown, both names stay
    assert not starts.exists()
