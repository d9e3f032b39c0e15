"""The site's ``network.topology`` in the job script as bash runs it (tests/jobscript harness):
the job's Python reads ``scontrol show topology`` (a stand-in printing a real capture) on the
batch host and the hosts of one leaf switch come together in CK_NODELIST and the hostfile, the
first host (the head) first; without an answer from Slurm the job keeps Slurm's order."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import REPO
from tests.jobscript.conftest import site_file

RECORD = 'printf "%s %s\\n" "$CK_NODELIST" "$CK_HEAD" > "$JS_DIR/hosts"; cp "$CK_HOSTFILE" "$JS_DIR/hostfile"'
CAPTURE = REPO / "tests" / "data" / "captures" / "topology" / "tree-22.05.8-three-levels.txt"


def _site(tmp_path: Path) -> str:
    return str(site_file(tmp_path, network__topology={"plugin": "tree", "max_switches": 2}))


def test_the_hosts_of_one_switch_come_together_head_first(job, tmp_path: Path) -> None:
    # gpu001 and gpu010 are under ib-leaf01, gpu004 under ib-leaf02 (the capture's topology.conf)
    j = job("--setup", RECORD, nodes=3, site=_site(tmp_path), launcher="deepspeed", JS_TOPOLOGY=str(CAPTURE),
            SLURM_JOB_NODELIST="gpu[001,004,010]").start()
    j.await_ranks()
    assert (j.work / "hosts").read_text().split() == ["gpu001,gpu010,gpu004", "gpu001"]
    assert [line.split()[0] for line in (j.work / "hostfile").read_text().splitlines()] == \
        ["gpu001", "gpu010", "gpu004"]
    assert "hosts ordered by switch or block (ib-leaf01: 2, ib-leaf02: 1)" in j.log()
    j.kill()


def test_without_a_topology_from_slurm_the_job_keeps_slurms_order(job, tmp_path: Path) -> None:
    j = job("--setup", RECORD, nodes=3, site=_site(tmp_path), launcher="deepspeed",
            SLURM_JOB_NODELIST="gpu[001,004,010]").start()
    j.await_ranks()
    assert (j.work / "hosts").read_text().split() == ["gpu001,gpu004,gpu010", "gpu001"]
    assert "hosts not ordered by switch: scontrol show topology lists no switch or block" in j.log()
    j.kill()
