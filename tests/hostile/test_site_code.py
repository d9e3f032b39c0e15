"""What a site file runs, and what its templates may touch: templates get data they cannot
change, the run-directory writer writes plain relative names inside the run directory only, and
everything in a site file that runs code (a template anywhere under its directory, ``job.setup``,
``job.teardown``, ``job.venv``, ``job.conda``, program-running ``job.srun_args``, a site's own
``launchers:``) follows one trust rule: used only
from files no other user can write."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from clusterkit.errors import RunDirError
from clusterkit.rundir import write_run_dir
from tests.conftest import REPO, assert_one_line_error
from tests.hostile.test_templates import dry_run, site_with_template


def _escapes(tmp_path: Path) -> list[Path]:
    return [p for p in tmp_path.rglob("*") if "escape" in p.name or "pwned" in p.name]


# A site template that changes the plan's artifact map (or any other data it is handed): the
# mutation used to land, and render / submit --dry-run wrote the new names where they pointed.
MUTATIONS = {
    "files-update-dotdot": "{{ plan.launch.files.update({'../../escape.sh': 'touch pwned'}) }}",
    "files-update-absolute": "{{ plan.launch.files.update({ABS: 'touch pwned'}) }}",
    "files-setdefault": "{{ plan.launch.files.setdefault('../escape-bashrc', 'touch pwned') }}",
    "templated-update": "{{ plan.launch.templated.update({'../escape.j2': 'job.sbatch.j2'}) }}",
    "files-pop": "{{ plan.launch.files.pop('ds_config.json', '') }}",
    "ctx-list-append": "{{ srun_opts.append('--task-prolog=/tmp/pwned') }}",
    "site-dict-update": "{{ plan.basis.site.scheduler.sbatch.update({'comment': 'pwned'}) }}",
    "set-then-mutate": "{% set f = plan.launch.files %}{{ f.clear() }}",
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
@pytest.mark.parametrize("command", ["render", "dry-run"])
def test_template_cannot_change_what_it_is_handed(ck, tmp_path: Path, name: str, command: str) -> None:
    text = "#!/bin/bash\n" + MUTATIONS[name].replace("ABS", repr(str(tmp_path / "escape-abs"))) + "\n"
    site = site_with_template(tmp_path, text)
    if command == "render":
        result = ck("render", "--site", str(site), "--out", str(tmp_path / "run"), "--", "python", "t.py",
                    cwd=tmp_path)
    else:
        result = dry_run(ck, tmp_path, site)
    assert_one_line_error(result, 2, "templates: template error", "unsafe")
    assert not (tmp_path / "run").exists()
    assert not _escapes(tmp_path)


def test_a_template_reading_the_artifact_map_still_renders(ck, tmp_path: Path) -> None:
    text = ("#!/bin/bash\n# artifacts: {{ plan.launch.files | list | join(',') }} "
            "{{ plan.launch.files.copy() | length }}\n")
    result = dry_run(ck, tmp_path, site_with_template(tmp_path, text))
    assert result.code == 0, result.err
    assert result.out.startswith("#!/bin/bash\n# artifacts: ")


@pytest.mark.parametrize("name", ["../escape", "../../escape", "ABS", "a/../../escape", "./x", "a//b",
                                  "", ".", "..", "logs/escape", ".clusterkit-staging/x", "a\\..\\escape",
                                  "bad\nname", "x" * 256])
def test_run_dir_writer_refuses_names_outside_it(tmp_path: Path, name: str) -> None:
    run = tmp_path / "deep" / "run"
    name = str(tmp_path / "escape-abs") if name == "ABS" else name
    with pytest.raises(RunDirError, match="not a plain relative path inside the run directory"):
        write_run_dir(run, {"job.sbatch": "#!/bin/bash\n", name: "touch pwned\n"})
    assert not run.exists() and not _escapes(tmp_path)


def test_run_dir_writer_takes_plain_names_and_subfolders(tmp_path: Path) -> None:
    run = write_run_dir(tmp_path / "run", {"job.sbatch": "#!/bin/bash\n", "tasks/0/hostfile": "n1\n", ".env": "x"})
    assert (run / "tasks" / "0" / "hostfile").read_text() == "n1\n" and (run / ".env").read_text() == "x"
    assert sorted(p.name for p in run.iterdir()) == [".env", "job.sbatch", "logs", "tasks"]


# The trust check covers every file and folder under the template directory.
@pytest.mark.parametrize("where,mode,needle", [
    ("tpl/parts", 0o777, "is writable by others (mode 0777)"),
    ("tpl/parts", 0o775, "is writable by its group (mode 0775)"),
    ("tpl/parts/body.j2", 0o666, "is writable by others (mode 0666)"),
    ("tpl/parts/deeper", 0o757, "is writable by others (mode 0757)"),
    ("tpl/parts/deeper/x.j2", 0o646, "is writable by others (mode 0646)"),
])
def test_template_trust_covers_subdirectories(ck, tmp_path: Path, where: str, mode: int, needle: str) -> None:
    site = site_with_template(tmp_path, '#!/bin/bash\n{% include "parts/body.j2" %}\n')
    tdir = site.parent / "tpl"
    (tdir / "parts" / "deeper").mkdir(parents=True)
    for d in (tdir / "parts", tdir / "parts" / "deeper"):
        os.chmod(d, 0o755)
    for f in (tdir / "parts" / "body.j2", tdir / "parts" / "deeper" / "x.j2"):
        f.write_text("echo part\n")
        os.chmod(f, 0o644)
    assert dry_run(ck, tmp_path, site).code == 0      # all of it yours alone: used
    shutil.rmtree(tmp_path / "run")
    os.chmod(site.parent / where, mode)
    result = dry_run(ck, tmp_path, site)
    assert_one_line_error(result, 2, "templates: template override refused", needle)
    assert not (tmp_path / "run").exists()


def test_template_trust_follows_links_out_of_the_directory(ck, tmp_path: Path) -> None:
    site = site_with_template(tmp_path, '#!/bin/bash\n{% include "parts/body.j2" %}\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o777)
    os.chmod(elsewhere, 0o777)
    (elsewhere / "body.j2").write_text("echo planted\n")
    os.chmod(elsewhere / "body.j2", 0o644)
    (site.parent / "tpl" / "parts").symlink_to(elsewhere)
    assert_one_line_error(dry_run(ck, tmp_path, site), 2, "template override refused", "parts",
                          "is writable by others (mode 0777)")
    os.chmod(elsewhere, 0o755)
    os.chmod(elsewhere / "body.j2", 0o666)   # the file the link leads to
    assert_one_line_error(dry_run(ck, tmp_path, site), 2, "template override refused", "body.j2",
                          "is writable by others (mode 0666)")


def test_template_link_loop_is_bounded(ck, tmp_path: Path) -> None:
    site = site_with_template(tmp_path, "#!/bin/bash\n")
    (site.parent / "tpl" / "loop").symlink_to(site.parent / "tpl")
    assert_one_line_error(dry_run(ck, tmp_path, site), 2, "template override refused")


# One trust rule for whatever in a site file runs code.
def _site(tmp_path: Path, job: str, mode: int = 0o644) -> Path:
    conf = tmp_path / "conf"
    conf.mkdir(exist_ok=True)
    os.chmod(conf, 0o755)
    site = conf / "site.yaml"
    site.write_text((REPO / "site_configs" / "testbed.yaml").read_text().replace("name: testbed", "name: tsite")
                    + f"job:\n{job}")
    os.chmod(site, mode)
    return site


def _render(ck, tmp_path: Path, site: Path):  # type: ignore[no-untyped-def]
    return ck("render", "--site", str(site), "--out", str(tmp_path / "run"), "--", "python", "t.py", cwd=tmp_path)


CODE = {
    "venv": ("  venv: /shared/venvs/planted\n", "job.venv", "a venv's activate script runs"),
    "conda": ("  conda: planted\n", "job.conda", "conda environment's activation scripts run"),
    "task-prolog": ("  srun_args: ['--task-prolog=/tmp/pwned.sh']\n", "job.srun_args", "--task-prolog"),
    "task-epilog-two-words": ("  srun_args: ['--label', '--task-epilog', '/tmp/pwned.sh']\n", "job.srun_args",
                              "--task-epilog"),
    "prolog": ("  srun_args: ['--prolog=/tmp/pwned.sh']\n", "job.srun_args", "srun runs"),
    "epilog": ("  srun_args: ['--epilog=/tmp/pwned.sh']\n", "job.srun_args", "srun runs"),
    "abbreviated": ("  srun_args: ['--task-pro=/tmp/pwned.sh']\n", "job.srun_args", "srun runs"),
    "underscored": ("  srun_args: ['--task_prolog=/tmp/pwned.sh']\n", "job.srun_args", "srun runs"),
    "setup": ("  setup: ['touch pwned']\n", "job.setup", "setup commands run"),
    "teardown": ("  teardown: ['touch pwned']\n", "job.teardown", "teardown commands run"),
    "stage-teardown": ("  env: {A: b}\nstages:\n  single-node:\n    job: {teardown: ['touch pwned']}\n",
                       "stages.single-node.job.teardown", "teardown commands run"),
    "launcher-args": ("  launcher_args: ['--launcher_args', '--mca plm_rsh_agent /tmp/pwned.sh']\n",
                      "job.launcher_args", "on to pdsh or mpirun"),
    "launcher-args-abbreviated": ("  launcher_args: ['--launcher_arg=-x LD_PRELOAD=/tmp/p.so']\n",
                                  "job.launcher_args", "on to pdsh or mpirun"),
    "mpi-args": ("  launcher_args: ['--mpi-args=--mca plm_rsh_agent /tmp/pwned.sh']\n", "job.launcher_args",
                 "which run programs"),
    "site-launcher": ("  env: {A: b}\nlaunchers:\n  ctrun:\n    argv: [/tmp/pwned.sh]\n", "launchers.ctrun",
                      "the site's own launcher runs its argv's program"),
    "stage-venv": ("  env: {A: b}\nstages:\n  multi-node:\n    job: {venv: /planted}\n", "stages.multi-node.job.venv",
                   "activate script"),
}


@pytest.mark.parametrize("name", sorted(CODE))
@pytest.mark.parametrize("mode,needle", [(0o666, "is writable by others (mode 0666)"),
                                         (0o664, "is writable by its group (mode 0664)")])
def test_site_code_only_from_files_no_one_else_can_write(ck, tmp_path: Path, name: str, mode: int,
                                                         needle: str) -> None:
    job, key, why = CODE[name]
    site = _site(tmp_path, job, mode)
    result = _render(ck, tmp_path, site)
    assert_one_line_error(result, 2, "site.yaml:", key, needle, why,
                          "only from site files that no other user can write")
    assert not (tmp_path / "run").exists()


def test_site_code_from_a_folder_others_can_write_is_refused(ck, tmp_path: Path) -> None:
    site = _site(tmp_path, CODE["venv"][0])
    os.chmod(site.parent, 0o777)
    assert_one_line_error(_render(ck, tmp_path, site), 2, "job.venv", "is writable by others (mode 0777)")


@pytest.mark.parametrize("job", ["  srun_args: ['--label', '--comment=task-prolog']\n", "  env: {HF_HOME: /x}\n",
                                 "  launcher_args: ['--max-restarts=1']\n", "  launcher_args: ['--launcher', 'pdsh']\n",
                                 "  launcher_args: ['--mpi']\n"])
def test_site_data_that_runs_nothing_is_used_from_any_file(ck, tmp_path: Path, job: str) -> None:
    site = _site(tmp_path, job, 0o666)
    result = _render(ck, tmp_path, site)
    assert result.code == 0, result.err


@pytest.mark.parametrize("name", ["venv", "task-prolog", "conda"])
def test_site_code_from_your_own_file_is_used(ck, tmp_path: Path, name: str) -> None:
    result = _render(ck, tmp_path, _site(tmp_path, CODE[name][0]))
    assert result.code == 0, result.err


# Round three's own cases: the image every rank runs in and a module file named by its path are
# code too; and a folder above the site file (or the template directory) that another user could
# rename away and refill is as good as writing the file.
SOFTWARE = {
    "container": ("  env: {A: b}\nsoftware:\n  container: {runtime: pyxis, image: /shared/planted.sqsh}\n",
                  "software.container", "every rank runs in the container image"),
    "module-path": ("  env: {A: b}\nsoftware:\n  modules: [cuda/12.4, /shared/planted/mod]\n",
                    "software.modules.1", "a module file given as a path runs"),
    "module-relative": ("  env: {A: b}\nsoftware:\n  modules: [./planted]\n", "software.modules.0",
                        "a module file given as a path runs"),
}


@pytest.mark.parametrize("name", sorted(SOFTWARE))
def test_the_image_and_a_module_file_follow_the_trust_rule(ck, tmp_path: Path, name: str) -> None:
    job, key, why = SOFTWARE[name]
    assert_one_line_error(_render(ck, tmp_path, _site(tmp_path, job, 0o666)), 2, "site.yaml:", key,
                          "is writable by others (mode 0666)", why)
    assert not (tmp_path / "run").exists()
    assert _render(ck, tmp_path, _site(tmp_path, job, 0o644)).code == 0     # your own file: used


def test_a_module_by_name_is_data_from_any_file(ck, tmp_path: Path) -> None:
    site = _site(tmp_path, "  env: {A: b}\nsoftware:\n  modules: [cuda/12.4, nccl]\n", 0o666)
    assert _render(ck, tmp_path, site).code == 0


@pytest.mark.parametrize("mode,ok", [(0o777, False), (0o775, False), (0o1777, True), (0o755, True)])
def test_site_code_under_a_folder_others_could_replace(ck, tmp_path: Path, mode: int, ok: bool) -> None:
    (tmp_path / "above").mkdir()
    site = _site(tmp_path / "above", CODE["venv"][0])
    os.chmod(tmp_path / "above", mode)
    result = _render(ck, tmp_path, site)
    if ok:
        assert result.code == 0, result.err
    else:
        assert_one_line_error(result, 2, "job.venv", f"{tmp_path / 'above'} is writable by",
                              f"without the sticky bit (mode {mode:04o})")


def test_a_template_directory_under_a_folder_others_could_replace(ck, tmp_path: Path) -> None:
    site = site_with_template(tmp_path, "#!/bin/bash\necho hi\n")
    site.write_text(site.read_text().replace("templates: ./tpl", "templates: ../shared/tpl"))
    (tmp_path / "shared").mkdir(mode=0o755)
    (tmp_path / "conf" / "tpl").rename(tmp_path / "shared" / "tpl")
    os.chmod(tmp_path / "shared", 0o757)
    result = dry_run(ck, tmp_path, site)
    assert_one_line_error(result, 2, "templates: template override refused", f"{tmp_path / 'shared'} is writable by "
                          "others without the sticky bit")
    os.chmod(tmp_path / "shared", 0o755)
    assert dry_run(ck, tmp_path, site).code == 0
