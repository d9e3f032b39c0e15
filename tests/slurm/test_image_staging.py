"""A registry image staged once per job (``software.container.cache_dir``), on the Slurm testbed.

pyxis and enroot are not installed here, so two stand-ins, named as such, are first on the job's
PATH: ``enroot`` counts its calls per subcommand in a file (``import -o OUT URI`` writes a small
file at OUT), and ``srun`` (pyxis stand-in) writes the ``--container-*`` options of every step it
is given into a file, drops them (the testbed's srun has no pyxis to read them) and runs the real
srun with a task prolog that does on each node what pyxis does there with ``--container-name``:
``enroot create`` the named container on the first step that names it on that node, reuse it on
every later step.  The job runs, is requeued by Slurm and runs again: one ``enroot import`` in all,
one ``enroot create`` per node, and every container step of both runs names the staged squashfs
and the job's one container name.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

from .conftest import CK, REPO

IMAGE = "nvcr.io#nvidia/pytorch:24.05-py3"


def _standins(directory: Path, calls: Path, steps: Path) -> Path:
    directory.mkdir(parents=True)
    enroot = directory / "enroot"
    enroot.write_text(f"""#!/bin/bash
# stand-in for enroot (not installed on the testbed): one line per call, its subcommand and node
echo "$1 ${{SLURMD_NODENAME:-?}}" >> {shlex.quote(str(calls))}
if [ "$1" = import ] && [ "$2" = -o ]; then echo "squashfs stand-in of $4" > "$3"; fi
""")
    # pyxis's part on each node, as a task prolog: the named container created once per node
    # (a directory per node and name: the first task there makes it), from the step's image
    containers = directory / "containers"
    prolog = directory / "pyxis-node"
    prolog.write_text(f"""#!/bin/bash
name=$1 image=$2
mkdir -p {shlex.quote(str(containers))}/"$SLURMD_NODENAME"
if mkdir {shlex.quote(str(containers))}/"$SLURMD_NODENAME/$name" 2>/dev/null; then
  {shlex.quote(str(enroot))} create --name "$name" "$image" >/dev/null
fi
""")
    real = shutil.which("srun")
    assert real, "srun not on PATH"
    srun = directory / "srun"
    srun.write_text(f"""#!/bin/bash
# stand-in for pyxis (not installed on the testbed): notes each step's --container-* options and nodes,
# then runs the real srun without them
opts=() nodes=""
args=()
for a in "$@"; do
  case $a in
    --container-*) opts+=("$a") ;;
    *) [[ $a == --nodelist=* ]] && nodes=${{a#--nodelist=}}; args+=("$a") ;;
  esac
done
if [ "${{#opts[@]}}" -gt 0 ]; then
  printf '%s\\n' "$SLURM_JOB_ID ${{SLURM_RESTART_COUNT:-0}} $nodes ${{opts[*]}}" >> {shlex.quote(str(steps))}
  name="" image=""
  for o in "${{opts[@]}}"; do
    case $o in --container-name=*) name=${{o#*=}} ;; --container-image=*) image=${{o#*=}} ;; esac
  done
  if [ -n "$name" ]; then   # a task prolog of this step's own, the name and image in it
    step=$(mktemp {shlex.quote(str(directory))}/step.XXXXXX)
    printf '#!/bin/bash\\nexec %q %q %q\\n' {shlex.quote(str(prolog))} "$name" "$image" > "$step"
    chmod 755 "$step"
    exec {shlex.quote(real)} --task-prolog="$step" "${{args[@]}}"
  fi
fi
exec {shlex.quote(real)} "${{args[@]}}"
""")
    for f in (enroot, srun, prolog):
        f.chmod(0o755)
    return directory


def test_one_import_per_job_across_a_requeue_and_one_container_name(cli: CK, tmp_path: Path) -> None:
    cache, calls, steps = tmp_path / "images", tmp_path / "enroot-calls", tmp_path / "steps"
    site = tmp_path / "site.yaml"
    site.write_text(f"name: testbed-image\nextends: {REPO / 'site_configs' / 'testbed.yaml'}\n"
                    f"software:\n  container: {{runtime: pyxis, image: '{IMAGE}', cache_dir: {cache}}}\n")
    env = cli.env()
    env["PATH"] = f"{_standins(tmp_path / 'bin', calls, steps)}:{env['PATH']}"
    run = cli.runs / "image"
    proc = cli("submit", "--site", str(site), "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "1",
               "--launcher", "srun", "--no-snapshot", "--out", str(run), "--", "true", env=env)
    assert proc.code == 0, proc.out + proc.err
    m = re.search(r"Submitted job (\d+)", proc.out)
    assert m, proc.out
    job = m.group(1)
    st = cli.wait_for(job, lambda s: s["state"] not in ("PENDING", "RUNNING"), timeout=60, what="the first run's end")
    assert st["state"] == "COMPLETED", st
    cli.bed.run("scontrol", "requeue", job)
    st = cli.requeued_then_ended(job, timeout=60)
    assert st["state"] == "COMPLETED" and st["restarts"] == 1, st

    made = [ln.split() for ln in calls.read_text().splitlines()]
    assert [c[0] for c in made if c[0] == "import"] == ["import"], made   # one import in the job, its requeue included
    creates = sorted(c[1] for c in made if c[0] == "create")
    assert creates == sorted(set(creates)) and len(creates) == 2, made    # one create on each of the 2 nodes, in all
    assert {c[0] for c in made} == {"import", "create"}, made
    staged = list((cache / "root").glob("*.sqsh"))
    assert len(staged) == 1 and staged[0].read_text() == f"squashfs stand-in of docker://{IMAGE}\n"
    assert not list((cache / "root").glob(".*.tmp"))         # staged under a temporary name, then renamed
    log = (run / "logs" / f"slurm-{job}.out").read_text()
    assert f"staging docker://{IMAGE} into {staged[0]}" in log
    assert f"container image {staged[0]} (staged before: not imported again)" in log

    lines = [ln.split() for ln in steps.read_text().splitlines()]
    assert [(ln[0], ln[1]) for ln in lines] == [(job, "0"), (job, "1")], lines   # the launch step of each run
    for ln in lines:
        assert len(ln[2].split(",")) == 2 or re.fullmatch(r"node\[\d-\d\]", ln[2]), ln   # both nodes
        opts = dict(o.split("=", 1) for o in ln[3:] if "=" in o)
        assert opts["--container-image"] == str(staged[0]) and opts["--container-name"] == f"ck-{job}", ln
    # the record says which image the job ran
    plan = json.loads((run / "plan.json").read_text())
    assert plan["container"]["cache_dir"] == str(cache)
