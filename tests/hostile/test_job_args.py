"""Hostile values for ``--srun-arg``, ``--launcher-arg``, ``--sbatch`` and ``software.container``'s
``env``/``name``: each arrives byte for byte where it is meant to, or is refused in one line.

"Arrives" is checked by letting bash read the rendered job script the way the job does (the srun
step's words, the launcher's argv on a node, the exported environment), never by reading the
text: quotes, ``$(...)``, backticks and newlines must reach srun or the launcher as written, and
nothing may run (a ``touch`` marker would appear).  NUL cannot be in any process's argv or
environment and more than 128 KiB in one word cannot be passed to exec: both are refused.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from clusterkit.api import Site
from clusterkit.errors import ClusterkitError
from tests.conftest import assert_one_line_error

HOSTILE = [
    "--comment=it's \"quoted\"",
    "--comment=$(touch PWNED)",
    "--comment=`touch PWNED`",
    "--comment=a\nsrun touch PWNED\n",
    "--comment=${IFS}$HOME;touch PWNED",
    "--comment=\\' \\\" \\\\",
    "--comment=" + "x" * 100_000,
]
SITE = "name: hs\nnodes: {nodelist: 'n[1-2]', gpus_per_node: 2}\nstorage: [{path: /, type: nfs}]\n"


def _site(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "site.yaml"
    path.write_text(SITE + extra)
    return path


def _words(script: str, cwd: Path) -> list[str]:
    """What bash hands to printf for ``script`` (a command line ending in printf's arguments)."""
    out = subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, text=True, check=True,
                         env={"PATH": os.environ["PATH"], "HOME": "/home/x"}).stdout
    return out.split("\0")[:-1]


def _srun_words(run_dir: Path) -> list[str]:
    # the step's srun options run up to the line-continuation before `bash -c`
    opts = (run_dir / "job.sbatch").read_text().split("\n  srun ", 1)[1].split(" \\\n    bash -c ", 1)[0]
    return _words(f"SLURM_RESTART_COUNT=0; printf '%s\\0' {opts}", run_dir)


def _launcher_words(run_dir: Path) -> list[str]:
    plan = json.loads((run_dir / "plan.json").read_text())
    return _words("CK_HEAD=n1 CK_PORT=20001 SLURM_NODEID=0 SLURM_NNODES=2 SLURM_JOB_ID=5; "
                  f"printf '%s\\0' {plan['launch']['line']}", run_dir)


@pytest.mark.parametrize("value", HOSTILE, ids=[str(i) for i in range(len(HOSTILE))])
def test_srun_arg_arrives_byte_for_byte(ck, tmp_path: Path, value: str) -> None:
    run_dir = tmp_path / "r"
    result = ck("render", "--site", str(_site(tmp_path)), "--stage", "multi-node", "--out", str(run_dir),
                f"--srun-arg={value}", "--", "python", "train.py")
    assert result.code == 0, result.err
    assert _srun_words(run_dir)[-1] == value
    assert json.loads((run_dir / "plan.json").read_text())["job"]["srun_args"] == [value]
    assert not list(tmp_path.rglob("PWNED"))


@pytest.mark.parametrize("value", HOSTILE, ids=[str(i) for i in range(len(HOSTILE))])
def test_launcher_arg_arrives_byte_for_byte(ck, tmp_path: Path, value: str) -> None:
    run_dir = tmp_path / "r"
    result = ck("render", "--site", str(_site(tmp_path)), "--stage", "multi-node", "--out", str(run_dir),
                "--launcher-arg", value.replace("--comment", "--log-dir"), "--", "python", "train.py")
    assert result.code == 0, result.err
    assert _launcher_words(run_dir)[-1] == value.replace("--comment", "--log-dir")
    assert not list(tmp_path.rglob("PWNED"))


@pytest.mark.parametrize("field", ["srun_args", "launcher_args"])
@pytest.mark.parametrize("value,needle", [
    ("--comment=a\0b", "NUL byte"),
    ("--comment=" + "x" * (1 << 20), "longer than 131071 bytes"),
])
def test_nul_and_oversized_arguments_are_refused(tmp_path: Path, field: str, value: str, needle: str) -> None:
    with pytest.raises(ClusterkitError, match=needle):
        plan = Site.load(str(_site(tmp_path))).plan(["python", "train.py"], stage="multi-node", **{field: [value]})
        plan.render(tmp_path / "r")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("value,needle", [
    ("wckey=it's", "whitespace, quotes and control characters are not allowed"),
    ("wckey=$(touch PWNED)", "whitespace, quotes and control characters are not allowed"),
    ("wckey=a\n#SBATCH --wrap=touch PWNED", "whitespace, quotes and control characters are not allowed"),
    ("wckey=" + "x" * (1 << 20), "longer than 4096 characters"),
])
def test_hostile_sbatch_values_are_refused(ck, tmp_path: Path, value: str, needle: str) -> None:
    result = ck("render", "--site", str(_site(tmp_path)), "--out", str(tmp_path / "r"), "--sbatch", value,
                "--", "python", "train.py")
    assert_one_line_error(result, 2, "--sbatch ", needle)
    assert not (tmp_path / "r").exists() and not list(tmp_path.rglob("PWNED"))


def test_nul_in_an_sbatch_value_is_refused(tmp_path: Path) -> None:
    plan = Site.load(str(_site(tmp_path))).plan(["python", "train.py"], sbatch={"wckey": "a\0b"})
    with pytest.raises(ClusterkitError, match="control characters are not allowed"):
        plan.render(tmp_path / "r")


def test_safe_sbatch_value_is_one_word_of_its_line(ck, tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    value = "afterok:1?2&3|4;5<6>7*[8]{9}%10#11"
    result = ck("render", "--site", str(_site(tmp_path)), "--out", str(run_dir), "--sbatch", f"wckey={value}",
                "--", "python", "train.py")
    assert result.code == 0, result.err
    assert f"#SBATCH --wckey={value}\n" in (run_dir / "job.sbatch").read_text()
    # a comment line to bash: it runs nothing
    assert subprocess.run(["bash", "-n", str(run_dir / "job.sbatch")]).returncode == 0


CONTAINER_VALUES = ["it's \"quoted\"", "$(touch PWNED)", "`touch PWNED`", "a\nb\n", "${IFS};touch PWNED",
                    "x" * 100_000]


def test_container_env_values_arrive_byte_for_byte(ck, tmp_path: Path) -> None:
    env = {f"V{i}": v for i, v in enumerate(CONTAINER_VALUES)}
    site = _site(tmp_path, "software:\n  container:\n    runtime: pyxis\n    image: i\n    env: "
                 + json.dumps(env) + "\n")
    run_dir = tmp_path / "r"
    result = ck("render", "--site", str(site), "--out", str(run_dir), "--", "python", "train.py")
    assert result.code == 0, result.err
    # the assignments of the env before the launcher's srun, on it alone (the batch shell never has them)
    text = (run_dir / "job.sbatch").read_text()
    prefix = text.split("ck_launch=(\n", 1)[1].split("\n  srun ", 1)[0].strip().rstrip("\\").strip()
    assert prefix.startswith("env "), prefix   # the launch argv starts with env and the assignments
    prefix = prefix.removeprefix("env ")
    assert "export V0" not in text
    got = _words(prefix + " bash -c 'for v in " + " ".join(f"V{i}" for i in range(len(env)))
                 + "; do printf \"%s\\0\" \"${!v}\"; done'", run_dir)
    assert got == CONTAINER_VALUES
    assert not list(tmp_path.rglob("PWNED"))


@pytest.mark.parametrize("env,needle", [
    ('{A: "x\\0y"}', "a value cannot hold a NUL byte"),
    ("{A: " + "x" * 140_000 + "}", "longer than 131071 bytes"),
    ("{'A;touch PWNED': x}", "is not an environment variable name"),
])
def test_hostile_container_env_is_refused_at_its_line(ck, tmp_path: Path, env: str, needle: str) -> None:
    site = _site(tmp_path, f"software:\n  container:\n    runtime: pyxis\n    image: i\n    env: {env}\n")
    result = ck("render", "--site", str(site), "--out", str(tmp_path / "r"), "--", "python", "train.py")
    assert_one_line_error(result, 2, f"{site}:8", needle)
    assert not (tmp_path / "r").exists() and not list(tmp_path.rglob("PWNED"))


@pytest.mark.parametrize("name", ["a;touch PWNED", "$(touch PWNED)", "a\nb", "x" * 65])
def test_hostile_container_name_is_refused(ck, tmp_path: Path, name: str) -> None:
    site = _site(tmp_path, "software:\n  container:\n    runtime: pyxis\n    image: i\n    name: "
                 + json.dumps(name) + "\n")
    result = ck("render", "--site", str(site), "--out", str(tmp_path / "r"), "--", "python", "train.py")
    assert_one_line_error(result, 2, f"{site}:8", "container name")
