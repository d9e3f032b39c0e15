"""A registry image staged once per job (``software.container.cache_dir``), and the warning for a
Python environment on shared storage at many nodes (``software.import_storm_nodes``).

The rendered steps name the staged file and, under pyxis, one job-scoped container.  The job
script's staging block runs here under bash with a stand-in ``enroot`` (named as such: enroot is
not installed here) that counts its calls; the block is cut out of the rendered script with the
functions it calls, and ``ck_fail`` is a stand-in that prints its reason and exits.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, assert_one_line_error

IMAGE = "nvcr.io#nvidia/pytorch:24.05-py3"


def _site(tmp_path: Path, container: str, extra: str = "") -> str:
    path = tmp_path / "s.yaml"
    base = REPO / "site_configs" / "testbed.yaml"
    path.write_text(f"name: s\nextends: {base}\nsoftware:\n  container: {container}\n{extra}")
    return str(path)


def _render(ck, tmp_path: Path, site: str, *args: str, nodes: str = "2", out_name: str = "run"):  # type: ignore[no-untyped-def]
    out = tmp_path / out_name
    result = ck("render", "--site", site, "--stage", "multi-node", "--nodes", nodes, "--launcher", "torchrun",
                *args, "--out", str(out), "--", "python", "train.py")
    return result, (out / "job.sbatch").read_text() if result.code == 0 else ""


def test_pyxis_steps_name_the_staged_squashfs_and_one_container_per_job(ck, tmp_path: Path) -> None:
    site = _site(tmp_path, f"{{runtime: pyxis, image: '{IMAGE}', cache_dir: /tmp/images}}")
    result, script = _render(ck, tmp_path, site, "--node-setup", "nvidia-smi", "--set", "node_setup_in=container")
    assert result.code == 0, result.err
    steps = [ln for ln in script.splitlines() if ln.lstrip().startswith("srun ") and "--container-" in ln]
    assert len(steps) == 2   # the node setup step and the launch step
    for step in steps:
        assert '--container-image="$CK_IMAGE"' in step and '--container-name=ck-"$SLURM_JOB_ID"' in step, step
    assert "enroot import -o \"$ck_image_tmp\" \"$ck_image_src\"" in script
    assert "ck_image_src='docker://nvcr.io#nvidia/pytorch:24.05-py3'" in script
    # staged before the in-job preflight and the hosts: once per job, on the batch host
    assert script.index("export CK_IMAGE") < script.index("ck_launch=(")


def test_a_site_container_name_is_kept_and_no_cache_keeps_the_image(ck, tmp_path: Path) -> None:
    named = _site(tmp_path, f"{{runtime: pyxis, image: '{IMAGE}', cache_dir: /tmp/images, name: pt}}")
    _, script = _render(ck, tmp_path, named)
    srun = next(ln for ln in script.splitlines() if ln.lstrip().startswith("srun ") and "--container-" in ln)
    assert "--container-name=pt " in srun and "ck-" not in srun
    plain = _site(tmp_path, f"{{runtime: pyxis, image: '{IMAGE}'}}")
    _, script = _render(ck, tmp_path, plain, out_name="run2")
    assert "--container-image='nvcr.io#nvidia/pytorch:24.05-py3'" in script
    assert "--container-name" not in script and "CK_IMAGE" not in script
    squashfs = _site(tmp_path, "{runtime: pyxis, image: /lustre/img/pt.sqsh, cache_dir: /tmp/images}")
    _, script = _render(ck, tmp_path, squashfs, out_name="run3")
    assert "--container-image=/lustre/img/pt.sqsh " in script and "CK_IMAGE" not in script   # a file already


def test_apptainer_builds_a_sif_once_and_every_node_execs_it(ck, tmp_path: Path) -> None:
    site = _site(tmp_path, "{runtime: apptainer, image: 'docker://nvcr.io/nvidia/pytorch:24.05-py3', "
                           "cache_dir: /tmp/images}")
    result, script = _render(ck, tmp_path, site)
    assert result.code == 0, result.err
    assert "apptainer build \"$ck_image_tmp\" \"$ck_image_src\"" in script
    assert "exec apptainer exec --nv --bind " in script and ' "$CK_IMAGE" torchrun ' in script
    probe = (tmp_path / "run" / "nccl-probe.sh").read_text()
    assert '"$CK_IMAGE" python3' in probe     # the probe's Python in the same image
    local = _site(tmp_path, "{runtime: apptainer, image: /img/pt.sif, cache_dir: /tmp/images}")
    _, script = _render(ck, tmp_path, local, out_name="run2")
    assert " /img/pt.sif torchrun " in script and "CK_IMAGE" not in script   # a SIF already: nothing to stage


def test_cache_dir_must_be_an_absolute_plain_path(ck, tmp_path: Path) -> None:
    result = ck("sites", "validate", _site(tmp_path, f"{{runtime: pyxis, image: '{IMAGE}', cache_dir: images}}"))
    assert_one_line_error(result, 2, "software.container.cache_dir", "an absolute path")


def test_a_site_template_without_the_staging_is_refused(ck, tmp_path: Path) -> None:
    templates = tmp_path / "tpl"
    templates.mkdir()
    text = (REPO / "templates" / "job.sbatch.j2").read_text().replace('{% include "job-image.sbatch.j2" %}\n', "")
    (templates / "job.sbatch.j2").write_text(text)
    site = _site(tmp_path, f"{{runtime: pyxis, image: '{IMAGE}', cache_dir: /tmp/images}}",
                 f"templates: {templates}\n")
    result, _ = _render(ck, tmp_path, site)
    assert_one_line_error(result, 2, "does not include job-image.sbatch.j2")


# ---- the staging block, run

def _block(script: str) -> str:
    """The functions the block calls, then the block (from its comment to ``export CK_IMAGE``)."""
    lines = script.splitlines()
    start = lines.index(next(ln for ln in lines if ln.startswith("ck_not_own() {")))
    own_end = lines.index("}", lines.index(next(ln for ln in lines if ln.startswith("ck_check_own() {"))))
    first = lines.index(next(ln for ln in lines if ln.startswith("# ---- the container image")))
    last = lines.index("export CK_IMAGE")
    return "\n".join(lines[start:own_end + 1] + lines[first:last + 1])


@pytest.fixture
def staging(ck, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Run the block with the stand-in enroot (exit status ``$ENROOT_RC``); (exit, output, calls file)."""
    cache = tmp_path / "images"
    _, script = _render(ck, tmp_path, _site(tmp_path, f"{{runtime: pyxis, image: '{IMAGE}', cache_dir: {cache}}}"))
    body = _block(script)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "enroot-calls"
    (bindir / "enroot").write_text(f"""#!/bin/bash
# stand-in for enroot (not installed here): one line per call; import -o OUT URI writes OUT
echo "$*" >> {calls}
[ "${{ENROOT_RC:-0}}" = 0 ] || exit "$ENROOT_RC"
echo "squashfs of $4" > "$3"
""")
    (bindir / "enroot").chmod(0o755)
    prelude = ('ck_fail() { echo "FAIL $1: $2"; exit "$1"; }\n'
               "ck_user=$(id -un); ck_restarts=0; CK_JOB_ID=501\n")

    def run(path: str | None = None, **env: str) -> tuple[int, str]:
        p = subprocess.run(["bash", "-c", prelude + body + '\necho "IMAGE=$CK_IMAGE"'], capture_output=True,
                           text=True, env={"PATH": path or f"{bindir}:/usr/bin:/bin", **env}, timeout=30)
        return p.returncode, p.stdout + p.stderr

    return run, cache, calls


def test_staged_once_then_reused(staging) -> None:  # type: ignore[no-untyped-def]
    run, cache, calls = staging
    code, out = run()
    assert code == 0, out
    user = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout.strip()
    staged = next((cache / user).iterdir())
    assert staged.name.endswith(".sqsh") and f"IMAGE={staged}" in out
    assert staged.read_text() == f"squashfs of docker://{IMAGE}\n" and oct(staged.stat().st_mode & 0o777) == "0o644"
    assert calls.read_text().splitlines() == [f"import -o {cache}/{user}/.{staged.name}.501.r0.tmp docker://{IMAGE}"]
    code, out = run()
    assert code == 0 and "staged before: not imported again" in out, out
    assert len(calls.read_text().splitlines()) == 1              # no second import
    assert [p.name for p in (cache / user).iterdir()] == [staged.name]


def test_a_failed_import_ends_the_job_and_leaves_nothing(staging) -> None:  # type: ignore[no-untyped-def]
    run, cache, _ = staging
    code, out = run(ENROOT_RC="3")
    assert code == 1 and f"FAIL 1: enroot import of docker://{IMAGE} failed (exit 3)" in out, out
    assert not [p for p in cache.rglob("*") if p.is_file()]


def test_no_enroot_on_the_batch_host(staging) -> None:  # type: ignore[no-untyped-def]
    run, _, _ = staging
    if Path("/usr/bin/enroot").exists() or Path("/bin/enroot").exists():
        pytest.skip("enroot is installed on this machine's PATH")
    code, out = run(path="/usr/bin:/bin")
    assert code == 1 and "FAIL 1: software.container.cache_dir: no enroot command on" in out, out


@pytest.mark.parametrize("plant", ["writable", "link"])
def test_a_planted_image_is_refused(staging, tmp_path: Path, plant: str) -> None:  # type: ignore[no-untyped-def]
    run, cache, calls = staging
    code, _ = run()
    assert code == 0
    user = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout.strip()
    staged = next((cache / user).iterdir())
    if plant == "writable":
        staged.chmod(0o666)
        why = "is writable by others (mode 666)"
    else:
        other = tmp_path / "elsewhere.sqsh"
        other.write_text("x")
        staged.unlink()
        os.symlink(other, staged)
        why = "is not a regular file"
    code, out = run()
    assert code == 1 and why in out and "another user could plant what every rank runs" in out, out
    assert len(calls.read_text().splitlines()) == 1


def test_a_cache_others_can_write_is_refused(staging) -> None:  # type: ignore[no-untyped-def]
    run, cache, calls = staging
    cache.mkdir(mode=0o777)
    cache.chmod(0o777)   # world-writable, not sticky
    code, out = run()
    assert code == 1 and "writable by others (mode 777)" in out, out
    assert not calls.exists()


def test_apptainer_builds_once_then_reuses(ck, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cache, calls, bindir = tmp_path / "images", tmp_path / "apptainer-calls", tmp_path / "bin"
    uri = "docker://nvcr.io/nvidia/pytorch:24.05-py3"
    _, script = _render(ck, tmp_path, _site(tmp_path, f"{{runtime: apptainer, image: '{uri}', cache_dir: {cache}}}"))
    bindir.mkdir()
    (bindir / "apptainer").write_text(f"""#!/bin/bash
# stand-in for apptainer (not installed here): one line per call; build OUT SRC writes OUT
echo "$*" >> {calls}
[ "$1" = build ] && echo "sif of $3" > "$2"
""")
    (bindir / "apptainer").chmod(0o755)
    prelude = 'ck_fail() { echo "FAIL $1: $2"; exit "$1"; }\nck_user=$(id -un); ck_restarts=0; CK_JOB_ID=9\n'
    for _ in range(2):
        p = subprocess.run(["bash", "-c", prelude + _block(script) + '\necho "IMAGE=$CK_IMAGE"'], capture_output=True,
                           text=True, env={"PATH": f"{bindir}:/usr/bin:/bin"}, timeout=30)
        assert p.returncode == 0, p.stdout + p.stderr
    staged = next(cache.glob("*/*.sif"))
    assert staged.read_text() == f"sif of {uri}\n" and f"IMAGE={staged}" in p.stdout
    assert calls.read_text().splitlines() == [f"build {staged.parent}/.{staged.name}.9.r0.tmp {uri}"]   # once


# ---- a venv or conda environment on shared storage at many nodes

def test_venv_on_shared_storage_past_the_sites_node_count_warns(ck, tmp_path: Path) -> None:
    base = REPO / "site_configs" / "testbed.yaml"
    site = tmp_path / "s.yaml"
    site.write_text(f"name: s\nextends: {base}\nsoftware: {{import_storm_nodes: 2}}\n"
                    "storage:\n  - {path: /tmp, type: lustre}\n  - {path: /scratch, type: local}\n")
    args = ("render", "--site", str(site), "--stage", "multi-node", "--launcher", "torchrun")

    def warned(*extra: str, nodes: str = "3") -> list[str]:
        r = ck(*args, "--nodes", nodes, *extra, "--out", str(tmp_path / f"r{len(list(tmp_path.iterdir()))}"),
               "--", "python", "train.py")
        assert r.code == 0, r.err
        return [ln for ln in r.err.splitlines() if "software.import_storm_nodes" in ln]

    lines = warned("--venv", "/tmp/venvs/pt")
    assert len(lines) == 1 and "--venv /tmp/venvs/pt is on shared storage, and this job has 3 nodes" in lines[0]
    assert "(software.import_storm_nodes: 2)" in lines[0] and "use an image" in lines[0]
    assert warned("--venv", "/tmp/venvs/pt", nodes="2") == []           # at the limit: no warning
    assert warned("--venv", "/scratch/venv") == []                      # node-local storage
    assert "may be on shared storage (a named environment)" in warned("--conda", "pt")[0]
    assert "may be on shared storage (no storage the site lists holds it)" in warned("--venv", "/opt/v")[0]
    assert warned() == []
