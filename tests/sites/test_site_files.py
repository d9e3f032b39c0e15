"""``sites validate`` on partial configs (``_*.yaml``), errors before the ok lines; shadowed built-in sites."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, assert_one_line_error

SHIPPED = sorted((REPO / "site_configs").glob("*.yaml"))


def test_the_shipped_site_configs_validate_partial_included(ck) -> None:  # type: ignore[no-untyped-def]
    assert any(p.name.startswith("_") for p in SHIPPED)
    res = ck("sites", "validate", *map(str, SHIPPED))
    assert res.code == 0, res.err
    assert f"{REPO / 'site_configs' / '_slurm-defaults.yaml'}: ok (partial config)" in res.out.splitlines()
    assert len(res.out.splitlines()) == len(SHIPPED) and res.err == ""


def test_a_partial_is_checked_for_what_it_sets(ck, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "_org.yaml"
    bad.write_text("scheduler:\n  kind: slurmm\n  bogus: 1\nnodes:\n  gpus_per_node: 8\n")
    res = ck("sites", "validate", str(bad))
    assert_one_line_error(res, 2, "_org.yaml:2: scheduler.kind: Input should be 'slurm' or 'local'; got 'slurmm'",
                          "_org.yaml:3: scheduler.bogus: unknown key 'bogus'")
    assert len(res.lines) == 2 and "required key is missing" not in res.err  # name, nodelist: the child's
    doc = json.loads(ck("sites", "validate", "--json", str(bad)).out)
    assert doc == [{"schema_version": 2, "path": str(bad), "valid": False, "partial": True, "errors": doc[0]["errors"]}]
    assert len(doc[0]["errors"]) == 2


def test_a_local_site_may_not_set_slurm_keys_and_names_one_host(ck, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    site = tmp_path / "laptop.yaml"
    site.write_text("name: laptop\nnodes:\n  nodelist: here\n  gpus_per_node: 1\n"
                    "scheduler:\n  kind: local\n  time: '2:00:00'\n  partition: gpu\n  sbatch: {mem: 1G}\n")
    res = ck("sites", "validate", str(site))
    assert_one_line_error(res, 2, "laptop.yaml:8: scheduler.partition: unknown key 'partition'; valid keys: grace_s, "
                          "kind, max_restarts, preempt_signal_s, time (a key of kind slurm, not of kind local)",
                          "laptop.yaml:9: scheduler.sbatch: unknown key 'sbatch'")
    site.write_text("name: laptop\nnodes:\n  nodelist: here\n  gpus_per_node: 1\nscheduler:\n  kind: local\n")
    assert ck("sites", "validate", str(site)).code == 0
    # the same keys are Slurm's own where the section names no kind (slurm, the default)
    site.write_text("name: c\nnodes:\n  nodelist: n[1-2]\n  gpus_per_node: 1\nscheduler:\n  partition: gpu\n")
    assert ck("sites", "validate", str(site)).code == 0
    site.write_text("name: c\nnodes:\n  nodelist: n[1-2]\n  gpus_per_node: 1\nscheduler:\n  kind: local\n")
    assert_one_line_error(ck("sites", "validate", str(site)), 2,
                          "a local site runs on this machine: nodes.nodelist must name exactly one host")
    # a stage's Slurm keys too: the line of the key itself
    site.write_text("name: laptop\nnodes:\n  nodelist: here\n  gpus_per_node: 1\nscheduler:\n  kind: local\n"
                    "stages:\n  multi-node:\n    time: '1:00:00'\n    spares: 1\n")
    assert_one_line_error(ck("sites", "validate", str(site)), 2,
                          "laptop.yaml:10: stages.multi-node.spares: a local site does not use it "
                          "(a key of kind slurm, not of kind local)")
    site.write_text(site.read_text().replace("kind: local", "kind: slurm"))
    assert ck("sites", "validate", str(site)).code == 0


def test_a_whole_site_still_needs_its_required_keys(ck, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    site = tmp_path / "org.yaml"
    site.write_text("scheduler:\n  kind: slurm\n")
    assert_one_line_error(ck("sites", "validate", str(site)), 2, "org.yaml:1: name: required key is missing")


def test_errors_are_printed_before_the_ok_lines(ck, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nnodes:\n  cpus_per_node: -1\n")
    proc = subprocess.run(ck.argv("sites", "validate", *map(str, SHIPPED), str(bad)), cwd=REPO,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 2, proc.stdout
    errors = [i for i, line in enumerate(lines) if line.startswith("clusterkit: error:")]
    oks = [i for i, line in enumerate(lines) if ": ok (" in line]
    assert errors and len(oks) == len(SHIPPED) and max(errors) < min(oks), lines


def test_a_built_in_site_shadowed_by_a_local_one_is_listed_once(ck, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    local = tmp_path / "site_configs"
    local.mkdir()
    (local / "testbed.yaml").write_text((REPO / "site_configs" / "testbed.yaml").read_text())
    table = ck("sites", "list", cwd=tmp_path)
    assert table.code == 0, table.err
    rows = [line for line in table.out.splitlines() if "testbed" in line]
    assert len(rows) == 1 and "./site_configs" in rows[0] and "shadowed" not in rows[0], table.out
    assert sum("ib-h100" in line for line in table.out.splitlines()) == 1  # not shadowed: still listed
    every = json.loads(ck("sites", "list", "--json", cwd=tmp_path).out)
    assert [(r["from"], r["shadowed"]) for r in every if r["name"] == "testbed"] == [
        ("./site_configs", False), ("built-in", True)]


def test_drift_all_does_not_report_a_shadowed_built_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from clusterkit.sites.admin import DriftRun, _targets

    local = tmp_path / "site_configs"
    local.mkdir()
    (local / "testbed.yaml").write_text((REPO / "site_configs" / "testbed.yaml").read_text())
    monkeypatch.chdir(tmp_path)
    result = DriftRun()
    targets = [label for label, _ in _targets([], True, result)]
    assert [t for t in targets if t.startswith("testbed ")] == [f"testbed ({local / 'testbed.yaml'})"]
    assert not any("testbed" in site for site, _ in result.skipped), result.skipped
