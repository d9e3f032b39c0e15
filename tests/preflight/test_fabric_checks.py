"""The NCCL-facing node checks: locked memory, the pinned RoCE GID, the socket interface.
Parsers on captured text (tests/data/preflight/README.md), then every check end to end on
SSH-lab nodes whose sysroot holds the GID tables, limits and interfaces (make_profiles.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from clusterkit.nodes import parsers as P
from clusterkit.preflight.catalogue import Expectations, select_checks
from clusterkit.tooltext import ParseFailure

from .conftest import groups_by_node

DATA = Path(__file__).resolve().parents[1] / "data" / "preflight"


def read(name: str) -> str:
    return (DATA / name).read_text()


def test_memlock_from_proc_limits() -> None:
    assert P.parse_memlock(read("proc_self_limits.txt")) == P.Limit(8388608, 8388608)
    text = read("proc_self_limits.txt").replace("8388608              8388608  ", "unlimited            unlimited")
    assert P.parse_memlock(text) == P.Limit(None, None)
    assert isinstance(P.parse_memlock("cat: /proc/self/limits: No such file or directory\n"), ParseFailure)
    assert isinstance(P.parse_memlock(read("proc_self_limits.txt").replace(
        "Max locked memory         8388608", "Max locked memory         lots   ")), ParseFailure)


def test_ipv4_of_an_interface() -> None:
    assert P.parse_ipv4(read("ip_o4_addr_eth0.txt")) == P.IfAddr(True, ("192.0.2.2",))
    assert P.parse_ipv4(read("ip_o4_addr_missing.txt")) == P.IfAddr(False, ())
    assert P.parse_ipv4("") == P.IfAddr(True, ())                     # up, but no IPv4 address
    assert isinstance(P.parse_ipv4("Segmentation fault\n"), ParseFailure)


def test_gid_lines() -> None:
    text = ("/sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types/3:RoCE v2\n"
            "/sys/class/infiniband/mlx5_0/ports/1/gids/3:0000:0000:0000:0000:0000:ffff:0a01:0011\n"
            "/sys/class/infiniband/mlx5_1/ports/1/gids/3:0000:0000:0000:0000:0000:0000:0000:0000\n")
    a, b = P.parse_gids(text)  # type: ignore[misc]
    assert (a.label, a.type, a.ipv4_mapped) == ("mlx5_0 port 1 GID 3", "RoCE v2", True)
    assert (b.type, b.ipv4_mapped) == (None, False)                   # unset: the kernel refuses its type
    assert isinstance(P.parse_gids("garbage\n"), ParseFailure)


def test_checks_apply_where_they_matter() -> None:
    base = dict(gpus_per_node=4, hcas=("mlx5_0", "mlx5_1"))

    def names(**kw: Any) -> set[str]:
        return {c.name for c in select_checks(Expectations(**{**base, **kw})).checks}  # type: ignore[arg-type]

    roce = names(stage="multi-node", fabric="roce", gid_index=3, socket_ifname="bond0")
    assert {"roce.gid", "limits.memlock", "net.socket_ifname"} <= roce
    assert "roce.gid" not in names(stage="multi-node", fabric="roce")       # nothing pinned, nothing to check
    assert not {"roce.gid", "limits.memlock", "net.socket_ifname"} & names(
        stage="single-node", fabric="roce", gid_index=3, socket_ifname="bond0")
    eth = names(stage="multi-node", fabric="ethernet", hcas=(), socket_ifname="eth0")
    assert "net.socket_ifname" in eth and "limits.memlock" not in eth
    efa = names(stage="multi-node", fabric="efa", hcas=())
    assert "limits.memlock" in efa and "ib.hcas" not in efa


SITE = """\
name: rlab
scheduler: {{kind: slurm, partition: gpu}}
nodes: {{nodelist: "r[01-03]", gpus_per_node: 4, gpu_model: A100}}
ssh: {{port: {port}, known_hosts: "{known_hosts}", connect_timeout_s: 2, command_timeout_s: 8}}
network:
  fabric: roce
  hcas: [mlx5_0, mlx5_1]
  port_rate_gbps: 200
  socket_ifname: {ifname}
  roce: {{gid_index: 3, traffic_class: 106}}
"""


@pytest.mark.sshlab
@pytest.mark.parametrize("ifname", ["bond0", "ib9"])
def test_fabric_checks_on_ssh_nodes(sshlab_factory: Any, tmp_path: Path, ifname: str) -> None:
    from tests.conftest import CLI

    lab = sshlab_factory({"r01": "roce", "r02": "roce_bad_gid", "r03": "roce_no_ipv4"})
    site = tmp_path / "rlab.yaml"
    site.write_text(SITE.format(port=lab.port, known_hosts=lab.known_hosts, ifname=ifname))
    ck = CLI().bind(process=True, wrap=lab.wrap, env={**lab.env(), "SSH_AUTH_SOCK": None})
    proc = ck("preflight", "--site", str(site), "--stage", "multi-node", "--json")
    assert "Traceback" not in proc.err, proc.err
    nodes = groups_by_node(json.loads(proc.out))
    checks = {h: {c["check"]: (c["status"], c["message"]) for c in n["checks"]} for h, n in nodes.items()}
    assert checks["r01"]["roce.gid"] == ("ok", "GID 3 is RoCE v2, IPv4-mapped on mlx5_0, mlx5_1")
    assert checks["r02"]["roce.gid"][0] == "fail"
    assert checks["r02"]["roce.gid"][1].startswith(
        "mlx5_0 port 1 GID 3 is IB/RoCE v1, not RoCE v2, "
        "mlx5_1 port 1 GID 3 is fe80:0000:0000:0000:0e42:a1ff:fe5e:7c10, not IPv4-mapped")
    assert checks["r01"]["limits.memlock"] == ("ok", "locked memory unlimited")
    assert checks["r03"]["limits.memlock"] == (
        "warn", "locked memory limited to 64 KiB (hard limit): RDMA cannot register large buffers; "
                "set memlock unlimited (limits.conf, slurmd's LimitMEMLOCK)")
    if ifname == "bond0":
        assert checks["r01"]["net.socket_ifname"] == ("ok", "bond0 10.1.0.17")
        assert checks["r03"]["net.socket_ifname"] == (
            "fail", "interface bond0 has no IPv4 address: NCCL cannot bootstrap over it")
        assert [h for h, n in nodes.items() if n["status"] == "ok"] == ["r01"]
    else:
        assert {c["net.socket_ifname"] for c in checks.values()} == {
            ("fail", "interface ib9 does not exist (network.socket_ifname; NCCL_SOCKET_IFNAME)")}
