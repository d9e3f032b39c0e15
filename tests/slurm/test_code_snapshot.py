"""A job that waits in Slurm's queue runs the code as it was at submit time: the job is held
(``--sbatch hold``) while the test changes its script, then released; it prints the marker it
was submitted with.  ``--code DIR`` snapshots that directory (the test's, not the checkout)."""

from __future__ import annotations

import re
from pathlib import Path

from .conftest import CK

SCRIPT = 'import os\nprint("marker {mark} rank", os.environ["SLURM_PROCID"], "in", os.getcwd(), flush=True)\n'


def test_a_held_job_runs_the_script_as_submitted(cli: CK, tmp_path: Path) -> None:
    tree = tmp_path / "proj"
    tree.mkdir()
    tree.chmod(0o755)
    (tree / "train.py").write_text(SCRIPT.format(mark="as-submitted"))
    run = cli.runs / "held"
    proc = cli("submit", "--site", "testbed", "--launcher", "srun", "--gpus-per-node", "1", "--sbatch", "hold",
               "--code", str(tree), "--out", str(run), "--", "python", "train.py")
    assert proc.code == 0, proc.out + proc.err
    m = re.search(r"Submitted job (\d+)", proc.out)
    assert m, proc.out
    job = m.group(1)
    try:
        held = cli.status(job)
        assert held["state"] == "PENDING" and held["code"]["files"] == 1 and held["code"]["git"] is False, held
        (tree / "train.py").write_text(SCRIPT.format(mark="edited-while-queued"))
        cli.bed.run("scontrol", "release", job)
        st = cli.wait_for(job, lambda s: s["state"] not in ("PENDING", "RUNNING"), timeout=60, what="the job's end")
    finally:   # a failure must not leave a held job in the queue for the next tests
        cli.bed.run("scancel", job, check=False)
    assert st["state"] == "COMPLETED", st
    out = "".join(p.read_text() for p in (run / "logs").glob("*.out"))
    assert f"marker as-submitted rank 0 in {run / 'code'}" in out, out
    assert "edited-while-queued" not in out
