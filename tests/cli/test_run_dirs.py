"""Run directories: one per render even when renders race for a name, the user's umask, and an
existing empty --out directory kept as the user made it.  The CLI's `render` writes only with
--out, so the default directory (what `submit` claims) is made here through the Python API's
`Plan.render()`, in a process of its own where a umask or a race needs one."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ..conftest import CLI, REPO, CLIResult, assert_one_line_error


def _render(ck: CLI, cwd: Path, *args: str, umask: int | None = None) -> CLIResult:
    return ck.proc("render", "--site", "local", *args, "--", "python", "train.py", cwd=cwd, umask=umask)


def _api_render(cwd: Path, job_name: str = "ck-train", umask: int | None = None) -> CLIResult:
    """``Plan.render()`` without ``out``: the default run directory, claimed as `submit` claims it."""
    code = ("import clusterkit as ck; "
            f"print('run directory:', ck.Site.load('local').plan(['python', 'train.py'], job_name={job_name!r})"
            ".render().path)")
    p = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120,
                       preexec_fn=None if umask is None else (lambda: os.umask(umask)))
    return CLIResult(p.returncode, p.stdout, p.stderr)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_ten_parallel_renders_with_one_job_name_get_ten_directories(ck, tmp_path: Path) -> None:
    with ThreadPoolExecutor(max_workers=10) as pool:
        procs = list(pool.map(lambda _: _api_render(tmp_path, "same"), range(10)))
    assert [p.code for p in procs] == [0] * 10, [p.err for p in procs if p.code]
    dirs = sorted((tmp_path / "runs").iterdir())
    assert len(dirs) == 10 and all(d.name.startswith("same-") for d in dirs)
    printed = sorted(line.split(": ", 1)[1] for p in procs for line in p.out.splitlines()
                     if "run directory:" in line)
    assert printed == [str(d) for d in dirs]  # each render names its own directory
    for d in dirs:
        assert sorted(os.listdir(d)) == ["job.sbatch", "logs", "nccl-probe.sh", "nccl.env", "plan.json"], d
        assert f"export CK_RUN_DIR={d}\n" in (d / "job.sbatch").read_text()  # each script points at its own


def test_run_directory_follows_the_umask(ck, tmp_path: Path) -> None:
    proc = _render(ck, tmp_path, "--out", str(tmp_path / "run"), umask=0o027)
    assert proc.code == 0, proc.err
    run = tmp_path / "run"
    assert (_mode(run), _mode(run / "logs"), _mode(run / "job.sbatch"), _mode(run / "nccl.env")) == (
        0o750, 0o750, 0o750, 0o640)
    default = _api_render(tmp_path, umask=0o077)
    assert default.code == 0, default.err
    (made,) = (tmp_path / "runs").iterdir()
    assert (_mode(made), _mode(made / "job.sbatch"), _mode(made / "plan.json")) == (0o700, 0o700, 0o600)


def test_existing_empty_out_keeps_its_mode_and_group(ck, tmp_path: Path) -> None:
    out = tmp_path / "shared-run"
    out.mkdir()
    out.chmod(0o2770)  # a project directory: group-writable, setgid
    gid = 4242 if os.geteuid() == 0 else os.getegid()
    os.chown(out, -1, gid)
    proc = _render(ck, tmp_path, "--out", str(out), umask=0o002)
    assert proc.code == 0, proc.err
    assert (_mode(out), out.stat().st_gid) == (0o2770, gid)
    assert {p.stat().st_gid for p in out.iterdir()} == {gid}  # the artifacts take the directory's group
    assert _mode(out / "nccl.env") == 0o664


def test_failed_write_leaves_existing_out_empty_and_default_dir_gone(ck, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from clusterkit import rundir as workspace

    real_write = Path.write_text

    def full_disk(self: Path, *args, **kwargs):  # a stand-in for a full disk: the second artifact fails
        if self.name == "nccl.env":
            raise OSError(28, "No space left on device")
        return real_write(self, *args, **kwargs)

    out = tmp_path / "precreated"
    out.mkdir()
    out.chmod(0o2750)
    monkeypatch.setattr(workspace.Path, "write_text", full_disk)
    assert_one_line_error(ck("render", "--site", "local", "--out", str(out), "--", "python", "x.py"), 2,
                          "No space left on device")
    assert (list(out.iterdir()), _mode(out)) == ([], 0o2750)
    from clusterkit import Site
    from clusterkit.errors import RunDirError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(RunDirError, match="No space left on device"):
        Site.load("local").plan(["python", "x.py"]).render()
    assert not (tmp_path / "runs").exists()   # the default directory, and ./runs made for it, are gone


def test_out_being_written_by_another_render_is_refused(ck, tmp_path: Path) -> None:
    from clusterkit.errors import RunDirError
    from clusterkit.rundir import write_run_dir

    out = tmp_path / "run"
    (out / ".clusterkit-staging").mkdir(parents=True)  # what another render holds while it writes
    assert_one_line_error(ck("render", "--site", "local", "--out", str(out), "--", "python", "x.py"), 2,
                          f"{out} already exists and is not empty")
    # the same directory found empty by both at the check, then claimed by the other first
    with pytest.raises(RunDirError, match="is being written by another clusterkit"):
        write_run_dir(out, {"job.sbatch": "#!/bin/bash\n"})
    assert os.listdir(out) == [".clusterkit-staging"]


def test_render_from_repo_root_still_defaults_to_runs(ck, tmp_path: Path) -> None:
    """The default base is the current directory's runs/, wherever clusterkit is run from."""
    proc = _api_render(tmp_path, "where")
    assert proc.code == 0 and not (REPO / "runs" / "where").exists()
    assert [d.name.split("-")[0] for d in (tmp_path / "runs").iterdir()] == ["where"]


def test_render_and_dry_run_without_out_write_nothing(ck, tmp_path: Path) -> None:
    """A preview touches no disk: no ./runs, and no folder of the site's storage is made (a
    workstation has no /lustre); with --out the run directory is written."""
    site = tmp_path / "lustre-site.yaml"
    scratch = tmp_path / "lustre" / "scratch"
    site.write_text("name: lustre-site\nscheduler: {kind: slurm}\nnodes: {nodelist: 'n[1-4]', gpus_per_node: 8}\n"
                    f"storage:\n  - {{path: {scratch}, type: lustre}}\n")
    work = tmp_path / "work"
    work.mkdir()
    code = tmp_path / "code"   # what the dry run snapshots (hashed, nothing stored): t.py is there
    code.mkdir()
    (code / "t.py").write_text("print(1)\n")
    dry = ("submit", "--dry-run", "--code", str(code))
    for args in (("render",), dry, ("render", "--json"), (*dry, "--json")):
        result = ck(*args, "--site", str(site), "--nodes", "4", "--", "python", "t.py", cwd=work)
        assert result.code == 0, result.err
        assert list(work.iterdir()) == [] and not (tmp_path / "lustre").exists(), args
    assert "nothing written (--out DIR writes the run directory)" in ck(
        *dry, "--site", "local", "--", "python", "t.py", cwd=work).err
    shown = ck("render", "--site", "local", "--", "python", "t.py", cwd=work)
    assert "run directory: none written (preview); --out DIR writes these files" in shown.out
    assert list(work.iterdir()) == []
    written = ck(*dry, "--site", "local", "--out", "run", "--", "python", "t.py", cwd=work)
    assert written.code == 0 and (work / "run" / "job.sbatch").read_text() in written.out
    assert (work / "run" / "code" / "t.py").read_text() == "print(1)\n"   # --out: the snapshot's tree too
