"""What the launch tests read from a rendered run directory (``tests/cli/test_launch_env.py``,
``tests/cli/test_launch_containers.py``)."""

from __future__ import annotations

import json
import re
from pathlib import Path


def render(ck, out: Path, *args: str, command: tuple[str, ...] = ("python", "train.py")) -> Path:
    result = ck("render", *args, "--out", str(out), "--", *command)
    assert result.code == 0, result.err
    return out


def sbatch_lines(run_dir: Path) -> dict[str, str]:
    text = (run_dir / "job.sbatch").read_text()
    return {m.group(1): m.group(2) or "" for m in re.finditer(r"^#SBATCH --([a-z-]+)(?:=(\S+))?$", text, re.M)}


def srun_line(run_dir: Path) -> str:
    return next(ln.strip() for ln in (run_dir / "job.sbatch").read_text().splitlines()
                if ln.lstrip().startswith("srun "))


def env_of(run_dir: Path) -> dict[str, str]:
    return {e["name"]: e["value"] for e in json.loads((run_dir / "plan.json").read_text())["env"]}
