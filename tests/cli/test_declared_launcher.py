"""A site's own launcher declared as data (site key ``launchers:``, issue 40 §2) and the built-in
``mpirun``, through the CLI: the argv rendered with clusterkit's values (run by real bash, as the
node runs the launch body; the site's text never evaluated), its flags refused in
``--launcher-arg`` as a built-in's are, bad declarations refused with file:line.  The testbed runs
mpirun for real (tests/slurm/test_mpirun.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, assert_one_line_error

PWNED = Path("/tmp/ck-declared-pwned")
CTRUN = f"""\
launchers:
  ctrun:
    argv: [ctrun, --nnodes, "{{ck:nnodes}}", --nproc-per-node, "{{ck:nproc_per_node}}",
           "--rdzv-endpoint={{ck:rdzv_host}}:{{ck:rdzv_port}}", --node-rank, "{{ck:node_rank}}",
           --lit, "$(touch {PWNED}) `id` {{lr}} {{ck:job_id}}"]
    owns: [--max-restarts]
    command: script
    module_flag: -m
  cmpi:
    argv: [cmpi, -n, "{{ck:world_size}}", -f, "{{ck:hostfile}}"]
    per: job
    hostfile: bare
  wrap:
    argv: [gpuwrap, --quiet]
    per: task
"""


def _site(tmp_path: Path, text: str = CTRUN, name: str = "own.yaml") -> Path:
    path = tmp_path / name
    path.write_text(f"extends: {REPO / 'site_configs' / 'testbed.yaml'}\n" + text)
    return path


def _body(run_dir: Path) -> str:
    m = re.search(r"bash -c ('(?:[^']|'\"'\"')*')", (run_dir / "job.sbatch").read_text())
    assert m
    return subprocess.run(["bash", "-c", f"printf %s {m.group(1)}"], capture_output=True, text=True,
                          check=True).stdout


def _launched(run_dir: Path, command: list[str], **env: str) -> list[str]:
    """The argv the launch body execs, with the launcher a recorder on PATH: from the body's exec on."""
    body = _body(run_dir)
    body = body[body.index("exec "):]
    fake = run_dir / "fakebin"
    fake.mkdir(exist_ok=True)
    for prog in ("ctrun", "cmpi", "gpuwrap"):
        (fake / prog).write_text("#!/bin/sh\nprintf '%s\\0' \"$(basename \"$0\")\" \"$@\"\n")
        (fake / prog).chmod(0o755)
    proc = subprocess.run(["bash", "-c", body, "clusterkit-launch", *command], capture_output=True, text=True,
                          check=True, env={"PATH": f"{fake}:/usr/bin:/bin", **env})
    return proc.stdout.split("\0")[:-1]


def test_a_sites_launcher_runs_its_argv_with_clusterkits_values_and_nothing_evaluated(ck, tmp_path: Path) -> None:
    site, out = _site(tmp_path), tmp_path / "run"
    result = ck("render", "--site", str(site), "--nodes", "2", "--launcher", "ctrun", "--launcher-arg=--verbose",
                "--out", str(out), "--", "python", "-u", "-m", "pkg.train", "--lr", "1")
    assert result.code == 0, result.err
    assert "launcher ctrun (flag)" in result.out
    got = _launched(out, ["pkg.train", "--lr", "1"], CK_HEAD="node1", CK_PORT="20123", SLURM_NODEID="1",
                    CK_JOB_ID="77")
    assert got == ["ctrun", "--nnodes", "2", "--nproc-per-node", "8", "--rdzv-endpoint=node1:20123",
                   "--node-rank", "1", "--lit", f"$(touch {PWNED}) `id` {{lr}} 77", "-m", "--verbose",
                   "pkg.train", "--lr", "1"]
    assert not PWNED.exists()
    text = (out / "job.sbatch").read_text()
    assert "ck_launch_mode=step" in text and "--ntasks-per-node=1" in text   # per: node, one srun task each


def test_a_per_job_launcher_reads_its_hostfile_and_a_per_task_one_runs_under_each_rank(ck, tmp_path: Path) -> None:
    site = _site(tmp_path)
    out = tmp_path / "job"
    result = ck("submit", "--dry-run", "--no-snapshot", "--site", str(site), "--nodes", "2", "--launcher", "cmpi",
                "--set", "max_restarts=0", "--out", str(out), "--", "./train")
    assert result.code == 0, result.err
    assert (out / "hostfile").read_text() == "node1\nnode2\n"   # bare: one host name a line
    assert _launched(out, ["./train"], CK_HOSTFILE="/r/hostfile") == ["cmpi", "-n", "16", "-f", "/r/hostfile",
                                                                      "./train"]
    out = tmp_path / "task"
    result = ck("render", "--site", str(site), "--nodes", "2", "--launcher", "wrap", "--out", str(out),
                "--", "python", "train.py")
    assert result.code == 0, result.err
    text = (out / "job.sbatch").read_text()
    assert "--ntasks-per-node=8" in text and 'RANK="$SLURM_PROCID"' in text
    assert "exec gpuwrap --quiet \"$@\"" in _body(out)


OWNED = [("--max-rest=3", "launchers.ctrun.owns"), ("--nnodes=3", "launchers.ctrun.argv"),
         ("--node-rank", "launchers.ctrun.argv")]


@pytest.mark.parametrize("arg, owner", OWNED)
def test_a_flag_the_sites_launcher_owns_is_refused(ck, tmp_path: Path, arg: str, owner: str) -> None:
    result = ck("render", "--site", str(_site(tmp_path)), "--nodes", "2", "--launcher", "ctrun",
                f"--launcher-arg={arg}", "--out", str(tmp_path / "run"), "--", "python", "train.py")
    assert_one_line_error(result, 2, f"--launcher-arg {arg!r}", owner)
    assert not (tmp_path / "run").exists()


def test_launcher_names_are_the_built_ins_and_the_sites_own(ck, tmp_path: Path) -> None:
    result = ck("render", "--site", str(_site(tmp_path)), "--launcher", "nope", "--out", str(tmp_path / "run"),
                "--", "python", "train.py")
    assert_one_line_error(result, 2, "unknown launcher 'nope'", "mpirun", "this site's own: ctrun, cmpi, wrap")
    result = ck("render", "--site", "testbed", "--launcher", "ctrun", "--out", str(tmp_path / "run"),
                "--", "python", "train.py")
    assert_one_line_error(result, 2, "unknown launcher 'ctrun'")
    result = ck("render", "--site", "testbed", "--launcher", "Bad Name", "--out", str(tmp_path / "run"),
                "--", "python", "train.py")
    assert_one_line_error(result, 2, "--launcher 'Bad Name'")
    # a stage of the site may choose it; a setting only built-ins act on is refused for it
    site = _site(tmp_path, CTRUN + "stages:\n  multi-node:\n    launcher: ctrun\n", "staged.yaml")
    result = ck("render", "--site", str(site), "--nodes", "2", "--out", str(tmp_path / "staged"),
                "--", "python", "train.py")
    assert result.code == 0 and "launcher ctrun (stage)" in result.out, result.err
    result = ck("render", "--site", str(site), "--nodes", "2", "--set", "zero_stage=2", "--out", str(tmp_path / "z"),
                "--", "python", "train.py")
    assert_one_line_error(result, 2, "the ctrun launcher does not use it")


BAD = [
    ('argv: [ctrun, "{ck:nope}"]', 4, "launchers.ctrun.argv: {ck:nope}"),
    ('argv: [ctrun, "{ck:node_rank}"]\n    per: job', 3, "per: job"),
    ('argv: [ctrun, "{ck:hostfile}"]', 3, "hostfile: slots or bare"),
    ('argv: ["{ck:rdzv_host}"]', 4, "the first word is the program"),
    ("argv: [ctrun]\n    owns: [nnodes]", 5, "launchers.ctrun.owns: 'nnodes'"),
    ("argv: [ctrun, --]", 4, "'--' would end"),
    ("argv: [ctrun]\n    per: always", 5, "launchers.ctrun.per"),
    ("argv: [ctrun]\n    shell: true", 5, "unknown key 'shell'"),
]


@pytest.mark.parametrize("entry, line, needle", BAD, ids=[str(i) for i in range(len(BAD))])
def test_a_bad_declaration_is_refused_at_its_line(ck, tmp_path: Path, entry: str, line: int, needle: str) -> None:
    site = _site(tmp_path, f"launchers:\n  ctrun:\n    {entry}\n")
    result = ck("render", "--site", str(site), "--out", str(tmp_path / "run"), "--", "python", "train.py")
    assert_one_line_error(result, 2, f"own.yaml:{line}: ", needle)


def test_a_built_in_name_or_an_undeclared_stage_launcher_is_refused(ck, tmp_path: Path) -> None:
    site = _site(tmp_path, "launchers:\n  torchrun:\n    argv: [x]\n")
    assert_one_line_error(ck("render", "--site", str(site), "--", "true"), 2, "own.yaml:2: ", "is a built-in launcher")
    site = _site(tmp_path, "stages:\n  multi-node:\n    launcher: ctrun\n")
    assert_one_line_error(ck("render", "--site", str(site), "--", "true"), 2, "own.yaml:2: ", "'ctrun': choose one of")


def test_mpirun_renders_open_mpis_words_root_only_when_root_and_owns_its_flags(ck, tmp_path: Path) -> None:
    from clusterkit.job.launchers.mpirun import RANKS

    out = tmp_path / "run"
    result = ck("render", "--site", "testbed", "--nodes", "2", "--gpus-per-node", "2", "--launcher", "mpirun",
                "--set", "max_restarts=0", "--env", "MY_VAR=1", "--launcher-arg=--bind-to=core",
                "--out", str(out), "--", "python", "train.py")
    assert result.code == 0, result.err
    assert (out / "hostfile").read_text() == "node1 slots=2\nnode2 slots=2\n"
    text = (out / "job.sbatch").read_text()
    assert "ck_launch_mode=here" in text   # once, on the batch host: its daemons start through srun
    body = _body(out)
    exec_words = body[body.index("exec mpirun"):]
    assert " -x MASTER_ADDR -x MASTER_PORT " in exec_words and " -x MY_VAR " in exec_words
    assert ('-np 4 --map-by ppr:2:node --bind-to none --oversubscribe --hostfile "$CK_HOSTFILE" --bind-to=core '
            "bash -c " in exec_words)
    # the root switch: only when the job script runs as root
    setup = text[text.index("# ---- mpirun: setup"):text.index("# ---- launch:")]
    for uid, expect in (("0", "1 1"), ("1000", " ")):
        fake = tmp_path / f"id{uid}"
        fake.mkdir()
        (fake / "id").write_text(f"#!/bin/sh\necho {uid}\n")
        (fake / "id").chmod(0o755)
        proc = subprocess.run(["bash", "-c", setup + 'echo "${OMPI_ALLOW_RUN_AS_ROOT:-} '
                               '${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-}"'], capture_output=True, text=True, check=True,
                              env={"PATH": f"{fake}:/usr/bin:/bin"})
        assert proc.stdout == expect + "\n"
    # each rank's torch names from Open MPI's
    proc = subprocess.run(["bash", "-c", RANKS, "clusterkit-rank", "sh", "-c", 'echo "$RANK $LOCAL_RANK $WORLD_SIZE"'],
                          capture_output=True, text=True, check=True,
                          env={"PATH": "/usr/bin:/bin", "OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                               "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"})
    assert proc.stdout == "3 1 4\n"
    for arg in ("-np=8", "--hostfile=h", "--map-by=ppr:1:node", "--allow-run-as-root", "-H"):
        result = ck("render", "--site", "testbed", "--nodes", "2", "--launcher", "mpirun", "--set", "max_restarts=0",
                    f"--launcher-arg={arg}", "--out", str(tmp_path / "x"), "--", "python", "train.py")
        assert_one_line_error(result, 2, f"--launcher-arg {arg!r}", "mpirun option")


def test_mpirun_refuses_a_per_node_value_it_cannot_give(ck, tmp_path: Path) -> None:
    result = ck("render", "--site", "testbed", "--nodes", "2", "--launcher", "mpirun", "--set", "max_restarts=0",
                "--out", str(tmp_path / "run"), "--", "python", "train.py", "--tag", "{ck:node_rank}")
    assert_one_line_error(result, 2, "{ck:node_rank}", "mpirun starts every node's workers from the batch host")


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed (openmpi-bin)")
def test_mpirun_runs_for_real_on_a_local_site(ck, tmp_path: Path) -> None:
    """The local site: Open MPI's real mpirun starts 2 ranks here (--host localhost:2); each writes
    what it was told."""
    out = tmp_path / "run"
    marks = tmp_path / "marks"
    marks.mkdir()
    script = 'echo "$OMPI_COMM_WORLD_RANK $RANK $LOCAL_RANK $WORLD_SIZE $MASTER_PORT" > "$MARKS/rank$RANK"'
    result = ck.proc("submit", "--site", "local", "--gpus-per-node", "2", "--launcher", "mpirun", "--no-snapshot",
                     "--env", f"MARKS={marks}", "--out", str(out), "--wait", "--", "bash", "-c", script, timeout=120)
    assert result.code == 0, result.out + result.err
    lines = sorted(p.read_text() for p in marks.iterdir())
    assert [line.split()[:4] for line in lines] == [["0", "0", "0", "2"], ["1", "1", "1", "2"]]
    assert len({line.split()[4] for line in lines}) == 1   # the job's port, sent with -x
