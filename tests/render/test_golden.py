"""Golden files: every example site x stage x launcher, rendered through the CLI.

Regenerate in one step after an intended change, then review the diff:

    python -m pytest tests/render --regen-golden
"""

from __future__ import annotations

import difflib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, shared_site
from tests.render.golden_files import regenerated

GOLDEN = REPO / "tests" / "golden"
SITES = ["local", "testbed", "ib-h100", "roce-a100", "eth-nfs"]
STAGES = {"single-node": "1", "multi-node": "4", "large-cluster": "16"}
LAUNCHERS = ["torchrun", "deepspeed", "horovod", "accelerate", "megatron", "colossalai", "srun", "mpirun"]
EXTRA = {"megatron": ["--set", "tp=2", "--set", "pp=2"],
         "deepspeed": ["--set", "zero_stage=3", "--set", "micro_batch=2"],
         # their workers start over SSH, outside Slurm's steps: requeue is refused unless max_restarts=0
         "horovod": ["--set", "max_restarts=0"], "colossalai": ["--set", "max_restarts=0"],
         "mpirun": ["--set", "max_restarts=0"]}
CASES = [(s, st, la) for s in SITES for st in STAGES for la in LAUNCHERS]


def normalise(text: str, run_dir: Path) -> str:
    """The rendered text with the paths of this machine named: the run directory, the test
    sites, the repository and the Python that rendered it (the job's supervisor runs under it)."""
    sites = run_dir.parent / "sites"
    text = text.replace(f"ck_python={sys.executable}\n", "ck_python=@PYTHON@\n")
    text = text.replace(str(run_dir), "@RUN_DIR@").replace(str(sites), "@TEST_SITES@").replace(str(REPO), "@REPO@")
    return text.replace(f"{run_dir.parent}/checkpoints", "@RUN_DIR@/../checkpoints")   # beside the run directory


def site_arg(tmp_path: Path, site: str, stage: str) -> str:
    """Several nodes read the run directory: tmp_path stands in for the site's shared storage."""
    if stage == "single-node" or site in ("local", "testbed"):   # testbed declares /tmp shared
        return site
    return str(shared_site(tmp_path / "sites", site, tmp_path))


def rendered_files(ck, tmp_path: Path, site: str, stage: str, launcher: str,
                   extra: tuple[str, ...] = ()) -> dict[str, str]:
    run_dir = tmp_path / "run"
    args = ["render", "--site", site_arg(tmp_path, site, stage), "--stage", stage, "--nodes", STAGES[stage],
            "--launcher", launcher, "--job-name", "golden", "--out", str(run_dir), *EXTRA.get(launcher, []),
            *extra, "--", "python", "train.py", "--lr", "3e-4"]
    result = ck(*args)
    if result.code != 0:
        assert "Traceback" not in result.err
        return {"error.txt": f"exit {result.code}\n{normalise(result.err, run_dir)}"}
    return {p.name: normalise(p.read_text(), run_dir) for p in sorted(run_dir.iterdir()) if p.is_file()}


@pytest.mark.parametrize("site,stage,launcher", CASES, ids=["-".join(c) for c in CASES])
def test_golden(ck, tmp_path: Path, request: pytest.FixtureRequest, site: str, stage: str, launcher: str) -> None:
    files = rendered_files(ck, tmp_path, site, stage, launcher)
    if not regenerated(request, GOLDEN / site / stage / launcher, files):
        assert_matches_golden(files, site, stage, launcher)


def assert_matches_golden(files: dict[str, str], site: str, stage: str, launcher: str) -> None:
    golden_dir = GOLDEN / site / stage / launcher
    expected = {p.name: p.read_text() for p in sorted(golden_dir.iterdir())} if golden_dir.is_dir() else {}
    assert sorted(files) == sorted(expected), f"files differ from {golden_dir} (regenerate with --regen-golden)"
    for name, text in files.items():
        if text != expected[name]:
            diff = "".join(difflib.unified_diff(expected[name].splitlines(True), text.splitlines(True),
                                                f"golden/{name}", f"rendered/{name}"))
            pytest.fail(f"{site}/{stage}/{launcher}/{name} differs (regenerate with --regen-golden):\n{diff}")


# spare nodes (the job launches on the best --nodes of --nodes + spares after its preflight), one
# launcher of each kind: srun steps per node (torchrun), per GPU (srun), a hostfile (deepspeed)
SPARES = {("ib-h100", "multi-node", "torchrun"): ("--set", "spares=2", "--set", "preflight_in_job=perf"),
          ("testbed", "multi-node", "srun"): ("--nodes", "3", "--set", "spares=1", "--set", "preflight_in_job=true"),
          ("testbed", "multi-node", "deepspeed"): ("--nodes", "3", "--set", "spares=1", "--set",
                                                   "preflight_in_job=true", "--node-setup", "true")}


@pytest.mark.parametrize("site,stage,launcher", sorted(SPARES), ids=["-".join(c) for c in sorted(SPARES)])
def test_golden_with_spares(ck, tmp_path: Path, request: pytest.FixtureRequest, site: str, stage: str,
                            launcher: str) -> None:
    files = rendered_files(ck, tmp_path, site, stage, launcher, SPARES[(site, stage, launcher)])
    assert "job.sbatch" in files, files
    name = f"{launcher}-spares"
    if not regenerated(request, GOLDEN / site / stage / name, files):
        assert_matches_golden(files, site, stage, name)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_every_launcher_renders_somewhere(ck, tmp_path: Path, request: pytest.FixtureRequest, launcher: str) -> None:
    """The matrix is not all errors: each launcher renders a job script, with the code as it is,
    on some site and stage, and that render is the golden one."""
    for site, stage, la in CASES:
        if la != launcher:
            continue
        case_dir = tmp_path / f"{site}-{stage}"
        case_dir.mkdir()
        files = rendered_files(ck, case_dir, site, stage, launcher)
        if "job.sbatch" in files:
            if not request.config.getoption("--regen-golden"):
                assert_matches_golden(files, site, stage, launcher)
            return
    pytest.fail(f"{launcher} renders on no site and stage: every case is an error")


def golden_scripts() -> list[Path]:
    return sorted(GOLDEN.glob("*/*/*/job.sbatch"))


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed (Debian package shellcheck)")
def test_shellcheck_every_rendered_script() -> None:
    scripts = golden_scripts()
    assert len(scripts) > 40, "golden scripts missing"
    probes = sorted(GOLDEN.glob("*/*/*/nccl-probe.sh"))   # sourced by each launch body
    assert len(probes) == len(scripts), "golden nccl-probe.sh missing"
    p = subprocess.run(["shellcheck", "--shell=bash", "--severity=info", *map(str, scripts + probes)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout[-4000:]


def test_bash_n_every_rendered_script() -> None:
    scripts = golden_scripts()
    assert len(scripts) > 40, "golden scripts missing"
    for script in scripts + sorted(GOLDEN.glob("*/*/*/nccl-probe.sh")):
        p = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert p.returncode == 0, (script, p.stderr)
