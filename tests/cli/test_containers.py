"""The site's container beyond pyxis and ``apptainer exec``: ``runtime: singularity`` (apptainer's
flags, the ``singularity`` command, ``SINGULARITYENV_``), ``runscript: true`` (``run``: the image's
runscript starts the launcher), and ``--set node_setup_in=container`` (the ``--node-setup`` steps in
the image, as the launcher's step is: pyxis's flags, or ``RUNTIME exec ... IMAGE bash -c``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO, assert_one_line_error


def _site(tmp_path: Path, container: str) -> str:
    path = tmp_path / "s.yaml"
    base = REPO / "site_configs" / "testbed.yaml"
    path.write_text(f"name: s\nextends: {base}\nsoftware:\n  container: {container}\n")
    return str(path)


def _render(ck, tmp_path: Path, site: str, *args: str):  # type: ignore[no-untyped-def]
    out = tmp_path / "run"
    result = ck("render", "--site", site, "--stage", "multi-node", "--nodes", "2", "--launcher", "torchrun", *args,
                "--out", str(out), "--", "python", "train.py")
    return result, (out / "job.sbatch").read_text() if result.code == 0 else ""


def _step(script: str, needle: str) -> str:
    return next(line for line in script.splitlines() if needle in line)


def test_singularity_is_apptainer_by_another_name(ck, tmp_path: Path) -> None:
    site = _site(tmp_path, "{runtime: singularity, image: /img/pt.sif, env: {HF_HOME: /data/hf}}")
    result, script = _render(ck, tmp_path, site)
    assert result.code == 0, result.err
    assert "exec singularity exec --nv --bind " in script and " /img/pt.sif torchrun " in script
    assert "env HF_HOME=/data/hf SINGULARITYENV_HF_HOME=/data/hf" in script and "APPTAINER" not in script


def test_singularity_refuses_an_activation_as_apptainer_does(ck, tmp_path: Path) -> None:
    result, _ = _render(ck, tmp_path, _site(tmp_path, "{runtime: singularity, image: /img/pt.sif}"), "--venv", "/v")
    assert_one_line_error(result, 2, "the site's singularity container starts the launcher directly")


@pytest.mark.parametrize("runtime", ["apptainer", "singularity"])
def test_the_runscript_starts_the_launcher(ck, tmp_path: Path, runtime: str) -> None:
    result, script = _render(ck, tmp_path, _site(tmp_path, f"{{runtime: {runtime}, image: /i.sif, runscript: true}}"))
    assert result.code == 0, result.err
    assert f"exec {runtime} run --nv --bind " in script and f"{runtime} exec" not in script


def test_pyxis_has_no_runscript(ck, tmp_path: Path) -> None:
    result = ck("sites", "validate", _site(tmp_path, "{runtime: pyxis, image: 'nvcr.io#x', runscript: true}"))
    assert_one_line_error(result, 2, "software.container", "runscript is for apptainer and singularity")


def test_node_setup_in_an_apptainer_image_is_exec_even_with_a_runscript(ck, tmp_path: Path) -> None:
    site = _site(tmp_path, "{runtime: apptainer, image: /i.sif, runscript: true, env: {A: b}, mount_home: false}")
    result, script = _render(ck, tmp_path, site, "--node-setup", "pip list", "--set", "node_setup_in=container")
    assert result.code == 0, result.err
    step = _step(script, "bash -c 'pip list'")
    assert step.startswith("env A=b APPTAINERENV_A=b srun --nodes=2 ")
    assert " --kill-on-bad-exit=1 apptainer exec --nv --no-home --bind " in step and " /i.sif bash -c " in step


def test_node_setup_in_a_pyxis_image_gets_the_launchers_container(ck, tmp_path: Path) -> None:
    site = _site(tmp_path, "{runtime: pyxis, image: 'nvcr.io#nvidia/pytorch:24.05-py3', name: pt}")
    result, script = _render(ck, tmp_path, site, "--node-setup", "pip list", "--set", "node_setup_in=container")
    assert result.code == 0, result.err
    step = _step(script, "bash -c 'pip list'")
    for flag in ("--container-image='nvcr.io#nvidia/pytorch:24.05-py3'", '--container-workdir="$PWD"',
                 "--container-name=pt"):
        assert flag in step and flag in _step(script, "srun --nodes=2 --nodelist=\"$CK_NODELIST\" --ntasks=2 "
                                                      "--kill-on-bad-exit=1")


def test_node_setup_on_the_host_by_default(ck, tmp_path: Path) -> None:
    site = _site(tmp_path, "{runtime: apptainer, image: /i.sif}")
    result, script = _render(ck, tmp_path, site, "--node-setup", "pip list")
    assert result.code == 0, result.err
    assert _step(script, "bash -c 'pip list'").startswith("srun --nodes=2 ")
    assert "--cpus-per-task=8 --kill-on-bad-exit=1 bash -c 'pip list'" in script


def test_node_setup_in_a_container_the_job_does_not_have_is_refused(ck, tmp_path: Path) -> None:
    site = _site(tmp_path, "{runtime: apptainer, image: /i.sif}")
    result, _ = _render(ck, tmp_path, site, "--node-setup", "true", "--set", "node_setup_in=container",
                        "--set", "container=false")
    assert_one_line_error(result, 2, "node_setup_in", "this job has none")
