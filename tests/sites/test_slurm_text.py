"""Pure parsers of scontrol output: captured Slurm 22.05 text (tests/data/sites/slurm-22.05,
from the test cluster; see its README) and the 23.11 / 24.05 layouts, each with its source."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from clusterkit import slurmtext
from clusterkit.sites import slurm_text as T

DATA = Path(__file__).resolve().parents[1] / "data" / "sites" / "slurm-22.05"


def _read(name: str) -> str:
    return (DATA / name).read_text()


# --------------------------------------------------------------------------- Slurm 22.05, captured


def test_config_cluster_name_and_version() -> None:
    cfg = T.parse_config(_read("show-config.txt"))
    assert cfg.cluster_name == "testbed" and cfg.version == "22.05.8"
    assert cfg.values["SelectType"] == "select/cons_tres"
    assert "Configuration data as of 2026-12-01T15:29:00" not in cfg.values       # the header is no key
    assert T.parse_config("ClusterName             = (null)\n").cluster_name is None


def test_partitions_one_line_and_multi_line_agree() -> None:
    one = T.parse_partitions(_read("show-partition-o.txt"))
    multi = T.parse_partitions(_read("show-partition-multiline.txt"))
    assert one.partitions == multi.partitions and one.unparsed == ()
    debug = one.get("debug")
    assert debug is not None and debug.nodes == "node[1-4]" and debug.default and debug.state == "UP"
    assert debug.max_time == "UNLIMITED" and debug.max_time_s == math.inf and debug.default_time == "NONE"
    assert one.names == ["debug"] and one.get("gpu") is None


def test_nodes_with_untyped_gres() -> None:
    nodes = T.parse_nodes(_read("show-node-o.txt"))
    assert [n.name for n in nodes.nodes] == ["node1", "node2", "node3", "node4"] and nodes.unparsed == ()
    n1 = nodes.nodes[0]
    assert (n1.cpus, n1.real_memory_mb, n1.gpus, n1.gpu_types) == (8, 64000, 8, ())
    assert n1.state == "IDLE" and n1.usable and n1.partitions == ("debug",) and n1.features == ()
    assert n1.cfg_tres == {"cpu": "8", "mem": "62.50G", "billing": "8"}


def test_os_value_with_spaces_does_not_eat_the_next_keys() -> None:
    kv = slurmtext.split_record(_read("show-node-o.txt").splitlines()[0])
    assert kv["OS"] == "Linux 6.18.44-fc-v1045 #1 SMP PREEMPT_DYNAMIC @0"
    assert kv["RealMemory"] == "64000" and kv["AllocTRES"] == ""


def test_nodes_with_typed_gres_and_without_gres() -> None:
    typed = T.parse_nodes(_read("show-node-o-typed.txt")).nodes[0]
    assert typed.gres == (T.Gres("gpu", "h100", 4, "gpu:h100:4"),) and typed.gpus == 4 and typed.gpu_types == ("h100",)
    bare = T.parse_nodes(_read("show-node-o-nogres.txt")).nodes[0]
    assert bare.gres == () and bare.gpus is None and bare.cpus == 8


def test_down_and_drained_nodes_keep_state_and_reason() -> None:
    by = T.parse_nodes(_read("show-node-o-down-drain.txt")).by_name()
    assert (by["node2"].state, by["node2"].reason, by["node2"].usable) == ("DOWN", "test", False)
    assert (by["node3"].state, by["node3"].reason, by["node3"].usable) == ("IDLE+DRAIN", "bad gpu", False)
    assert by["node1"].usable and by["node4"].usable


def test_multi_line_node_equals_one_line_node() -> None:
    multi = T.parse_nodes(_read("show-node-multiline.txt")).nodes[0]
    one = T.parse_nodes(_read("show-node-o.txt")).nodes[0]
    assert (multi.name, multi.cpus, multi.real_memory_mb, multi.gres, multi.state) == \
        (one.name, one.cpus, one.real_memory_mb, one.gres, one.state)


def test_garbage_is_kept_not_raised() -> None:
    text = "slurm_load_node error: Unable to contact slurm controller\n" + _read("show-node-o.txt")
    nodes = T.parse_nodes(text)
    assert len(nodes.nodes) == 4 and nodes.unparsed == ("slurm_load_node error: Unable to contact slurm controller",)
    assert T.parse_nodes("").nodes == () and T.parse_partitions("PartitionName").partitions == ()


# --------------------------------------------------------------------------- Slurm 23.11 / 24.05
#
# Not captured from a live system (Slurm here is 22.05): each record is written field by field
# after slurm_sprint_node_table() in SchedMD/slurm src/api/node_info.c at the slurm-23-11 and
# slurm-24-05 tags.  What changed since 22.05: CapWatts and ExtSensors* are gone, LastBusyTime
# shares its line with ResumeAfterTime (23.11), RestrictedCoresPerGPU appears when set (24.05),
# InstanceId/InstanceType follow Reason (23.11).  GRES with socket affinity, "gpu:h100:8(S:0-1)",
# is how gres_node_state prints a gres.conf with Cores=; CfgTRES carries gres/gpu=8 once
# AccountingStorageTRES=gres/gpu is set (both in Slurm's gres.html and tres.html).

NODE_23_11 = (
    "NodeName=gpu001 Arch=x86_64 CoresPerSocket=48  CPUAlloc=0 CPUEfctv=96 CPUTot=96 CPULoad=0.51 "
    "AvailableFeatures=h100,ib ActiveFeatures=h100,ib Gres=gpu:h100:8(S:0-1) "
    "NodeAddr=gpu001 NodeHostName=gpu001 Version=23.11.4 "
    "OS=Linux 5.15.0-105-generic #115-Ubuntu SMP Mon Apr 15 09:52:04 UTC 2024  "
    "RealMemory=2063937 AllocMem=0 FreeMem=1998311 Sockets=2 Boards=1 State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 "
    "Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu,debug  BootTime=2024-05-02T08:11:40 "
    "SlurmdStartTime=2024-05-02T08:13:02 LastBusyTime=2024-05-03T10:20:00 ResumeAfterTime=None "
    "CfgTRES=cpu=96,mem=2063937M,billing=96,gres/gpu=8 AllocTRES= CurrentWatts=0 AveWatts=0 "
    "Reason=xid 79 on GPU 3: fell off the bus [root@2024-05-03T10:21:07] InstanceId=i-0abc InstanceType=p5.48xlarge\n"
)

NODE_24_05 = (
    "NodeName=gpu002 Arch=x86_64 CoresPerSocket=56  CPUAlloc=16 CPUEfctv=104 CPUTot=112 CPULoad=3.20 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:h100:4(S:0),gpu:h100:4(S:1) "
    "GresUsed=gpu:h100:2(IDX:0-1) NodeAddr=10.1.0.2 NodeHostName=gpu002 Version=24.05.2 "
    "OS=Linux 6.8.0-40-generic #40-Ubuntu SMP  "
    "RealMemory=1031000 AllocMem=0 FreeMem=N/A Sockets=2 Boards=1 CoreSpecCount=4 "
    "RestrictedCoresPerGPU=1(0-7) State=MIXED ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A "
    "Partitions=gpu  BootTime=None SlurmdStartTime=None LastBusyTime=2024-09-01T12:00:00 ResumeAfterTime=None "
    "CfgTRES=cpu=112,mem=1031000M,billing=112,gres/gpu=8 AllocTRES=cpu=16,gres/gpu=2 CurrentWatts=n/a AveWatts=n/a\n"
)

PARTITION_23_11 = (
    "PartitionName=gpu AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=NO QoS=N/A "
    "DefaultTime=04:00:00 DisableRootJobs=NO ExclusiveUser=NO ExclusiveTopo=NO GraceTime=0 Hidden=NO "
    "MaxNodes=UNLIMITED MaxTime=2-00:00:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED MaxCPUsPerSocket=UNLIMITED "
    "Nodes=gpu[001-128] PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=EXCLUSIVE "
    "OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=12288 TotalNodes=128 SelectTypeParameters=NONE "
    "JobDefaults=DefCpuPerGPU=12 DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED "
    "TRES=cpu=12288,mem=257992G,node=128,billing=12288,gres/gpu=1024 TRESBillingWeights=CPU=1.0,GRES/gpu=10.0\n"
)


def test_23_11_node_typed_gres_with_sockets_drained_with_reason() -> None:
    n = T.parse_nodes(NODE_23_11).nodes[0]
    assert n.gres == (T.Gres("gpu", "h100", 8, "gpu:h100:8(S:0-1)"),) and n.gpus == 8
    assert n.cpus == 96 and n.real_memory_mb == 2063937 and n.features == ("h100", "ib")
    assert n.partitions == ("gpu", "debug") and not n.usable
    assert n.reason == "xid 79 on GPU 3: fell off the bus"          # the [user@time] stamp dropped
    assert n.cfg_tres["gres/gpu"] == "8"
    assert slurmtext.split_record(NODE_23_11)["InstanceType"] == "p5.48xlarge"


def test_24_05_node_split_gres_and_restricted_cores() -> None:
    n = T.parse_nodes(NODE_24_05).nodes[0]
    assert (n.cpus, n.cpus_total) == (104, 112)                     # CPUEfctv: what jobs can get
    assert n.gpus == 8 and n.gpu_types == ("h100",) and n.usable and n.state == "MIXED"
    assert slurmtext.split_record(NODE_24_05)["RestrictedCoresPerGPU"] == "1(0-7)"


def test_23_11_partition_with_time_limits() -> None:
    p = T.parse_partitions(PARTITION_23_11).partitions[0]
    assert (p.name, p.nodes, p.max_time_s, slurmtext.parse_time(p.default_time)) == \
        ("gpu", "gpu[001-128]", 172800.0, 14400.0)


def test_gpus_from_cfg_tres_when_gres_lists_none() -> None:
    line = "NodeName=n1 CPUTot=8 RealMemory=1000 Gres=(null) State=IDLE CfgTRES=cpu=8,mem=1000M,gres/gpu=4\n"
    assert T.parse_nodes(line).nodes[0].gpus == 4


# --------------------------------------------------------------------------- GRES and time strings


@pytest.mark.parametrize("text,expected", [
    ("(null)", ()),
    ("gpu:8", (("gpu", None, 8),)),
    ("gpu:h100:8(S:0-1)", (("gpu", "h100", 8),)),
    ("gpu:a100:no_consume:4", (("gpu", "a100", 4),)),
    ("gpu:(null):8(IDX:0-7)", (("gpu", None, 8),)),
    ("gpu:2K(S:0-2023)", (("gpu", None, 2048),)),
    ("gpu:h100:4(S:0),gpu:a100:2(S:1),nic:1", (("gpu", "h100", 4), ("gpu", "a100", 2), ("nic", None, 1))),
    ("gpu:h100:lots", (("gpu", "h100", None),)),    # unreadable count: kept, never raised
])
def test_gres(text: str, expected: tuple) -> None:
    assert tuple((g.name, g.type, g.count) for g in T.parse_gres(text)) == expected


@pytest.mark.parametrize("text,seconds", [
    ("UNLIMITED", math.inf), ("INFINITE", math.inf), ("30", 1800), ("30:15", 1815), ("04:00:00", 14400),
    ("2-00:00:00", 172800), ("1-12", 129600), ("1-12:30", 131400), ("NONE", None), ("soon", None),
])
def test_time(text: str, seconds: float | None) -> None:
    assert slurmtext.parse_time(text) == seconds


def test_published_22_05_10_capture_with_a_reserved_core() -> None:
    """DCCN's nodes (tests/data/sites/public, see the README): CoreSpecCount=1, CPUEfctv=63 CPUTot=64."""
    text = (Path(__file__).resolve().parents[1] / "data" / "sites" / "public" /
            "show-node-dccn-corespec-22.05.10.txt").read_text()
    nodes = T.parse_nodes(text)
    assert nodes.unparsed == () and [n.name for n in nodes.nodes] == ["dccn-c083", "dccn-c084"]
    for n in nodes.nodes:
        assert (n.cpus, n.cpus_total, n.real_memory_mb, n.gpus) == (63, 64, 515578, 4)


def test_cputot_alone_before_23_02() -> None:
    n = T.parse_nodes("NodeName=n1 CPUTot=8 RealMemory=1000 State=IDLE\n").nodes[0]
    assert (n.cpus, n.cpus_total) == (8, 8)


# --- GRES type names -> the model token preflight matches; MIG slices ---------------------------

@pytest.mark.parametrize(
    "gres_type,token",
    [("nvidia_a100-sxm4-40gb", "A100"),            # AutoDetect=nvml (the DCCN capture)
     ("nvidia_h100_80gb_hbm3", "H100"), ("nvidia_geforce_rtx_5090", "RTX 5090"), ("nvidia-rtx-3090", "RTX 3090"),
     ("rtx_a6000", "RTX A6000"), ("rtx3090", "RTX 3090"), ("gtx1080ti", "GTX 1080"), ("tesla_v100", "V100"),
     ("gh200_480gb", "GH200"), ("l40s", "L40S"), ("a10g", "A10G"), ("t4", "T4"), ("h100", "H100"),
     # written without separators: the "gpu:nvidiah100pcie:6", and the glued forms sites give
     ("nvidiah100pcie", "H100"), ("teslav100", "V100"), ("NVIDIAA40", "A40"), ("NVIDIAA10080GBPCIe", "A100"),
     ("nvidiaa100sxm480gb", "A100"), ("nvidiageforcertx3090", "RTX 3090"), ("a6000", "A6000"),
     # RTX PRO: ParallelCluster's g7e type (tests/data/captures/scontrol/node-slurmonaws-*), and separated
     ("rtxproserver6000", "RTX PRO 6000"), ("rtx_pro_6000", "RTX PRO 6000"), ("rtx_pro_server_6000", "RTX PRO 6000"),
     ("ampere", None), ("gpu", None)],
)
def test_gpu_model_token(gres_type: str, token: str | None) -> None:
    assert T.gpu_model_token(gres_type) == token


def test_mig_slices_are_not_whole_gpus() -> None:
    n = T.parse_nodes("NodeName=n1 CPUTot=64 Gres=gpu:a100:4,gpu:1g.10gb:7 State=IDLE\n").nodes[0]
    assert (n.gpus, n.gpu_types) == (4, ("a100",))
    nvml = T.parse_nodes("NodeName=n2 Gres=gpu:nvidia_a100_3g.39gb:2 State=IDLE CfgTRES=cpu=8,gres/gpu=2\n").nodes[0]
    assert (nvml.gpus, nvml.gpu_types) == (None, ())
    assert [T.is_mig_type(t) for t in ("1g.10gb", "1g.10gb+me", "nvidia_h100_80gb_hbm3_1g.10gb", "a100")] == \
        [True, True, True, False]
