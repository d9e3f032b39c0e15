"""NCCL and torch environment policy: fabric x stage x site overrides -> env (docs/architecture.md §3).

Every rule states its reason and the source it rests on (NCCL's source or documentation, a
vendor reference); both travel into the rendered ``nccl.env`` so a person reading it at
3 a.m. knows why each value is there.  ``docs/nccl.md`` tabulates the rules per fabric.

NCCL versions differ in their defaults; those this policy depends on, read in NCCL's source
(tags v2.18.1 to v2.27.3): ``NCCL_IB_GID_INDEX`` 0 until 2.20, -1 (NCCL picks a RoCE v2,
IPv4-mapped GID itself, steered by ``NCCL_IB_ROCE_VERSION_NUM``/``NCCL_IB_ADDR_FAMILY``) from
2.21; ``NCCL_IB_SPLIT_DATA_ON_QPS`` 1 until 2.19, 0 from 2.20; ``NCCL_IB_TIMEOUT`` 18 until
2.22, 20 from 2.23; ``NCCL_CROSS_NIC`` 2; ``NCCL_IB_QPS_PER_CONNECTION`` 1.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from clusterkit import jobfiles, pyspy
from clusterkit.config.schema import Site

Source = Literal["policy", "site", "debug", "launcher", "job"]

# Where the rules come from (cited in each variable's ``ref``).
NCCL_ENV_DOC = "NCCL docs, Environment Variables (env.html)"
NCCL_IB_SRC = "NCCL src/transport/net_ib"
NCCL_SOCKET_SRC = "NCCL src/transport/net_socket.cc"
NCCL_DEBUG_SRC = "NCCL src/debug.cc"
TORCH_FR_DOC = "PyTorch docs, Flight Recorder (torch_nccl_environment_variables)"
AWS_EFA_DOC = "AWS docs, Get started with EFA and NCCL; aws-ofi-nccl README"
AWS_OFI_SRC = ("aws-ofi-nccl src/nccl_ofi_interface_nvidia.cpp (plugin name; NCCL_NET='AWS Libfabric' renaming "
               "from 1.13); NCCL src/plugin/net.cc (NCCL_NET matched case-insensitively)")
#: NCCL_NET for the aws-ofi-nccl plugin: its name up to 1.12; from 1.13 (named "Libfabric") the
#: plugin takes this name when NCCL_NET asks for it, so it selects every release.
EFA_NET = "AWS Libfabric"


@dataclass(frozen=True)
class EnvVar:
    name: str
    value: str
    source: Source
    reason: str
    replaced: str | None = None   # the policy value a site override replaced
    ref: str = ""                 # the source the rule rests on
    shell: str | None = None      # the exact shell word to export, when the value expands at run time


def _hca_list(hcas: list[str]) -> str:
    # '=' makes NCCL match names exactly: without it 'mlx5_1' is a prefix that also selects
    # mlx5_10..mlx5_17 on 16-HCA nodes, and bonded/management ports sneak in.
    return "=" + ",".join(hcas)


def per_attempt(run_dir: str, stem: str, tail: str) -> tuple[str, str]:
    """A file name under ``<run_dir>/logs`` that carries the job id and restart, as (readable
    value, shell word): ``logs/<stem><job>.r<restart><tail>``.  The run directory is quoted;
    only the two job variables expand when the job script exports it."""
    base = f"{run_dir.rstrip('/')}/{jobfiles.LOGS}/" if run_dir else f"{jobfiles.LOGS}/"
    tag = f"${{CK_JOB_ID}}{jobfiles.RESTART}${{SLURM_RESTART_COUNT:-0}}"
    value = f"{base}{stem}{tag}{tail}"
    word = shlex.quote(base + stem) + f'"{tag}"' + shlex.quote(tail)
    return value, word


def local_file(site: Site, stem: str, tail: str = "") -> tuple[str, str]:
    """A per-process file on each node's own disk, as (readable value, shell word):
    ``<logs.node_local_dir>/<stem with the job and restart><tail>`` (``stem``: :data:`pyspy.FR_LOCAL`,
    to which torch appends the rank, or :data:`pyspy.NCCL_LOCAL`)."""
    name = stem.format(job="${CK_JOB_ID}", restart="${SLURM_RESTART_COUNT:-0}")
    base = site.logs.node_local_dir.rstrip("/") + "/"
    return base + name + tail, shlex.quote(base) + f'"{name}"' + (shlex.quote(tail) if tail else "")


#: NCCL_DEBUG_SUBSYS under --debug.  Setting the variable replaces NCCL's default mask
#: (INIT,BOOTSTRAP,ENV), so INIT,NET alone drops the "set by environment" and bootstrap lines.
DEBUG_SUBSYS = "INIT,BOOTSTRAP,ENV,NET,GRAPH"
#: Flight-recorder entries kept per process group (PyTorch's docs suggest 2000 when debugging).
FR_BUFFER = "2000"
#: The flight recorder's names: (torch 2.7+, older torch).  torch 2.14 warns once per rank about
#: each old name it finds set, so the job keeps only the pair member its torch reads.
FR_PAIRS = (("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"),
            ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"),
            ("TORCH_FR_DEBUG_INFO_PIPE_FILE", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"))
FR_PICK = ("the job keeps only the name the torch it detects reads (TORCH_FR_* from torch 2.7, TORCH_NCCL_* "
           "before; both when it cannot tell)")
#: The NCCL release from which NCCL picks a RoCE v2, IPv4-mapped GID itself.
GID_AUTO = (2, 21)


def _nccl_origin(site: Site, container: bool) -> str:
    c = site.software.container
    version = f" ({site.software.nccl_version}, says the site)" if site.software.nccl_version else ""
    if container and c is not None:
        return f"NCCL from the container image {c.image}{version}"
    return f"the NCCL its torch loads (the wheel's nvidia-nccl, or a module's that replaces it){version}"


def version_code(version: str) -> int:
    """NCCL's own version number (``NCCL_VERSION_CODE`` from 2.9): 2.21.5 -> 22105."""
    parts = [int(p) for p in version.split(".")[:3]] + [0, 0]
    return parts[0] * 10000 + parts[1] * 100 + parts[2]


@dataclass(frozen=True)
class VersionCheck:
    """What the job checks against the NCCL version it detects before the launcher starts: the
    detected version's code (major*10000 + minor*100 + patch) ``below`` this one contradicts an
    assumption the plan made, and the job says so."""

    below: int
    message: str
    above: int = 0        # or at or above this one (a site's stated version: a different release line)

    @property
    def test(self) -> str:
        """The shell test on ``$ck_nccl_code``."""
        if self.above:
            return f'{{ [ "$ck_nccl_code" -lt {self.below} ] || [ "$ck_nccl_code" -ge {self.above} ]; }}'
        return f'[ "$ck_nccl_code" -lt {self.below} ]'

    def to_dict(self) -> dict[str, object]:
        return {"detected_below": self.below, "detected_from": self.above or None, "message": self.message}


def version_checks(site: Site, env: list[EnvVar]) -> list[VersionCheck]:
    """The assumptions about NCCL's version in ``env`` that the job checks at run time."""
    out: list[VersionCheck] = []
    by_name = {v.name: v for v in env}
    roce = by_name.get("NCCL_IB_ROCE_VERSION_NUM")
    if roce is not None and roce.source == "policy" and "NCCL_IB_GID_INDEX" not in by_name:
        out.append(VersionCheck(
            version_code("2.21"), "NCCL_IB_ROCE_VERSION_NUM/NCCL_IB_ADDR_FAMILY are read from NCCL 2.21; this "
            "NCCL ignores them and uses GID index 0, RoCE v1 or link-local on many nodes: pin "
            "network.roce.gid_index (preflight's roce.gid checks it on every node)"))
    stated = site.software.nccl_version
    if stated:
        code = version_code(stated)
        line = code // 100 * 100
        out.append(VersionCheck(line, f"the site says software.nccl_version {stated}, and the plan's NCCL rules "
                                "assume that release line: correct the site's key", above=line + 100))
    return out


def plan_warnings(site: Site, env: list[EnvVar]) -> list[str]:
    """What the site's stated NCCL version already contradicts, at plan time."""
    stated = site.software.nccl_version
    if not stated:
        return []
    return [f"NCCL {stated} (the site's software.nccl_version): {c.message}" for c in version_checks(site, env)
            if not c.above and version_code(stated) < c.below]


def fr_pairs(env: list[EnvVar]) -> list[tuple[str, str]]:
    """The flight-recorder name pairs the policy set both of (a site's or job's own value stays as given)."""
    by_name = {v.name: v for v in env}
    return [(new, old) for new, old in FR_PAIRS
            if all(n in by_name and by_name[n].source == "policy" for n in (new, old))]


def _debug(add: Callable[..., None], site: Site, run_dir: str, debug_nodes: tuple[str, ...],
           node_local: bool) -> None:
    """``--debug``'s values: NCCL INFO and its file per process (node-local above the site's limit
    without ``--debug-nodes``)."""
    only = ""
    if debug_nodes:
        from clusterkit.hostlist import fold

        only = (f" (on {fold(debug_nodes)} only, --debug-nodes: every other node sets WARN and writes no file "
                "before its launcher starts)")
    add("NCCL_DEBUG", "INFO", "--debug: log NCCL init, transport selection and the values NCCL read" + only,
        NCCL_ENV_DOC, "debug")
    add("NCCL_DEBUG_SUBSYS", DEBUG_SUBSYS,
        "--debug: init, bootstrap, the 'set by environment' lines, network and topology; setting it replaces "
        "NCCL's default INIT,BOOTSTRAP,ENV, so all are named", f"{NCCL_DEBUG_SRC} (default mask)", "debug")
    value, word = per_attempt(run_dir, "nccl-", ".%h.%p.log")
    where = "in the run's logs; WARN lines go there too, and clusterkit doctor reads them"
    if node_local and not debug_nodes:
        value, word = local_file(site, pyspy.NCCL_LOCAL, ".%h.%p.log")
        where = (f"on each node's own disk (logs.node_local_dir, above logs.debug_max_nodes: "
                 f"{site.logs.debug_max_nodes} nodes); WARN lines go there too; after a failure or stall the "
                 "supervisor copies the files of the node its verdict names into the run's logs, where "
                 "clusterkit doctor reads them")
    add("NCCL_DEBUG_FILE", value,
        "--debug: one file per job, restart, host (%h) and process (%p) " + where,
        f"{NCCL_ENV_DOC} (NCCL_DEBUG_FILE)", "debug", shell=word)


def policy(site: Site, stage: str, *, debug: bool = False, run_dir: str = "",
           omp_threads: int | None = None, container: bool = False,
           debug_nodes: tuple[str, ...] = (), node_local: bool = False) -> list[EnvVar]:
    """The env our policy sets for this site and stage, before site overrides (``debug_nodes``:
    the nodes that keep ``--debug``'s values, :mod:`clusterkit.job.debuglogs`; ``node_local``: the
    job is above the site's ``logs.debug_max_nodes``, so the flight recorder dumps on each node's disk)."""
    env: list[EnvVar] = []

    def add(name: str, value: str, reason: str, ref: str, source: Source = "policy",
            shell: str | None = None) -> None:
        env.append(EnvVar(name, value, source, reason, ref=ref, shell=shell))

    if debug:
        _debug(add, site, run_dir, debug_nodes, node_local)
    else:
        add("NCCL_DEBUG", "WARN", "surface real NCCL problems in the job log without INFO noise", NCCL_ENV_DOC)

    # torchrun sets OMP_NUM_THREADS=1 when unset (and warns), which starves CPU-side work.
    if omp_threads is None:
        add("OMP_NUM_THREADS", str(max(1, site.nodes.cpus_per_node // site.nodes.gpus_per_node)),
            "cpus_per_node / gpus_per_node: one CPU share per rank instead of torchrun's 1", "torchrun's warning")
    else:
        add("OMP_NUM_THREADS", str(omp_threads),
            "the job's CPUs per task / ranks per task: one CPU share per rank instead of torchrun's 1",
            "torchrun's warning")

    # PyTorch's flight recorder: the last collectives of every process group, dumped per rank on a
    # timeout into the run's logs (a container's /tmp, the default, is gone when it exits).
    # TORCH_FR_* are the names from torch 2.7 on; older torch reads only TORCH_NCCL_*.
    fr_value, fr_word = per_attempt(run_dir, "fr-", ".rank")
    fr_where = ("in the run's logs, one per rank (torch appends the rank); clusterkit doctor reads them; ")
    if node_local:
        fr_value, fr_word = local_file(site, pyspy.FR_LOCAL)
        fr_where = (f"on each node's own disk (logs.node_local_dir, above logs.debug_max_nodes: "
                    f"{site.logs.debug_max_nodes} nodes), one per rank; after a failure or stall the supervisor "
                    "copies the dump of the rank its verdict names into the run's logs, where doctor reads it; ")
    for name in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"):
        add(name, FR_BUFFER, "flight recorder on: the last 2000 collectives per process group, to see which rank "
            "is behind and in which collective after a timeout; " + FR_PICK, TORCH_FR_DOC)
    add("TORCH_NCCL_DUMP_ON_TIMEOUT", "1", "write the flight recorder's buffer when a collective times out "
        "(TORCH_NCCL_ASYNC_ERROR_HANDLING stays at torch's default, 3, which already ends the ranks on an error; "
        "the old advice to set 1 is stale)",
        TORCH_FR_DOC)
    for name in ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"):
        add(name, fr_value, "flight-recorder dumps " + fr_where + FR_PICK, TORCH_FR_DOC, shell=fr_word)
    # on a stall the supervisor asks each rank's recorder for a dump by writing to its pipe, which torch's
    # process group makes as <stem><rank>.pipe (a FIFO: node-local, in /tmp; docs/architecture.md §3)
    pipe = pyspy.FR_PIPE.format(job="${CK_JOB_ID}", restart="${SLURM_RESTART_COUNT:-0}")
    for name in ("TORCH_FR_DEBUG_INFO_PIPE_FILE", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"):
        add(name, pipe, "the flight recorder's dump on demand: on a stall the supervisor writes to each rank's "
            "pipe and the dump " + ("is written as on a timeout (node-local); " if node_local else
                                    "comes into the run's logs as on a timeout; ") + FR_PICK,
            f"{TORCH_FR_DOC}; PyTorch ProcessGroupNCCL.cpp, DumpPipe", shell=f'"{pipe}"')

    if stage == "single-node":
        # One machine: NCCL uses NVLink/PCIe/shared memory; fabric knobs would only mislead.
        return env

    net = site.network
    if net.fabric == "ethernet":
        add("NCCL_IB_DISABLE", "1", "Ethernet fabric: no RDMA devices to use; go straight to TCP sockets",
            NCCL_ENV_DOC)
        if net.socket_ifname:
            add("NCCL_SOCKET_IFNAME", "=" + net.socket_ifname,
                "pin sockets to the site's data interface; NCCL's guess can pick docker0 or a management NIC",
                f"{NCCL_ENV_DOC} ('=' matches the exact name)")
        # NCCL's auto-detection uses the main thread and one socket, except on AWS (2 x 8) and GCP
        # (4 x 1) NICs, recognised by PCI vendor: one TCP stream cannot fill a 25-100 Gb/s link.
        add("NCCL_SOCKET_NTHREADS", "4", "4 helper threads per connection, as NCCL's docs suggest for generic "
            "100G networks (auto-detection uses none off AWS/GCP); 4 x 4 = 16 sockets, within NCCL's 64",
            f"{NCCL_ENV_DOC}; {NCCL_SOCKET_SRC} (MAX_THREADS 16, MAX_SOCKETS 64)")
        add("NCCL_NSOCKS_PERTHREAD", "4", "4 sockets per thread (NCCL's docs: 4 for generic 100G networks); "
            "NCCL cuts the per-thread count when threads x sockets exceeds 64",
            f"{NCCL_ENV_DOC}; {NCCL_SOCKET_SRC}")
        return env

    if net.fabric == "efa":
        # AWS EFA: NCCL reaches it through the aws-ofi-nccl plugin over libfabric, never through
        # NCCL's own IB verbs transport, so no NCCL_IB_* applies.
        add("FI_PROVIDER", "efa", "libfabric's EFA provider for the aws-ofi-nccl plugin (not tcp or sockets, "
            "which it would otherwise fall back to)", AWS_EFA_DOC)
        add("FI_EFA_USE_DEVICE_RDMA", "1", "GPUDirect RDMA over EFA (p4d, p5 and later); without it buffers are "
            "staged through host memory", AWS_EFA_DOC)
        # NCCL_NET_PLUGIN stays unset: NCCL then opens libnccl-net.so, which every aws-ofi-nccl
        # release installs by default (up to 1.14 the library itself, from 1.15 beside
        # libnccl-net-ofi.so); NCCL_NET_PLUGIN=ofi would find nothing before 1.15.
        add("NCCL_NET", EFA_NET, "only the aws-ofi-nccl plugin's network: if the plugin does not load (or another "
            "libnccl-net.so comes first on the loader path) NCCL stops at init with 'network ... not found' instead "
            "of running over its TCP sockets at a fraction of EFA's speed. The plugin's name up to 1.12; 1.13+ "
            "('Libfabric') takes it when NCCL_NET asks. NCCL_NET_PLUGIN unset: NCCL opens libnccl-net.so, which "
            "every plugin release installs by default", AWS_OFI_SRC)
        if net.socket_ifname:
            add("NCCL_SOCKET_IFNAME", "=" + net.socket_ifname,
                "bootstrap/out-of-band traffic on the site's interface, not a random first NIC",
                f"{NCCL_ENV_DOC} ('=' matches the exact name)")
        _cross_nic(add, site)
        return env

    add("NCCL_IB_DISABLE", "0",
        f"{net.fabric} fabric: use NCCL's IB verbs transport (explicit, in case a module disabled it)",
        NCCL_ENV_DOC)
    add("NCCL_IB_HCA", _hca_list(net.hcas),
        "the site's RDMA HCAs, exact names ('=') so prefixes and bonds are not picked up",
        f"{NCCL_ENV_DOC} (NCCL_IB_HCA)")
    if net.socket_ifname:
        add("NCCL_SOCKET_IFNAME", "=" + net.socket_ifname,
            "bootstrap/out-of-band traffic on the site's interface, not a random first NIC",
            f"{NCCL_ENV_DOC} ('=' matches the exact name)")
    if net.fabric == "roce":
        roce = net.roce
        origin = _nccl_origin(site, container)
        if roce is not None and roce.gid_index is not None:
            add("NCCL_IB_GID_INDEX", str(roce.gid_index),
                f"the GID index the site pinned (network.roce.gid_index); preflight checks it is RoCE v2 and "
                f"IPv4-mapped on every node, since a v1 or IPv6 GID there hangs or fails with RETRY_EXC_ERR. "
                f"The job runs {origin}", f"{NCCL_IB_SRC} (IB_GID_INDEX: 0 until 2.20, auto from 2.21)")
        else:
            add("NCCL_IB_ROCE_VERSION_NUM", "2",
                f"NCCL 2.21+ picks the GID itself: RoCE v2 only (routable; v1 is not). Older NCCL ignores this "
                f"and uses GID 0: pin network.roce.gid_index there. The job runs {origin}, and warns when the "
                f"NCCL it detects before the launcher starts is older than 2.21",
                f"{NCCL_IB_SRC} (IB_ROCE_VERSION_NUM, 2.21+)")
            add("NCCL_IB_ADDR_FAMILY", "AF_INET",
                "NCCL 2.21+: an IPv4-mapped GID, not the link-local or IPv6 ones beside it",
                f"{NCCL_IB_SRC} (IB_ADDR_FAMILY, 2.21+)")
        if roce is not None and roce.traffic_class is not None:
            add("NCCL_IB_TC", str(roce.traffic_class), "traffic class of the fabric's lossless (PFC) queue",
                f"{NCCL_ENV_DOC} (NCCL_IB_TC)")
        if roce is not None and roce.service_level is not None:
            add("NCCL_IB_SL", str(roce.service_level), "service level the switches map to the lossless queue",
                f"{NCCL_ENV_DOC} (NCCL_IB_SL)")
        # RoCE switches spread flows by ECMP hashing of the UDP source port, one port per QP,
        # without adaptive routing: one QP per connection puts all of a connection on one path.
        _qps(add, "RoCE spreads flows by ECMP hash, one path per queue pair and no adaptive routing: 4 QPs per "
             "connection make 4 flows, so two big flows colliding on one link cost less")
    elif stage == "large-cluster":
        _qps(add, "past one switch, several QPs per connection give the fabric routing entropy (NCCL's docs: "
             "'multi-level fabrics which need multiple queue pairs'); references differ, and a fabric with "
             "adaptive routing gains little: NCCL's default is 1")
    _cross_nic(add, site)
    return env


def _qps(add: Callable[..., None], reason: str) -> None:
    add("NCCL_IB_QPS_PER_CONNECTION", "4", reason, f"{NCCL_ENV_DOC}; {NCCL_IB_SRC} (default 1)")
    add("NCCL_IB_SPLIT_DATA_ON_QPS", "0", "use the QPs in turn, one message each, rather than cutting every "
        "message into 4 small pieces (NCCL 2.18/2.19 default to splitting, 2.20+ do not)",
        f"{NCCL_IB_SRC} (IB_SPLIT_DATA_ON_QPS: 1 until 2.19, 0 from 2.20)")


def _cross_nic(add: Callable[..., None], site: Site) -> None:
    if site.network.spine_oversubscribed:
        add("NCCL_CROSS_NIC", "0", "network.spine_oversubscribed: keep each ring on its rail, off the slow spine; "
            "NCCL's default (2) already prefers rails, 0 forbids crossing", f"{NCCL_ENV_DOC} (NCCL_CROSS_NIC)")


def resolve(site: Site, stage: str, *, debug: bool = False, run_dir: str = "",
            extra: list[EnvVar] | None = None, omp_threads: int | None = None,
            job: list[tuple[str, str, str]] | None = None, container: bool = False,
            debug_nodes: tuple[str, ...] = (), node_local: bool = False) -> list[EnvVar]:
    """Policy (+ launcher extras), then the site's ``nccl.env`` overrides, then the job's own
    environment (``job``: name, value, where it was given: site ``job.env``, ``--env``), which
    wins over both: an ``NCCL_*`` a job sets is the one it gets."""
    merged: dict[str, EnvVar] = {}
    for var in policy(site, stage, debug=debug, run_dir=run_dir, omp_threads=omp_threads,
                      container=container, debug_nodes=debug_nodes, node_local=node_local) + list(extra or []):
        merged[var.name] = var
    for name, value in site.nccl.env.items():
        old = merged.get(name)
        merged[name] = EnvVar(name, str(value), "site", f"site override in {site.name}",
                              replaced=old.value if old else None, ref="the site's nccl.env")
    for name, value, origin in job or ():
        old = merged.pop(name, None)
        merged[name] = EnvVar(name, value, "job", f"the job's environment ({origin})",
                              replaced=old.value if old else None)
    return list(merged.values())
