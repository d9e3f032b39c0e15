"""The run directory's file names are clusterkit.jobfiles' alone: no template and no module of
the toolkit restates one as a literal, and a rendered job script writes them where the module says."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from clusterkit import jobfiles
from clusterkit.scheduler.results import result_file
from tests.conftest import REPO

#: a job file's ending after its job id (``<job>.result``, ``$CK_JOB_ID.reason``, ``}.progress``),
#: never an attribute in a message's text (``clusterkit.progress``, ``step.reason``)
_ENDINGS = re.compile(r"(?<![a-z_])\.(?:result|reason|unfixable|teardown|progress)\b")
#: a per-restart or batch log name's head, the chain's ids file, the logs folder in a path, the
#: artifacts the job reads (hostfile, rendezvous-host.sh)
_HEADS = re.compile(r"(?:^|[/\s])(?:preflight|nodes|attempts|\.chosen|slurm)-(?:$|\S*\.(?:json|out))"
                    r"|\bchain\.ids\b|(?:^|/)logs/|/logs$"
                    r"|rendezvous-host\.sh(?!\.j2)|(?<!/etc)/hostfile\b")
#: a per-rank file's regular expression (``\.progress\.rank``)
_RANK_RE = re.compile(r"\\\.progress\\\.")


def _named(text: str) -> bool:
    return bool(_ENDINGS.search(text) or _HEADS.search(text) or _RANK_RE.search(text))


def python_literals(source: str) -> list[tuple[int, str]]:
    """The string literals of ``source`` (f-strings' literal parts too; docstrings not) that
    restate a job file's name, and each ``/ "logs"``."""
    tree = ast.parse(source)
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if _named(node.value):
                found.append((node.lineno, node.value))
        elif (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant)
              and node.right.value == jobfiles.LOGS):
            found.append((node.lineno, f"/ {jobfiles.LOGS!r}"))
    return found


def template_literals(text: str) -> list[tuple[int, str]]:
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if _named(line)]


def test_the_scan_finds_a_restated_name() -> None:
    """The scan below can fail: each kind of restatement it looks for is found."""
    assert [v for _, v in python_literals('p = run_dir / f"{job_id}.result"')] == [".result"]
    assert sorted(v for _, v in python_literals('p = run_dir / "logs" / f"nodes-{job}.r{n}.json"')) == [
        "/ 'logs'", "nodes-"]
    assert python_literals('x = re.compile(r"^(?P<job>.+)\\.progress\\.rank(\\d+)$")')
    doc = 'def f():\n    """reads <job>.result"""\n    return f"{v.reason}: clusterkit.progress"'
    assert python_literals(doc) == []
    assert template_literals('printf x > "$CK_RUN_DIR/$CK_JOB_ID.reason"\n# logs/preflight-<job>.r<restart>.json')
    assert template_literals('# --preflight-transport srun, step.reason, clusterkit.progress(step)') == []


def test_no_module_restates_a_job_file_name() -> None:
    defining = REPO / "toolkit" / "clusterkit" / "jobfiles.py"
    found = [f"{path.relative_to(REPO)}:{line}: {text!r}"
             for path in sorted((REPO / "toolkit").rglob("*.py")) if path != defining
             for line, text in python_literals(path.read_text(encoding="utf-8"))]
    assert found == [], "take these names from clusterkit.jobfiles:\n" + "\n".join(found)


def test_no_template_restates_a_job_file_name() -> None:
    found = [f"{path.relative_to(REPO)}:{line}: {text}"
             for path in sorted((REPO / "templates").glob("*.j2"))
             for line, text in template_literals(path.read_text(encoding="utf-8"))]
    assert found == [], "take these names from the render context's jobfiles:\n" + "\n".join(found)


def _renamed(monkeypatch: pytest.MonkeyPatch) -> dict[str, jobfiles.JobFile]:
    """Every job file renamed (``.x`` added to its ending), in the module both sides read."""
    renamed = {key: jobfiles.JobFile(f.prefix, f.suffix + ".x", f.in_logs, f.per_restart)
               for key, f in jobfiles.FILES.items()}
    for key, f in renamed.items():
        monkeypatch.setitem(jobfiles.FILES, key, f)
        monkeypatch.setattr(jobfiles, key.upper(), f)
    return renamed


@pytest.mark.parametrize("rename", [False, True])
def test_the_rendered_script_writes_the_modules_names(ck, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      rename: bool) -> None:
    """A Slurm job with the in-job preflight and a chain member's end: each file the script
    names is the module's (renamed there: renamed in the script, the old names gone)."""
    files = _renamed(monkeypatch) if rename else dict(jobfiles.FILES)
    out = tmp_path / "run"
    result = ck("render", "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--launcher", "srun",
                "--set", "preflight_in_job=true", "--out", str(out), "--", "python", "train.py")
    assert result.code == 0, result.err
    script = (out / "job.sbatch").read_text()
    for key in ("result", "reason", "progress"):
        assert f'"{files[key].shell()}"' in script, key
    assert f'"{files["result"].shell()}{jobfiles.TMP}"' in script
    assert f'ck_chosen="{files["chosen"].shell("$SLURM_JOB_ID", jobfiles.SHELL_RESTART)}"' in script
    assert f'/{files["batch_log"].relative("%j")}"' in script
    assert files["preflight_report"].doc in script and files["node_choice"].doc in script
    assert result_file(out, "7") == out / files["result"].name("7")   # and the reader looks there
    if rename:
        old = re.search(r"\$CK_JOB_ID\.(?:result|reason|unfixable)(?!\.x)", script)
        assert old is None, f"an old name left in the script: {old}"
