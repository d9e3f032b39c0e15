"""Site template overrides are code from a shared file: sandboxed, bounded, trusted only from
files no other user can write, and named wherever they are in use."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.conftest import REPO, assert_one_line_error


def site_with_template(tmp_path: Path, text: str, name: str = "job.sbatch.j2") -> Path:
    home = tmp_path / "conf"
    tdir = home / "tpl"
    tdir.mkdir(parents=True)
    os.chmod(home, 0o755)
    os.chmod(tdir, 0o755)
    (tdir / name).write_text(text)
    os.chmod(tdir / name, 0o644)
    site = home / "tsite.yaml"
    site.write_text((REPO / "site_configs" / "testbed.yaml").read_text().replace("name: testbed", "name: tsite")
                    + "templates: ./tpl\n")
    os.chmod(site, 0o644)
    return site


def dry_run(ck, tmp_path: Path, site: Path):  # type: ignore[no-untyped-def]
    return ck("submit", "--dry-run", "--no-snapshot",
              "--site", str(site), "--out", str(tmp_path / "run"), "--", "python", "t.py",
              cwd=tmp_path)


HOSTILE_TEMPLATES = {
    # the classic escapes from a template to Python: all refused by the sandbox
    "mro-subclasses": ("#!/bin/bash\n{{ ''.__class__.__mro__[1].__subclasses__() }}\n", "is unsafe"),
    "globals-os-system": ("#!/bin/bash\n{{ cycler.__init__.__globals__.os.system('touch pwned') }}\n", "unsafe"),
    "plan-internals": ("#!/bin/bash\n{{ plan.to_dict.__globals__['os'].system('touch pwned') }}\n", "unsafe"),
    "syntax-error": ("#!/bin/bash\n\n{% if %}\n", "job.sbatch.j2:3: templates: template syntax error"),
    "undefined": ("#!/bin/bash\n{{ plan.job_name }}\n{{ no_such_thing }}\n",
                  "job.sbatch.j2:3: templates: template error: 'no_such_thing' is undefined"),
    "endless-loop": ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                     "rendering took longer than 2 s"),
    "huge-string": ("{{ 'x' * 100000000 }}", "output larger than 1048576 bytes"),
    "huge-output": ("{% for i in range(99999) %}{{ 'y' * 99 }}{% endfor %}", "output larger than 1048576 bytes"),
    "huge-power": ("{{ 2 ** 100000000 }}", "exponent 100000000 is too large"),
    "division": ("{{ 1 // 0 }}", "ZeroDivisionError"),
    "include-outside": ("{% include '../../../../etc/passwd' %}", "templates"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_TEMPLATES))
def test_hostile_template_is_a_one_line_error(ck, tmp_path: Path, name: str) -> None:
    text, needle = HOSTILE_TEMPLATES[name]
    result = dry_run(ck, tmp_path, site_with_template(tmp_path, text))
    assert_one_line_error(result, 2, needle)
    assert not (tmp_path / "run").exists()
    assert not list(tmp_path.rglob("pwned*"))


@pytest.mark.parametrize("where,mode,needle", [
    ("tpl", 0o775, "is writable by its group (mode 0775)"),
    ("tpl", 0o757, "is writable by others (mode 0757)"),
    ("tpl/job.sbatch.j2", 0o666, "is writable by others (mode 0666)"),
    ("tsite.yaml", 0o664, "is writable by its group (mode 0664)"),
    (".", 0o777, "is writable by others (mode 0777)"),
])
def test_template_override_only_from_files_others_cannot_write(ck, tmp_path: Path, where: str, mode: int,
                                                                 needle: str) -> None:
    site = site_with_template(tmp_path, "#!/bin/bash\necho site template\n")
    os.chmod(site.parent / where, mode)
    result = dry_run(ck, tmp_path, site)
    assert_one_line_error(result, 2, "templates: template override refused", needle)
    assert_one_line_error(ck("sites", "show", str(site), cwd=tmp_path), 2, needle)


def test_template_override_owned_by_another_user_is_refused(ck, tmp_path: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("changing a file's owner needs root")
    site = site_with_template(tmp_path, "#!/bin/bash\n")
    os.chown(site.parent / "tpl" / "job.sbatch.j2", 65534, 65534)
    assert_one_line_error(dry_run(ck, tmp_path, site), 2, "is owned by uid 65534, not by you or root")


def test_template_override_in_use_is_named(ck, tmp_path: Path) -> None:
    site = site_with_template(tmp_path, "#!/bin/bash\n# own template for {{ plan.job_name | shell_quote }}\n")
    result = dry_run(ck, tmp_path, site)
    assert result.code == 0, result.err
    assert result.out == "#!/bin/bash\n# own template for ck-t\n"
    assert f"site tsite renders its own templates from {site.parent / 'tpl'}: job.sbatch.j2" in result.err
    shown = ck("sites", "show", str(site), cwd=tmp_path)
    assert shown.code == 0 and "renders its own templates from" in shown.out and "job.sbatch.j2" in shown.out
    assert stat.S_IMODE((site.parent / "tpl").stat().st_mode) == 0o755


def test_builtin_templates_say_nothing_about_overrides(ck, tmp_path: Path) -> None:
    result = ck("submit", "--dry-run", "--no-snapshot",
                "--site", "testbed", "--out", str(tmp_path / "run"), "--", "python", "t.py")
    assert result.code == 0, result.err
    assert "renders its own templates" not in result.err and result.out.startswith("#!/bin/bash")


# The job script is one entry template and one include per concern: a site replaces any one.
INCLUDE = "job-preflight.sbatch.j2"


def test_one_include_overridden_the_rest_built_in(ck, tmp_path: Path) -> None:
    site = site_with_template(tmp_path, "\n# ---- site {{ plan.site }}: its own preflight step\nsite-check || "
                                        "ck_fail 1 'site-check failed'\n", name=INCLUDE)
    result = dry_run(ck, tmp_path, site)
    assert result.code == 0, result.err
    assert "# ---- site tsite: its own preflight step\nsite-check || ck_fail 1 'site-check failed'\n" in result.out
    builtin = ck("submit", "--dry-run", "--no-snapshot",
                 "--site", "testbed", "--out", str(tmp_path / "run2"), "--", "python", "t.py",
                 cwd=tmp_path)
    def unmade(text: str) -> str:  # the command lines that made them differ (--site), nothing else may
        return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("# made by: "))

    shown = unmade(result.out).replace("tsite", "testbed").replace(str(tmp_path / "run"), str(tmp_path / "run2"))
    assert shown.replace(
        "\n# ---- site testbed: its own preflight step\nsite-check || ck_fail 1 'site-check failed'\n", "") == \
        unmade(builtin.out)
    assert f"renders its own templates from {site.parent / 'tpl'}: {INCLUDE}" in result.err


@pytest.mark.parametrize("name", ["endless-loop", "huge-output", "undefined", "syntax-error", "plan-internals"])
def test_hostile_include_is_bounded_like_an_entry(ck, tmp_path: Path, name: str) -> None:
    text, needle = HOSTILE_TEMPLATES[name]
    result = dry_run(ck, tmp_path, site_with_template(tmp_path, text, name=INCLUDE))
    assert_one_line_error(result, 2, needle.replace("job.sbatch.j2", INCLUDE))
    assert str(tmp_path / "conf" / "tpl") in result.err       # the site's file, or its template directory
    assert not (tmp_path / "run").exists()


def test_include_override_writable_by_others_is_refused(ck, tmp_path: Path) -> None:
    site = site_with_template(tmp_path, "# own\n", name=INCLUDE)
    os.chmod(site.parent / "tpl" / INCLUDE, 0o666)
    assert_one_line_error(dry_run(ck, tmp_path, site), 2, "templates: template override refused",
                          "is writable by others (mode 0666)")


# Folded by Jinja while it compiles (before the old clock started), or built by one filter or
# method call at run time: each is held by the budget, from compile to output.
BUDGET_TEMPLATES = {
    "folded-percent": "{{ '%0250000000d' % 1 }}",
    "folded-format-filter": "{{ '%0250000000d' | format(1) }}",
    "folded-center": "{{ 'x' | center(250000000) }}",
    "folded-indent": "{{ 'a\\nb' | indent(250000000) }}",
    "percent-star": "{{ '%*d' % (250000000, 1) }}",
    "runtime-ljust": "{% set n = 250000000 %}{{ 'x'.ljust(n) }}",
    "runtime-format-method": "{{ '{:0250000000d}'.format(1) }}",
    "runtime-replace": "{% set s = 'a' * 1000000 %}{{ s.replace('a', 'a' * 1000) }}",
    "set-folded": "{% set s = 'x' | center(250000000) %}ok",
}


@pytest.mark.parametrize("name", sorted(BUDGET_TEMPLATES))
def test_a_template_building_a_huge_value_is_held_by_the_budget(tmp_path: Path, name: str) -> None:
    """Run in its own process: a regression allocates hundreds of MB; the limit shows it."""
    import resource
    import subprocess
    import sys

    site = site_with_template(tmp_path, BUDGET_TEMPLATES[name])
    code = ("import resource, sys\n"
            "from clusterkit.cli import main\n"
            "rc = 0\n"
            "try:\n main(sys.argv[1:])\n"
            "except SystemExit as e:\n rc = e.code\n"
            "hwm = next(ln for ln in open('/proc/self/status') if ln.startswith('VmHWM:'))\n"
            "print('MAXRSS', hwm.split()[1], file=sys.stderr)\n"
            "sys.exit(rc)\n")
    p = subprocess.run([sys.executable, "-c", code, "submit", "--dry-run", "--no-snapshot",
                       "--site", str(site), "--out",
                        str(tmp_path / "run"), "--", "python", "t.py"], capture_output=True, text=True, timeout=60,
                       cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    err = [ln for ln in p.stderr.splitlines() if not ln.startswith("MAXRSS")]
    assert len(err) == 1 and "templates: template" in err[0] and "Traceback" not in p.stderr, p.stderr
    maxrss_kib = int(next(ln for ln in p.stderr.splitlines() if ln.startswith("MAXRSS")).split()[1])
    assert maxrss_kib < 400 * 1024, f"{maxrss_kib} KiB resident"
    assert not (tmp_path / "run").exists()
    del resource
