"""Write the SSH-lab node profiles used by the preflight tests: ``tests/sshlab/profiles/<name>/``.

Each profile is what one kind of node looks like to the preflight script:

* ``bin/``  fake tools found first on PATH (``nvidia-smi``, ``dmesg``; ``df``/``timeout``/``sleep`` where a
  fault needs them); ``nvidia-smi -q``, ``nvidia-smi nvlink -s`` and ``dmesg`` print real captures
  (tests/data/captures) with the profile's fault written in
* ``root/`` the node's sysroot (``CLUSTERKIT_SYSROOT``): ``sys/class/infiniband``,
  ``sys/module/nvidia_peermem``, ``proc/mounts`` and the storage directories themselves.

The output of the fake tools is the real tools' format, byte for byte where it matters.
Run ``python tests/preflight/make_profiles.py`` after changing this file; the profiles are
committed so the lab needs no generation step.
"""

from __future__ import annotations

import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

PROFILES = Path(__file__).resolve().parents[1] / "sshlab" / "profiles"
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "toolkit"))
from clusterkit.nodes.device_parsers import GPU_QUERY_FIELDS  # noqa: E402 - after the sys.path line above

BUS_IDS = ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]


@dataclass(frozen=True)
class Node:
    """The facts one profile serves."""

    gpus: int = 8
    gpu_name: str = "NVIDIA H100 80GB HBM3"
    driver: str = "550.54.15"
    cuda: str = "12.4"
    ecc: dict[int, int] = field(default_factory=dict)  # GPU index -> uncorrected count
    smi: str = "normal"  # normal | garbage
    ib_down: tuple[int, ...] = ()
    lustre: bool = True
    hung_path: str | None = None  # fake df sleeps on this path
    hung_command: bool = False  # fake `timeout` sleeps: the whole remote script hangs
    hcas: int = 8
    link_layer: str = "InfiniBand"
    rate: str = "400 Gb/sec (4X NDR)"
    memlock: tuple[str, str] = ("unlimited", "unlimited")  # soft, hard (bytes)
    gids: dict[int, dict[int, tuple[str, str]]] = field(default_factory=dict)  # HCA -> index -> (type, gid)
    ifaces: dict[str, tuple[str, ...]] | None = None  # fake `ip`: interface -> IPv4 addresses
    remap_pending: tuple[int, ...] = ()  # GPUs (index in `nvidia-smi -q`) with row remapping pending
    link_x8: tuple[int, ...] = ()  # GPUs whose PCIe link trained at x8 in their x16 slot
    nvlink_down: dict[int, int] = field(default_factory=dict)  # GPU -> link that is <inactive>
    xid_log: str | None = None  # a kernel-log capture the fake dmesg prints
    symbol_errors: dict[int, int] = field(default_factory=dict)  # HCA -> symbol errors taken per counter wait


# the kernel's GID type names (drivers/infiniband/core/cache.c) and IPv4-mapped GIDs of 10.1.0.17
V2_GID = ("RoCE v2", "0000:0000:0000:0000:0000:ffff:0a01:0011")
V1_GID = ("IB/RoCE v1", "0000:0000:0000:0000:0000:ffff:0a01:0011")
V6_GID = ("RoCE v2", "fe80:0000:0000:0000:0e42:a1ff:fe5e:7c10")
_ROCE = dict(gpus=4, gpu_name="NVIDIA A100-SXM4-80GB", hcas=2, link_layer="Ethernet", rate="200 Gb/sec (4X HDR)")


PROFILE_NODES: dict[str, Node] = {
    "healthy": Node(),
    "gpu_missing": Node(gpus=7),
    "ib_down": Node(ib_down=(3,)),
    "old_driver": Node(driver="470.239.06", cuda="11.4"),
    "no_lustre": Node(lustre=False),
    "ecc_errors": Node(ecc={5: 3}),
    "garbage_smi": Node(smi="garbage"),
    "hung_mount": Node(hung_path="/lustre/scratch"),
    "hung_command": Node(hung_command=True),
    # a RoCE node: two ConnectX-6 Dx ports on Ethernet, 200 Gb/s
    "roce": Node(**_ROCE, gids={0: {3: V2_GID}, 1: {3: V2_GID}}, ifaces={"bond0": ("10.1.0.17",)}),  # type: ignore[arg-type]
    # index 3 is RoCE v1 on mlx5_0 and an IPv6 GID on mlx5_1: a pinned NCCL_IB_GID_INDEX=3 hangs
    "roce_bad_gid": Node(**_ROCE, gids={0: {3: V1_GID}, 1: {3: V6_GID}},  # type: ignore[arg-type]
                         ifaces={"bond0": ("10.1.0.18",)}),
    # the bond is up but has no IPv4 address; memlock is the distribution's 64 KiB, soft and hard
    # the deeper health checks' faults, each on an otherwise healthy node
    "remap_pending": Node(remap_pending=(3,)),
    "xid79": Node(xid_log="gpud-xid-79-nvswitch.txt"),
    "pcie_x8": Node(link_x8=(5,)),
    "ib_symbol_errors": Node(symbol_errors={2: 7}),
    "nvlink_down": Node(nvlink_down={2: 7}),
    "roce_no_ipv4": Node(**_ROCE, gids={0: {3: V2_GID}, 1: {3: V2_GID}}, ifaces={"bond0": ()},  # type: ignore[arg-type]
                         memlock=("65536", "65536")),
}

CAPTURES = Path(__file__).resolve().parents[1] / "data" / "captures"


def _capture(kind: str, name: str) -> str:
    """The body of a real capture (tests/data/captures/KIND/NAME, after its header), ending in a
    newline as the tools' output does (a fixture saved without its last one gets it back)."""
    body = (CAPTURES / kind / name).read_text().partition("# ---\n")[2]
    return body if not body or body.endswith("\n") else body + "\n"


def smi_query_text(n: Node) -> str:
    """``nvidia-smi -q`` of the profile: the real H100 capture (driver 535.183.01), with the one
    slowdown it shows (GPU 00000000:53:00.0's HW Power Brake, Active) set Not Active on a healthy
    node, and the profile's faults written into the GPU blocks they name."""
    text = _capture("nvidia-smi", "gpud-q-535.183.01-h100.txt")
    text = text.replace("HW Power Brake Slowdown       : Active", "HW Power Brake Slowdown       : Not Active")
    blocks = re.split(r"(?m)^(?=GPU 0000)", text)
    for i in n.remap_pending:
        blocks[i + 1] = re.sub(r"(Remapped Rows\n(?:.*\n)*?\s+Pending\s+: )No", r"\1Yes", blocks[i + 1], count=1)
    for i in n.link_x8:
        blocks[i + 1] = re.sub(r"(Link Width\n\s+Max\s+: 16x\n\s+Current\s+: )16x", r"\g<1>8x", blocks[i + 1])
    return "".join(blocks)


def nvlink_text(n: Node) -> str:
    """``nvidia-smi nvlink -s`` of the profile: the real 8 x A100 capture (12 links each at 25 GB/s)
    with the profile's GPU name, and '<inactive>' (as nvidia-smi prints a down link) where it says."""
    text = _capture("nvlink", "gpud-a100-8gpu-all-up.txt").replace("NVIDIA A100-SXM4-80GB", n.gpu_name)
    blocks = re.split(r"(?m)^(?=GPU \d)", text)
    for gpu, link in n.nvlink_down.items():
        blocks[gpu + 1] = blocks[gpu + 1].replace(f"Link {link}: 25 GB/s", f"Link {link}: <inactive>")
    return "".join(blocks)


def _dmesg(name: str, n: Node) -> str:
    body = _capture("kernel-log", n.xid_log) if n.xid_log else ""
    what = f"the kernel log of {n.xid_log}" if n.xid_log else "a kernel log with no NVRM line"
    return f"#!/bin/bash\n# fake dmesg (profile {name}): {what}\ncat <<'EOF'\n{body}EOF\n"


def _sleep(name: str, n: Node) -> str:
    bumps = "".join(f'f="$CLUSTERKIT_SYSROOT/sys/class/infiniband/mlx5_{h}/ports/1/counters/symbol_error"; '
                    f'read -r v < "$f"; echo $((v + {k})) > "$f"\n' for h, k in n.symbol_errors.items())
    return (f"#!/bin/bash\n# fake sleep (profile {name}): while preflight waits between its two reads of the\n"
            f"# InfiniBand counters, the port takes symbol errors (a cable going bad)\n{bumps}exec /bin/sleep \"$@\"\n")


# /proc/self/limits as captured (tests/data/preflight/proc_self_limits.txt), the locked-memory row per profile
LIMITS_CAPTURE = Path(__file__).resolve().parents[1] / "data" / "preflight" / "proc_self_limits.txt"


def _limits(soft: str, hard: str) -> str:
    return re.sub(r"(?m)^(Max locked memory\s+)\S+(\s+)\S+(\s+bytes)",
                  lambda m: f"{m.group(1)}{soft:<21}{hard:<21}bytes", LIMITS_CAPTURE.read_text())


def _ip(name: str, ifaces: dict[str, tuple[str, ...]]) -> str:
    """A fake ``ip`` answering ``ip -o -4 addr show dev IF`` as iproute2 does (captured format)."""
    cases = []
    for i, (ifname, addrs) in enumerate(sorted(ifaces.items()), start=3):
        lines = "".join(f"{i}: {ifname}    inet {a}/16 brd 10.1.255.255 scope global {ifname}\\       "
                        "valid_lft forever preferred_lft forever\n" for a in addrs)
        cases.append(f"{ifname}) printf '%s' '{lines}' ;;")
    return f"""#!/bin/bash
# fake ip (profile {name}): `ip -o -4 addr show dev IF` for {', '.join(sorted(ifaces))}
[ "$1 $2 $3 $4 $5" = "-o -4 addr show dev" ] || {{ echo "fake ip: only -o -4 addr show dev IF" >&2; exit 2; }}
case "$6" in
{chr(10).join(cases)}
*) echo 'Device "'"$6"'" does not exist.' >&2; exit 1 ;;
esac
"""



def _query_rows(n: Node) -> str:
    rows = []
    for i in range(n.gpus):
        rows.append(f"{i}, {n.gpu_name}, {n.driver}, 81559 MiB, Enabled, {n.ecc.get(i, 0)}, Disabled, "
                    f"00000000:{BUS_IDS[i]}:00.0")
    return "\n".join(rows)


def _header(n: Node) -> str:
    return (
        "Fri Mar 15 09:12:44 2024       \n"
        "+-----------------------------------------------------------------------------------------+\n"
        f"| NVIDIA-SMI {n.driver:<23}Driver Version: {n.driver:<15}CUDA Version: {n.cuda:<9}|\n"
        "|-----------------------------------------+------------------------+----------------------+\n"
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |\n"
    )


def _nvidia_smi(name: str, n: Node) -> str:
    if n.smi == "garbage":
        return ("#!/bin/bash\n# fake nvidia-smi (profile garbage_smi): a wedged tool printing noise\n"
                "printf '\\x1b[31m\\xef\\xbf\\xbdq 7f3a9c segfault at 0000 ip 00007f error 4\\n%%%%%% nvml?? ,,,,\\n'\n"
                "exit 0\n")
    fields = ",".join(GPU_QUERY_FIELDS)
    old = n.driver.startswith("470")
    version = ("    echo \"Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\"\n    exit 2"
               if old else
               f"    printf 'NVIDIA-SMI version  : {n.driver}\\nNVML version        : {n.driver.rsplit('.', 1)[0]}\\n"
               f"DRIVER version      : {n.driver}\\nCUDA Version        : {n.cuda}\\n'")
    return f"""#!/bin/bash
# fake nvidia-smi (profile {name}): {n.gpus} x {n.gpu_name}, driver {n.driver}, CUDA {n.cuda}
case "$*" in
--query-gpu={fields}" --format=csv,noheader"*)
    cat <<'EOF'
{_query_rows(n)}
EOF
    ;;
--query-gpu=*)
    echo 'Field "'"${{1#--query-gpu=}}"'" is not a valid field to query.'; echo; exit 2 ;;
--version)
{version} ;;
-q)
    cat <<'EOF'
{smi_query_text(n)}EOF
    ;;
"nvlink -s")
    cat <<'EOF'
{nvlink_text(n)}EOF
    ;;
"")
    cat <<'EOF'
{_header(n)}EOF
    ;;
*)
    echo "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."; exit 2 ;;
esac
"""


def _hung_df(path: str) -> str:
    return f"""#!/bin/bash
# fake df (profile hung_mount): a hard NFS/Lustre mount whose server stopped answering.
for a in "$@"; do
    case "$a" in *{path}|*{path}/*) exec sleep 300 ;; esac
done
exec /bin/df "$@"
"""


HUNG_TIMEOUT = """#!/bin/bash
# fake timeout (profile hung_command): the node accepts the command and never answers.
exec sleep 60
"""


def _mounts(n: Node) -> str:
    lines = [
        "sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0",
        "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0",
        "/dev/md0 / ext4 rw,relatime,stripe=256 0 0",
        "tmpfs /dev/shm tmpfs rw,nosuid,nodev,inode64 0 0",
        "/dev/md1 /raid ext4 rw,relatime,stripe=256 0 0",
    ]
    if n.lustre:
        lines.append("10.0.0.1@o2ib:/scratch /lustre/scratch lustre rw,flock,lazystatfs 0 0")
    lines.append("nfs01:/export/home /home nfs4 rw,relatime,vers=4.2,rsize=1048576,wsize=1048576,namlen=255,"
                 "hard,proto=tcp,timeo=600,retrans=2,sec=sys,clientaddr=10.1.2.17,local_lock=none,addr=10.1.0.5 0 0")
    return "\n".join(lines) + "\n"


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def make_profile(name: str, n: Node, dest: Path = PROFILES) -> None:
    """(Re)write one profile directory under ``dest``."""
    d = dest / name
    shutil.rmtree(d, ignore_errors=True)
    _write(d / "bin" / "nvidia-smi", _nvidia_smi(name, n), 0o755)
    if n.hung_path:
        _write(d / "bin" / "df", _hung_df(n.hung_path), 0o755)
    if n.hung_command:
        _write(d / "bin" / "timeout", HUNG_TIMEOUT, 0o755)
    root = d / "root"
    for i in range(n.hcas):
        port = root / "sys" / "class" / "infiniband" / f"mlx5_{i}" / "ports" / "1"
        down = i in n.ib_down
        _write(port / "state", "1: DOWN\n" if down else "4: ACTIVE\n")
        _write(port / "phys_state", "3: Disabled\n" if down else "5: LinkUp\n")
        _write(port / "rate", "10 Gb/sec (4X SDR)\n" if down else f"{n.rate}\n")
        _write(port / "link_layer", f"{n.link_layer}\n")
        for index, (gid_type, gid) in n.gids.get(i, {}).items():
            _write(port / "gid_attrs" / "types" / str(index), f"{gid_type}\n")
            _write(port / "gids" / str(index), f"{gid}\n")
        # the error counters as the real H100 sysfs capture shows them
        for counter, value in (("symbol_error", "0"), ("link_downed", "0"), ("port_rcv_errors", "14")):
            _write(port / "counters" / counter, value)
    _write(d / "bin" / "dmesg", _dmesg(name, n), 0o755)
    if n.symbol_errors:
        _write(d / "bin" / "sleep", _sleep(name, n), 0o755)
    _write(root / "proc" / "self" / "limits", _limits(*n.memlock))
    if n.ifaces is not None:
        _write(d / "bin" / "ip", _ip(name, n.ifaces), 0o755)
    _write(root / "sys" / "module" / "nvidia_peermem" / "refcnt", "0\n")
    _write(root / "proc" / "mounts", _mounts(n))
    for path in ("lustre/scratch", "home"):
        _write(root / path / ".keep", "")
    _write(d / "README", f"sshlab node profile {name!r}: written by tests/preflight/make_profiles.py\n{n}\n")


def main(dest: Path = PROFILES) -> None:
    for name, node in PROFILE_NODES.items():
        make_profile(name, node, dest)
    print(f"wrote {len(PROFILE_NODES)} profiles under {dest}")


if __name__ == "__main__":
    main()

__all__ = ["PROFILE_NODES", "Node", "main", "make_profile"]
