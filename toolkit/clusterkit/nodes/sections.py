"""The fact sections: the shell text that reads one kind of node fact (GPUs and driver, CUDA,
InfiniBand ports, kernel modules, mounts, free space, writability, network interfaces), and
what some facts mean (the ports a ``network.hcas`` entry names, the mounts that serve a
storage type).  Preflight's checks and the admin commands' probe both run these sections;
neither judges here.  Every value that comes from a site is shell-quoted.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from clusterkit.nodes import device_parsers as D
from clusterkit.nodes import parsers as P
from clusterkit.nodes.script import Section

# Fixed budgets for sections that only read kernel files; nvidia-smi gets a share of the
# command timeout because a GPU that fell off the bus can make it hang for minutes.
_READ_TIMEOUT_S = 5.0


def gpu_section(timeout_s: float) -> Section:
    """nvidia-smi's per-GPU query (:func:`~clusterkit.nodes.parsers.parse_gpu_query` reads it)."""
    fields = ",".join(D.GPU_QUERY_FIELDS)
    return Section("gpu", f"nvidia-smi --query-gpu={fields} --format=csv,noheader", timeout_s, simple=True)


def cuda_section(timeout_s: float) -> Section:
    """The driver's CUDA version (:func:`~clusterkit.nodes.device_parsers.parse_cuda_version`);
    skipped when the GPU section hung."""
    # `--version` is cheap and prints "CUDA Version : X.Y" on drivers >= 525 ("CUDA UMD
    # version : X.Y" from 610 on); older ones only show it in the plain table header.
    return Section("cuda", "v=$(nvidia-smi --version 2>/dev/null); "
                   'case "$v" in *"CUDA Version"*|*"CUDA UMD version"*|*"CUDA UMD Version"*) echo "$v" ;; '
                   '*) nvidia-smi ;; esac', timeout_s,
                   unless_timed_out="gpu")


_IB_ATTRS = ("state", "phys_state", "rate", "link_layer")


def ib_section() -> Section:
    """The InfiniBand ports: the sysfs tree, or ``ibstat`` (:func:`~clusterkit.nodes.parsers.parse_ib`)."""
    globs = " ".join([f'"$CK_ROOT"/sys/class/infiniband/*/ports/*/{a}' for a in _IB_ATTRS]
                     + ['"$CK_ROOT"/sys/class/infiniband/*/hca_type'])
    ib = (f'if [ -d "$CK_ROOT/sys/class/infiniband" ]; then grep -H "" {globs} 2>/dev/null; '
          'elif [ -z "$CK_ROOT" ] && command -v ibstat >/dev/null 2>&1; then ibstat; fi; true')
    return Section("ib", ib, _READ_TIMEOUT_S)


def modules_section() -> Section:
    """The GPUDirect RDMA kernel modules (:func:`~clusterkit.nodes.parsers.parse_modules`)."""
    modules = ('if [ -d "$CK_ROOT/sys/module" ]; then for m in nvidia_peermem nv_peer_mem; do '
               '[ -d "$CK_ROOT/sys/module/$m" ] && echo "/sys/module/$m"; done; else lsmod; fi; true')
    return Section("modules", modules, _READ_TIMEOUT_S, inline=True)


def hca_ports(inv: D.IbInventory, spec: str) -> list[D.IbPort]:
    """The ports a ``network.hcas`` entry names: ``mlx5_0:1`` one port, ``mlx5_0`` all of them."""
    hca, _, port = spec.partition(":")
    return [p for p in inv.ports_of(hca) if not port or str(p.port) == port]


# The link layer of each RDMA fabric's ports (sysfs ``link_layer``, ibstat's ``Link layer``).
LINK_LAYERS = {"infiniband": "InfiniBand", "roce": "Ethernet"}


def hca_layers(invs: Sequence[D.IbInventory]) -> dict[str, set[str | None]]:
    """Each HCA present on every inventory -> the link layers its ports reported there."""
    if not invs:
        return {}
    common = set.intersection(*(set(inv.hcas) for inv in invs))
    return {h: {p.link_layer for inv in invs for p in inv.ports_of(h)} for h in sorted(common)}


def fabric_hcas(invs: Sequence[D.IbInventory], fabric: str) -> list[str]:
    """The HCAs of ``fabric`` on every node (:func:`fabric_tiers`' first list)."""
    return fabric_tiers(invs, fabric)[0]


def best_rate(invs: Sequence[D.IbInventory], hca: str) -> float | None:
    """The highest rate an ACTIVE port of ``hca`` reported on any of the nodes."""
    rates = [p.rate_gbps for inv in invs for p in inv.ports_of(hca) if p.state == "ACTIVE" and p.rate_gbps]
    return max(rates) if rates else None


def hca_model(invs: Sequence[D.IbInventory], hca: str) -> str | None:
    """The HCA's device model (ibstat's CA type, sysfs hca_type) when every node that says one agrees."""
    models = {m for inv in invs if (m := inv.model_of(hca)) is not None}
    return models.pop() if len(models) == 1 else None


def fabric_tiers(invs: Sequence[D.IbInventory], fabric: str) -> tuple[list[str], list[str]]:
    """(the HCAs of ``fabric`` on every node, the HCAs of its link layer left out as a lower rate tier).

    The link layer first: a DGX/HGX node has InfiniBand rails (``mlx5_0..7``) and, on the same
    driver, an Ethernet NIC or RoCE bond (``mlx5_bond_0``): only the rails carry an InfiniBand
    fabric.  When no port reports a link layer at all, every HCA is the fabric's (nothing tells
    them apart).

    Then the rate tier: a RoCE node often has slower front-end NICs on the same link layer
    (ConnectX-7 rails at 400 Gb/s, ConnectX-6 Dx at 100 for storage and management).  NCCL
    should use the rails only.  Each HCA's tier is the best rate an ACTIVE port of it reported on
    any node; the fabric's HCAs are the top tier.  An HCA of a lower tier stays among them when
    it is the same device model as a top-tier HCA (a rail that trained down on every node
    probed: preflight's ``ib.rate`` should fail it, not the site file forget it); it is left out
    when its model differs or either model is unknown.  The second list is that guess: whoever
    writes it down names it as unverified.  An HCA with no ACTIVE port has no tier and stays.
    """
    layers = hca_layers(invs)
    if all(ls == {None} for ls in layers.values()):
        hcas = list(layers)
    else:
        want = LINK_LAYERS.get(fabric)
        hcas = [h for h, ls in layers.items() if ls == {want}]
    rates = {h: best_rate(invs, h) for h in hcas}
    top = max((r for r in rates.values() if r is not None), default=None)
    if top is None:
        return hcas, []
    top_models = {hca_model(invs, h) for h, r in rates.items() if r == top}
    lower = [h for h, r in rates.items() if r is not None and r < top
             and (None in top_models or hca_model(invs, h) is None or hca_model(invs, h) not in top_models)]
    return [h for h in hcas if h not in lower], lower


# Kernel file-system type names per configured storage type, as /proc/mounts and ``mount``
# print them: NFS v2/v3 mounts are ``nfs``, v4.x ``nfs4``; IBM Storage Scale (Spectrum Scale)
# is ``gpfs``; BeeGFS's client module registers ``beegfs`` (its source is ``beegfs_nodev``).
FSTYPES = {"lustre": {"lustre"}, "nfs": {"nfs", "nfs4"}, "gpfs": {"gpfs"}, "beegfs": {"beegfs"}}


def mounted_as(m: P.Mount | None, storage_type: str) -> bool:
    """Whether mount ``m`` serves a ``storage[].type``: its file-system type (local: any mount)."""
    return m is not None and (storage_type == "local" or m.fstype in FSTYPES[storage_type])


def mounts_section() -> Section:
    """The mount table (:func:`~clusterkit.nodes.parsers.parse_mounts`)."""
    return Section("mounts", 'cat "$CK_ROOT/proc/mounts"', _READ_TIMEOUT_S, inline=True)


def df_section(i: int, path: str, timeout_s: float) -> Section:
    """Free space under a storage path (:func:`~clusterkit.nodes.parsers.parse_df`)."""
    return Section(f"df_{i}", f'df -P -k -- "$CK_ROOT"{shlex.quote(path)}', timeout_s, simple=True)


def write_section(i: int, path: str, timeout_s: float) -> Section:
    """Whether a file can be made and removed under a storage path; skipped when its df hung."""
    quoted = f'"$CK_ROOT"{shlex.quote(path)}'
    probe = (f'f={quoted}/.clusterkit-preflight.$CK_HOST.$$ && : > "$f" && rm -f -- "$f" '
             '&& echo writable')
    return Section(f"write_{i}", probe, timeout_s, unless_timed_out=f"df_{i}")


# /sys/class/net/<if>/type is the ARPHRD number: 1 Ethernet, 32 InfiniBand (IPoIB), 772 loopback.
_NET = ('for d in "$CK_ROOT"/sys/class/net/*; do [ -r "$d/type" ] || continue; t=; s=; '
        'read -r t < "$d/type"; read -r s 2>/dev/null < "$d/operstate"; '
        'printf "%s %s %s\\n" "${d##*/}" "$t" "$s"; done; true')


def net_section() -> Section:
    """The network interfaces: ``name type operstate`` lines (:func:`~clusterkit.nodes.facts.parse_interfaces`)."""
    return Section("net", _NET, _READ_TIMEOUT_S)


def limits_section() -> Section:
    """The shell's resource limits (:func:`~clusterkit.nodes.parsers.parse_memlock` reads the
    locked-memory row): what a process started from here, as a rank is, inherits."""
    return Section("limits", 'cat "$CK_ROOT/proc/self/limits"', _READ_TIMEOUT_S, inline=True)


def gid_section(index: int) -> Section:
    """GID type and value at ``index`` on every RDMA port (:func:`~clusterkit.nodes.parsers.parse_gids`)."""
    n = int(index)   # a site's network.roce.gid_index: 0-255, never text
    globs = " ".join(f'"$CK_ROOT"/sys/class/infiniband/*/ports/*/{kind}/{n}' for kind in ("gid_attrs/types", "gids"))
    return Section("gid", f"grep -H '' {globs} 2>/dev/null; true", _READ_TIMEOUT_S)


def ipv4_section(ifname: str) -> Section:
    """The IPv4 addresses of one interface (:func:`~clusterkit.nodes.parsers.parse_ipv4`)."""
    return Section("ifaddr", f"ip -o -4 addr show dev {shlex.quote(ifname)} 2>&1", _READ_TIMEOUT_S)
