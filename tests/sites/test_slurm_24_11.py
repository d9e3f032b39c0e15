"""What Slurm 24.11.5 prints, captured on the test cluster (tests/data/sites/slurm-24.11, see its
README), read by the same parsers as the 22.05 captures: scontrol's node, partition, config and
job records, ``sites init`` through its ``run`` seam, and the squeue/sacct tables ``status``
reads.  Values below were read off the captured files by hand."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from clusterkit import slurmtext
from clusterkit.scheduler.slurm.tables import sacct_statuses, scontrol_statuses, squeue_statuses
from clusterkit.sites import admin
from clusterkit.sites import slurm_text as T
from clusterkit.vocab import JobState

DATA = Path(__file__).resolve().parents[1] / "data" / "sites" / "slurm-24.11"
OLD = DATA.parent / "slurm-22.05"


def _read(name: str) -> str:
    return (DATA / name).read_text()


def test_config_names_the_cluster_and_version() -> None:
    cfg = T.parse_config(_read("show-config.txt"))
    assert cfg.cluster_name == "testbed" and cfg.version == "24.11.5"
    assert cfg.values["SelectType"] == "select/cons_tres" and cfg.values["PreemptType"] == "preempt/partition_prio"


def test_nodes_one_line_with_the_fields_24_11_added_and_dropped() -> None:
    text = _read("show-node-o.txt")
    nodes = T.parse_nodes(text)
    assert [n.name for n in nodes.nodes] == ["node1", "node2", "node3", "node4"] and nodes.unparsed == ()
    n1 = nodes.nodes[0]
    assert (n1.cpus, n1.real_memory_mb, n1.gpus, n1.gpu_types, n1.state) == (8, 64000, 8, (), "IDLE")
    assert n1.partitions == ("debug", "high") and n1.usable
    assert n1.cfg_tres == {"cpu": "8", "mem": "62.50G", "billing": "8"}
    kv = slurmtext.split_record(text.splitlines()[0])
    # new since 22.05: ResumeAfterTime; gone: CapWatts, ExtSensors*; the OS value still holds spaces
    assert kv["ResumeAfterTime"] == "None" and "CapWatts" not in kv and "ExtSensorsJoules" not in kv
    assert kv["OS"] == "Linux 6.18.44-fc-v669 #1 SMP PREEMPT_DYNAMIC @0" and kv["Version"] == "24.11.5"
    assert "ResumeAfterTime" not in slurmtext.split_record((OLD / "show-node-o.txt").read_text().splitlines()[0])


def test_multi_line_node_equals_one_line_node() -> None:
    multi = T.parse_nodes(_read("show-node-multiline.txt")).nodes[0]
    one = T.parse_nodes(_read("show-node-o.txt")).nodes[0]
    assert (multi.name, multi.cpus, multi.real_memory_mb, multi.gres, multi.state, multi.partitions) == \
        (one.name, one.cpus, one.real_memory_mb, one.gres, one.state, one.partitions)


def test_down_and_drained_nodes_keep_state_and_reason() -> None:
    by = T.parse_nodes(_read("show-node-o-down-drain.txt")).by_name()
    assert (by["node2"].state, by["node2"].reason, by["node2"].usable) == ("DOWN", "test", False)
    assert (by["node3"].state, by["node3"].reason, by["node3"].usable) == ("IDLE+DRAIN", "bad gpu", False)
    assert by["node1"].usable and by["node4"].usable


def test_partitions_one_line_and_multi_line_agree() -> None:
    one = T.parse_partitions(_read("show-partition-o.txt"))
    multi = T.parse_partitions(_read("show-partition-multiline.txt"))
    assert one.partitions == multi.partitions and one.unparsed == () and one.names == ["debug", "high"]
    debug, high = one.get("debug"), one.get("high")
    assert debug is not None and high is not None
    assert (debug.nodes, debug.default, debug.state, debug.max_time_s) == ("node[1-4]", True, "UP", math.inf)
    assert (high.nodes, high.default) == ("node[1-4]", False)
    kv = slurmtext.split_record(_read("show-partition-o.txt").splitlines()[0])
    assert (kv["ExclusiveTopo"], kv["NodeSets"], kv["GraceTime"], kv["PreemptMode"]) == ("NO", "ALL", "10", "REQUEUE")


def test_sites_init_drafts_the_same_site_as_from_22_05() -> None:
    files = {("scontrol", "show", "config"): "show-config.txt",
             ("scontrol", "show", "partition", "-o"): "show-partition-o.txt",
             ("scontrol", "show", "node", "-o"): "show-node-o.txt"}

    def run(argv: Sequence[str]) -> str:
        return _read(files[tuple(argv)])

    text = admin.init_site("tb", partition="debug", nodes=None, probe_with=None, run=run).text
    for line in ('partition: "debug"', 'nodelist: "node[1-4]"', "gpus_per_node: 8", "cpus_per_node: 8",
                 'cluster: "testbed"', "mem_gb: 62.5"):
        assert line in text, (line, text)


def test_job_tables_status_reads() -> None:
    # jobs 7001 ok (-N4), 7002 `exit 3`, 7003 --begin=now+3600, 7004 cancelled while running,
    # 7005 requeued by `scontrol requeue` (held back by BeginTime, Restarts=1); 7000 the warm-up job
    sq = squeue_statuses(_read("squeue.txt"))
    assert {k: (v.state, v.reason, v.nodes) for k, v in sq.items()} == {
        "7001": (JobState.COMPLETED, None, "node[1-4]"), "7002": (JobState.FAILED, "NonZeroExitCode", "node1"),
        "7003": (JobState.PENDING, "BeginTime", None), "7004": (JobState.CANCELLED, None, "node1"),
        "7005": (JobState.PENDING, "BeginTime", None)}
    acct = sacct_statuses(_read("sacct.txt"))
    assert {k: (v.state, v.exit_code, v.signal, v.restarts) for k, v in acct.items()} == {
        "7001": (JobState.COMPLETED, 0, None, 0), "7002": (JobState.FAILED, 3, None, 0),
        "7003": (JobState.PENDING, 0, None, 0),
        # sacct prints a job cancelled while it ran as `CANCELLED by 0` with ExitCode 0:0 (22.05.8 the same);
        # scontrol says 0:15
        "7004": (JobState.CANCELLED, 0, None, 0),
        "7005": (JobState.PENDING, 0, None, 1)}          # -D: the REQUEUED row counts one restart
    ctl = scontrol_statuses(_read("show-job-o.txt"))
    assert set(ctl) == {"7000", "7001", "7002", "7003", "7004", "7005"}
    assert (ctl["7002"].state, ctl["7002"].exit_code, ctl["7002"].reason) == (JobState.FAILED, 3, "NonZeroExitCode")
    assert (ctl["7004"].state, ctl["7004"].exit_code, ctl["7004"].signal) == (JobState.CANCELLED, None, 15)
    assert (ctl["7005"].state, ctl["7005"].restarts, ctl["7005"].nodes) == (JobState.PENDING, 1, None)
    assert (ctl["7001"].nodes, ctl["7003"].nodes) == ("node[1-4]", None)
