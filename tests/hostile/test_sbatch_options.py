"""``--sbatch`` and a site's ``scheduler.sbatch`` against the options clusterkit writes, read the way
sbatch reads them: by Slurm's own option table, aliases (``--tasks-per-node`` is
``--ntasks-per-node``) and every abbreviation getopt_long accepts included.  Written after
clusterkit's own #SBATCH lines, any of them would win."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from clusterkit.config.sbatch_options import ALIASES, SBATCH_LONG_OPTIONS, meanings
from clusterkit.config.schema import OWNED_SBATCH
from tests.conftest import assert_one_line_error

SITE = "name: hs\nnodes: {nodelist: 'n[1-2]', gpus_per_node: 2}\nstorage: [{path: /, type: nfs}]\n"


def _render(ck, tmp_path: Path, *args: str, site: str | Path = "testbed"):  # type: ignore[no-untyped-def]
    return ck("render", "--site", str(site), "--out", str(tmp_path / "run"), *args, "--", "python", "t.py",
              cwd=tmp_path)


OWNED = {
    "tasks-per-node=8": "--ntasks-per-node",      # Slurm's alias
    "tasks-per-node": "--ntasks-per-node",
    "tasks=8": "--ntasks-per-node",               # an abbreviation of the alias
    "tasks-per=8": "--ntasks-per-node",
    "task=8": "--ntasks-per-node",
    "ntasks-per-n=1": "--ntasks-per-node",
    "ntasks-per-tres=1": "--ntasks-per-tres",
    "tres-per-task=cpu=4": "--tres-per-task",
    "gpus-per-t=1": "--gpus-per-task",
    "gpus-per-s=1": "--gpus-per-socket",
    "ti=1:00": "--time",
    "outp=x": "--output",
    "er=x": "--error",
    "partit=debug": "--partition",
    "dep=afterok:1": "--dependency",
    "arr=1-3": "--array",
    "expo=ALL": "--export",
    "cpus-per-t=4": "--cpus-per-task",
    "kill-on=yes": "--kill-on-invalid-dep",
    "no-req": "--no-requeue",
    "get-user": "--get-user-env",
    "comment=x": "--comment",        # the run tag (docs/jobs.md, What a run cost)
}


@pytest.mark.parametrize("option", sorted(OWNED))
def test_owned_option_by_alias_or_abbreviation_is_refused(ck, tmp_path: Path, option: str) -> None:
    result = _render(ck, tmp_path, "--sbatch", option)
    assert_one_line_error(result, 2, "--sbatch", f"sets {OWNED[option]}, which clusterkit writes itself")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("key", ["tasks-per-node", "tasks", "ntasks-per-tres", "gpus-per-task"])
def test_owned_option_in_the_site_file_is_refused_at_its_line(ck, tmp_path: Path, key: str) -> None:
    site = tmp_path / "site.yaml"
    site.write_text(SITE + f"scheduler:\n  sbatch: {{{key}: 8}}\n")
    result = _render(ck, tmp_path, site=site)
    assert_one_line_error(result, 2, "site.yaml:5", f"sbatch option '{key}' sets --")


@pytest.mark.parametrize("option", ["constraint=a100", "exclusive", "mem=0", "time-min=1:00:00", "wait-all-nodes=1",
                                    "mail-type=END", "gres=nvme:1", "container-image=spank-plugin-opt",
                                    "threads-per-core=1", "exclusive=user", "mem-per-gpu=10G"])
def test_options_clusterkit_does_not_write_pass(ck, tmp_path: Path, option: str) -> None:
    result = _render(ck, tmp_path, "--sbatch", option)
    assert result.code == 0, result.err
    key, _, value = option.partition("=")
    assert re.search(rf"^#SBATCH --{re.escape(key)}{'=' + re.escape(value) if value else ''}$",
                     (tmp_path / "run" / "job.sbatch").read_text(), re.M)


def test_the_table_knows_every_owned_option() -> None:
    """Each option clusterkit owns is in sbatch's table (a typo would own nothing), aliases point
    into it, and every alias of an owned option is owned."""
    assert set(OWNED_SBATCH) <= SBATCH_LONG_OPTIONS
    assert set(ALIASES) <= SBATCH_LONG_OPTIONS and set(ALIASES.values()) <= SBATCH_LONG_OPTIONS
    assert meanings("tasks-per-node") == ["ntasks-per-node"] and meanings("tasks") == ["ntasks-per-node"]
    assert meanings("exclusive") == ["exclusive"]          # an exact name wins over longer ones
    assert meanings("spank-only") == ["spank-only"]
