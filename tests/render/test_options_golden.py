"""Golden job scripts for site keys and job options that change the script's shape: the
rendezvous host on another network (``network.rendezvous_host``: a suffix, an interface),
per-task GPU binding for ``--launcher srun`` (``--set gpu_bind=task``), the placement by topology
(``network.topology``: ``--switches``/``--segment``, the hosts ordered by switch), teardown steps (the
site's and ``--teardown``), a singularity image's runscript with the ``--node-setup`` steps in
the image.  Regenerate with ``--regen-golden`` and review the diff."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.render.golden_files import regen_or_compare
from tests.render.test_golden import GOLDEN, normalise

#: case -> (what the site file adds to the testbed's, the render arguments)
CASES: dict[str, tuple[str, list[str]]] = {
    "rendezvous-suffix": ("network:\n  rendezvous_host: {suffix: i}\n",
                          ["--stage", "multi-node", "--nodes", "2", "--launcher", "torchrun"]),
    "rendezvous-interface": ("network:\n  rendezvous_host: {interface: ib0}\n",
                             ["--stage", "multi-node", "--nodes", "2", "--launcher", "deepspeed"]),
    "teardown": ("job:\n  teardown: ['echo site teardown']\n",
                 ["--stage", "multi-node", "--nodes", "2", "--launcher", "torchrun", "--teardown",
                  'cp -r out "$HOME/keep/$CK_JOB_ID"']),
    "singularity-runscript-node-setup": (
        "software:\n  container: {runtime: singularity, image: /images/pt.sif, runscript: true, env: {HF_HOME: /hf}}\n",
        ["--stage", "multi-node", "--nodes", "2", "--launcher", "torchrun", "--node-setup", "pip list",
         "--set", "node_setup_in=container"]),
    "topology-tree": ('network:\n  topology: {plugin: tree, max_switches: 1, max_wait: "00:05:00"}\n',
                      ["--stage", "multi-node", "--nodes", "2", "--launcher", "deepspeed"]),
    "topology-block": ("network:\n  topology: {plugin: block, segment: 2}\n",
                       ["--stage", "multi-node", "--nodes", "4", "--launcher", "torchrun"]),
    "srun-gpu-bind": ("", ["--stage", "multi-node", "--nodes", "2", "--launcher", "srun", "--set", "gpu_bind=task"]),
}
FILES = ("job.sbatch", "rendezvous-host.sh")


@pytest.mark.parametrize("case", sorted(CASES))
def test_options_golden(ck, tmp_path: Path, request: pytest.FixtureRequest, case: str) -> None:
    add, args = CASES[case]
    site = tmp_path / "sites" / "golden.yaml"
    site.parent.mkdir()
    site.write_text(f"name: golden\nextends: {REPO / 'site_configs' / 'testbed.yaml'}\n{add}")
    run_dir = tmp_path / "run"
    result = ck("render", "--site", str(site), "--job-name", "golden", "--out", str(run_dir), *args,
                "--", "python", "train.py")
    assert result.code == 0, result.err
    files = {name: normalise((run_dir / name).read_text(), run_dir) for name in FILES if (run_dir / name).exists()}
    regen_or_compare(request, GOLDEN / "options" / case, files, case)


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed (Debian package shellcheck)")
def test_shellcheck_option_scripts() -> None:
    scripts = sorted(str(p) for p in (GOLDEN / "options").glob("*/*") if p.name in ("job.sbatch", "rendezvous-host.sh"))
    assert len(scripts) == len(CASES) + 2   # each case's job script, the two rendezvous-host.sh
    p = subprocess.run(["shellcheck", "--shell=bash", "--severity=info", *scripts], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout[-4000:]
