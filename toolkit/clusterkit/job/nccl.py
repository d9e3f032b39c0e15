"""NCCL and torch environment policy: fabric x stage x site overrides -> env (docs/architecture.md §3).

Every rule states its reason; the reason travels into the rendered ``nccl.env`` so a person
reading it at 3 a.m. knows why each value is there and where it came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from clusterkit.config.schema import Site

Source = Literal["policy", "site", "debug", "launcher", "job"]


@dataclass(frozen=True)
class EnvVar:
    name: str
    value: str
    source: Source
    reason: str
    replaced: str | None = None   # the policy value a site override replaced


def _hca_list(hcas: list[str]) -> str:
    # '=' makes NCCL match names exactly: without it 'mlx5_1' is a prefix that also selects
    # mlx5_10..mlx5_17 on 16-HCA nodes, and bonded/management ports sneak in.
    return "=" + ",".join(hcas)


def policy(site: Site, stage: str, *, debug: bool = False, run_dir: str = "",
           omp_threads: int | None = None) -> list[EnvVar]:
    """The env our policy sets for this site and stage, before site overrides."""
    env: list[EnvVar] = []

    def add(name: str, value: str, reason: str, source: Source = "policy") -> None:
        env.append(EnvVar(name, value, source, reason))

    if debug:
        add("NCCL_DEBUG", "INFO", "--debug: log NCCL init and transport selection", "debug")
        add("NCCL_DEBUG_SUBSYS", "INIT,NET", "--debug: the subsystems that explain hangs at init and slow links",
            "debug")
        add("NCCL_DEBUG_FILE", f"{run_dir}/nccl-%h-%p.log" if run_dir else "nccl-%h-%p.log",
            "--debug: one file per host (%h) and process (%p) instead of interleaved stderr", "debug")
    else:
        add("NCCL_DEBUG", "WARN", "surface real NCCL problems in the job log without INFO noise")

    # torchrun sets OMP_NUM_THREADS=1 when unset (and warns), which starves CPU-side work.
    if omp_threads is None:
        add("OMP_NUM_THREADS", str(max(1, site.nodes.cpus_per_node // site.nodes.gpus_per_node)),
            "cpus_per_node / gpus_per_node: one CPU share per rank instead of torchrun's 1")
    else:
        add("OMP_NUM_THREADS", str(omp_threads),
            "the job's CPUs per task / ranks per task: one CPU share per rank instead of torchrun's 1")

    if stage == "single-node":
        # One machine: NCCL uses NVLink/PCIe/shared memory; fabric knobs would only mislead.
        return env

    net = site.network
    if net.fabric == "ethernet":
        add("NCCL_IB_DISABLE", "1", "Ethernet fabric: no RDMA devices to use; go straight to TCP sockets")
        if net.socket_ifname:
            add("NCCL_SOCKET_IFNAME", "=" + net.socket_ifname,
                "pin sockets to the site's data interface; NCCL's guess can pick docker0 or a management NIC")
        return env

    add("NCCL_IB_DISABLE", "0",
        f"{net.fabric} fabric: use NCCL's IB verbs transport (explicit, in case a module disabled it)")
    add("NCCL_IB_HCA", _hca_list(net.hcas),
        "the site's RDMA HCAs, exact names ('=') so prefixes and bonds are not picked up")
    if net.socket_ifname:
        add("NCCL_SOCKET_IFNAME", "=" + net.socket_ifname,
            "bootstrap/out-of-band traffic on the site's interface, not a random first NIC")
    if net.fabric == "roce" and net.roce is not None:
        if net.roce.gid_index is not None:
            add("NCCL_IB_GID_INDEX", str(net.roce.gid_index),
                "RoCE v2 GID the site pinned; NCCL's auto-pick can choose a v1 or link-local GID")
        if net.roce.traffic_class is not None:
            add("NCCL_IB_TC", str(net.roce.traffic_class), "traffic class of the fabric's lossless (PFC) queue")
        if net.roce.service_level is not None:
            add("NCCL_IB_SL", str(net.roce.service_level), "service level the switches map to the lossless queue")
    if stage == "large-cluster" and net.fabric == "infiniband":
        add("NCCL_IB_QPS_PER_CONNECTION", "4",
            "past one switch, several QPs per connection spread traffic over more adaptive-routing paths")
        add("NCCL_CROSS_NIC", "0" if net.rail_optimized else "1",
            "rail-optimised: keep each ring on one rail (0)" if net.rail_optimized
            else "all NICs on one switch: rings may cross NICs freely (1)")
    return env


def resolve(site: Site, stage: str, *, debug: bool = False, run_dir: str = "",
            extra: list[EnvVar] | None = None, omp_threads: int | None = None,
            job: list[tuple[str, str, str]] | None = None) -> list[EnvVar]:
    """Policy (+ launcher extras), then the site's ``nccl.env`` overrides, then the job's own
    environment (``job``: name, value, where it was given: site ``job.env``, ``--env``), which
    wins over both: an ``NCCL_*`` a job sets is the one it gets."""
    merged: dict[str, EnvVar] = {}
    for var in policy(site, stage, debug=debug, run_dir=run_dir, omp_threads=omp_threads) + list(extra or []):
        merged[var.name] = var
    for name, value in site.nccl.env.items():
        old = merged.get(name)
        merged[name] = EnvVar(name, str(value), "site", f"site override in {site.name}",
                              replaced=old.value if old else None)
    for name, value, origin in job or ():
        old = merged.pop(name, None)
        merged[name] = EnvVar(name, value, "job", f"the job's environment ({origin})",
                              replaced=old.value if old else None)
    return list(merged.values())
