"""Parsers of node-tool output, on captured text that looks exactly like the real tools'."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterkit.nodes import device_parsers as d
from clusterkit.nodes import parsers as p
from tests.totality import assert_total

DATA = Path(__file__).resolve().parents[1] / "data" / "preflight"


def read(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8", errors="replace")


# --- nvidia-smi ------------------------------------------------------------------------------


def test_gpu_query_eight_h100() -> None:
    q = d.parse_gpu_query(read("nvidia_smi_query_h100x8.csv"))
    assert isinstance(q, d.GpuQuery) and q.state is d.GpuState.OK
    assert [g.index for g in q.gpus] == list(range(8))
    g = q.gpus[3]
    assert g.name == "NVIDIA H100 80GB HBM3"
    assert g.driver_version == "550.54.15"
    assert g.memory_total_mib == 81559
    assert g.persistence_mode is True
    assert g.ecc_uncorrected == 0 and not g.ecc_unreadable
    assert g.mig_mode == "Disabled"
    assert g.pci_bus_id == "00000000:5D:00.0"
    assert q.driver_versions == {"550.54.15"}


def test_gpu_query_mig_and_ecc_and_persistence_off() -> None:
    q = d.parse_gpu_query(read("nvidia_smi_query_a100_mig.csv"))
    assert isinstance(q, d.GpuQuery)
    assert [g.mig_mode for g in q.gpus] == ["Enabled", "Disabled", "Disabled", "Disabled"]
    assert q.gpus[2].persistence_mode is False and q.gpus[2].ecc_uncorrected == 2


def test_gpu_query_na_and_not_supported_cells_are_none() -> None:
    q = d.parse_gpu_query(read("nvidia_smi_query_consumer_na.csv"))
    assert isinstance(q, d.GpuQuery)
    rtx, t4 = q.gpus
    assert rtx.ecc_uncorrected is None and rtx.ecc_raw == "[N/A]" and not rtx.ecc_unreadable
    assert t4.ecc_uncorrected is None and t4.ecc_raw == "[Not Supported]"
    assert rtx.mig_mode is None
    assert q.driver_versions == {"545.29.06", "470.239.06"}


def test_gpu_query_err_cell_is_unreadable_not_a_crash() -> None:
    q = d.parse_gpu_query(read("nvidia_smi_query_err.csv"))
    assert isinstance(q, d.GpuQuery)
    assert q.gpus[1].ecc_uncorrected is None and q.gpus[1].ecc_unreadable


def test_gpu_query_nounits() -> None:
    q = d.parse_gpu_query(read("nvidia_smi_query_nounits.csv"))
    assert isinstance(q, d.GpuQuery) and q.gpus[0].memory_total_mib == 81559


@pytest.mark.parametrize(
    "name,state,words",
    [
        ("nvidia_smi_no_devices.txt", d.GpuState.NO_DEVICES, "No devices were found"),
        ("nvidia_smi_driver_failed.txt", d.GpuState.DRIVER_FAILED, "couldn't communicate"),
        ("nvidia_smi_not_found.txt", d.GpuState.NOT_INSTALLED, "command not found"),
    ],
)
def test_gpu_query_whole_node_states(name: str, state: d.GpuState, words: str) -> None:
    q = d.parse_gpu_query(read(name))
    assert isinstance(q, d.GpuQuery)
    assert q.state is state and q.gpus == () and words in q.message


@pytest.mark.parametrize("name", ["nvidia_smi_garbage.txt", "nvidia_smi_bad_field.txt", "nvidia_smi_header.txt"])
def test_gpu_query_garbage_is_a_parse_failure_with_raw_kept(name: str) -> None:
    text = read(name)
    q = d.parse_gpu_query(text)
    assert isinstance(q, p.ParseFailure)
    assert q.raw == text and q.reason


def test_gpu_query_empty_output() -> None:
    q = d.parse_gpu_query("\n")
    assert isinstance(q, p.ParseFailure) and q.reason == "no output"


@pytest.mark.parametrize(
    "name,version",
    [("nvidia_smi_header.txt", "12.4"), ("nvidia_smi_version.txt", "12.4"), ("nvidia_smi_header_470.txt", "11.4"),
     ("nvidia_smi_version_610.txt", "13.3"), ("nvidia_smi_header_610.txt", "13.3")],
)
def test_cuda_version(name: str, version: str) -> None:
    assert d.parse_cuda_version(read(name)) == version


@pytest.mark.parametrize(
    "text,version",
    [("cuda umd version : 13.4\n", "13.4"),  # spelling case is not relied on
     ("CUDA Version        : 13.2\nCUDA UMD version    : 13.3\n", "13.3"),  # the new name wins
     ('CUDA version        : Deprecated, see "CUDA UMD version" instead\nCUDA UMD version    : 13.3\n', "13.3")],
)
def test_cuda_version_old_and_new_names(text: str, version: str) -> None:
    assert d.parse_cuda_version(text) == version


def test_cuda_version_deprecation_note_alone_is_no_version() -> None:
    r = d.parse_cuda_version('CUDA version        : Deprecated, see "CUDA UMD version" instead\n')
    assert isinstance(r, p.ParseFailure) and "CUDA UMD Version" in r.reason


def test_cuda_version_missing() -> None:
    r = d.parse_cuda_version(read("nvidia_smi_driver_failed.txt"))
    assert isinstance(r, p.ParseFailure) and "CUDA Version" in r.reason


@pytest.mark.parametrize(
    "have,need,ok",
    [("550.54.15", "535.104", True), ("535.104.05", "535.104", True), ("535.86.10", "535.104", False),
     ("470.239.06", "535.104", False), ("12.4", "12.4", True), ("12.2", "12.4", False), ("12", "11.8", True),
     ("garbage", "535", None)],
)
def test_version_at_least(have: str, need: str, ok: bool | None) -> None:
    assert p.version_at_least(have, need) is ok


# --- InfiniBand --------------------------------------------------------------------------------


def test_ibstat_several_cas_and_ethernet_link_layer() -> None:
    inv = d.parse_ibstat(read("ibstat_multi_ca.txt"))
    assert isinstance(inv, d.IbInventory) and inv.source == "ibstat"
    assert inv.hcas == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    m0, = inv.ports_of("mlx5_0")
    assert (m0.state, m0.phys_state, m0.rate_gbps, m0.link_layer) == ("ACTIVE", "LinkUp", 400.0, "InfiniBand")
    m1, = inv.ports_of("mlx5_1")
    assert (m1.state, m1.phys_state) == ("DOWN", "Disabled")
    m2, = inv.ports_of("mlx5_2")
    assert m2.link_layer == "Ethernet" and m2.rate_gbps == 100.0
    p1, p2 = inv.ports_of("mlx5_3")
    assert (p1.port, p1.state, p2.port, p2.state) == (1, "INIT", 2, "ACTIVE")


def test_ibstat_roce_bond() -> None:
    inv = d.parse_ib(read("ibstat_roce.txt"))
    assert isinstance(inv, d.IbInventory)
    port, = inv.ports
    assert port.hca == "mlx5_bond_0" and port.link_layer == "Ethernet" and port.rate_gbps == 200.0


def test_ibstat_ending_in_ibpanic_keeps_what_parsed() -> None:
    """ibstat exits at the first device it cannot stat: the CAs before it stay, that one is missing."""
    inv = d.parse_ib(read("ibstat_partial_ibpanic.txt"))
    assert isinstance(inv, d.IbInventory) and inv.source == "ibstat"
    port, = inv.ports
    assert (port.hca, port.state, port.phys_state, port.rate_gbps, port.link_layer) == \
        ("mlx5_7", "ACTIVE", "LinkUp", 200.0, "InfiniBand")
    assert inv.missing == ("mlx5_8",)
    assert inv.errors == ("ibpanic: main: stat of IB device 'mlx5_8' failed: No such file or directory",)


def test_ibstat_that_only_panics_is_an_inventory_with_the_device_missing() -> None:
    inv = d.parse_ib(read("ibstat_ibpanic_azure_an.txt"))
    assert isinstance(inv, d.IbInventory)
    assert (inv.ports, inv.missing, inv.source) == ((), ("mlx5_an0",), "ibstat")


def test_ibpanic_naming_no_device_and_ibwarn_lines() -> None:
    inv = d.parse_ib("ibwarn: [4260] umad_init: can't read ABI version\n"
                     "ibpanic: [4260] main: can't init UMAD library: (No such file or directory)\n")
    assert isinstance(inv, d.IbInventory) and inv.ports == () and inv.missing == ()
    assert inv.errors[-1] == "ibpanic: main: can't init UMAD library: (No such file or directory)"


def test_ib_sysfs_tree_with_a_down_port() -> None:
    inv = d.parse_ib(read("ib_sysfs_8x400.txt"))
    assert isinstance(inv, d.IbInventory) and inv.source == "sysfs"
    assert inv.hcas == [f"mlx5_{i}" for i in range(8)]
    down, = inv.ports_of("mlx5_3")
    assert (down.state, down.phys_state, down.rate_gbps) == ("DOWN", "Disabled", 10.0)
    up, = inv.ports_of("mlx5_7")
    assert (up.state, up.phys_state, up.rate_gbps, up.link_layer) == ("ACTIVE", "LinkUp", 400.0, "InfiniBand")


def test_ib_sysfs_under_a_sysroot_prefix_roce() -> None:
    inv = d.parse_ib_sysfs(read("ib_sysfs_roce_prefixed.txt"))
    assert isinstance(inv, d.IbInventory)
    assert {port.link_layer for port in inv.ports} == {"Ethernet"} and inv.hcas == ["mlx5_0", "mlx5_1"]


def test_ib_no_hca_is_an_empty_inventory() -> None:
    inv = d.parse_ib("")
    assert isinstance(inv, d.IbInventory) and inv.ports == () and inv.source == "none"


def test_ib_garbage() -> None:
    r = d.parse_ib("ibstat: command not found\n")
    assert isinstance(r, p.ParseFailure) and "unexpected line" in r.reason


# --- mounts, df ------------------------------------------------------------------------------


def test_proc_mounts_lustre_nfs_gpfs_and_octal_spaces() -> None:
    mounts = p.parse_mounts(read("proc_mounts.txt"))
    assert isinstance(mounts, tuple)
    lustre = p.find_mount(mounts, "/lustre/scratch")
    assert lustre is not None and lustre.fstype == "lustre" and lustre.source == "10.0.0.1@o2ib:/scratch"
    assert "flock" in lustre.options
    spaced = p.find_mount(mounts, "/data/shared sets/imagenet")
    assert spaced is not None
    assert spaced.mountpoint == "/data/shared sets" and spaced.source == "nfs02:/vol/datasets shared"
    assert p.find_mount(mounts, "/home/alice").fstype == "nfs4"  # type: ignore[union-attr]
    # a path not under any network mount is served by the root file system
    assert p.find_mount(mounts, "/lustre/other").mountpoint == "/"  # type: ignore[union-attr]
    # "/raid" must not claim "/raidx"
    assert p.find_mount(mounts, "/raidx").mountpoint == "/"  # type: ignore[union-attr]


def test_proc_mounts_garbage() -> None:
    r = p.parse_mounts("cat: /proc/mounts: No such file or directory\n")
    assert isinstance(r, p.ParseFailure)
    assert isinstance(p.parse_mounts(""), p.ParseFailure)


def test_df_lustre_and_block_sizes() -> None:
    d = p.parse_df(read("df_lustre.txt"))
    assert isinstance(d, p.DiskSpace)
    assert d.mountpoint == "/lustre/scratch" and d.available_bytes == 6654020664320 * 1024
    full = p.parse_df(read("df_nfs_full.txt"))
    assert isinstance(full, p.DiskSpace) and full.available_gb == pytest.approx(0.536870912)
    spaced = p.parse_df(read("df_space_mount.txt"))
    assert isinstance(spaced, p.DiskSpace)
    assert spaced.mountpoint == "/data/shared sets" and spaced.source == "nfs02:/vol/datasets shared"
    assert spaced.available_bytes == 3435973837 * 512


def test_df_error_is_a_failure_with_the_message() -> None:
    r = p.parse_df(read("df_error.txt"))
    assert isinstance(r, p.ParseFailure) and "Cannot send after transport endpoint shutdown" in r.reason


def test_modules_lsmod_proc_modules_and_sysfs() -> None:
    assert "nvidia_peermem" in p.parse_modules(read("lsmod.txt"))
    mods = p.parse_modules(read("proc_modules_no_peermem.txt"))
    assert "nvidia_peermem" not in mods and "nvidia" in mods and "mlx5_ib" in mods
    assert p.parse_modules("/x/root/sys/module/nvidia_peermem\n") == {"nvidia_peermem"}


# --- totality ---------------------------------------------------------------------------------

PARSERS = [d.parse_gpu_query, d.parse_cuda_version, d.parse_ib, d.parse_ib_sysfs, d.parse_ibstat, p.parse_mounts,
           p.parse_df, p.parse_modules]


@pytest.mark.parametrize("parser", PARSERS, ids=lambda f: f.__name__)
def test_parsers_are_total_on_mangled_captures(parser) -> None:  # type: ignore[no-untyped-def]
    """Shuffled, truncated and spliced captures never raise: they parse or fail with raw kept."""
    assert_total(parser, [read(f.name) for f in sorted(DATA.iterdir())])
