"""What the common Xid numbers mean (after NVIDIA's Xid catalogue, in clusterkit's words) and
whether one since boot says the node's hardware needs an admin: ``HARDWARE`` Xids fail
preflight's ``gpu.xid``; ``APPLICATION`` ones (most often a program's own fault, or the
clean-up after one), ``NOTICE`` ones (a record of what another check judges) and numbers not
in this table are reported by ``gpu.xid_other``."""

from __future__ import annotations

HARDWARE = "hardware"
APPLICATION = "application"
NOTICE = "notice"  # a record of something another check judges (a row remapping recorded)
UNKNOWN = "unknown"

# Xid -> (class, meaning)
XIDS: dict[int, tuple[str, str]] = {
    13: (APPLICATION, "graphics engine exception (usually the program: an illegal instruction or address)"),
    31: (APPLICATION, "GPU memory page fault (usually the program reading or writing a bad address)"),
    43: (APPLICATION, "GPU stopped processing a channel after a program's fault"),
    45: (APPLICATION, "channels cleaned up after a process ended or an earlier error"),
    48: (HARDWARE, "double-bit ECC error in GPU memory"),
    61: (HARDWARE, "internal micro-controller breakpoint/warning (the GPU may need a reset)"),
    62: (HARDWARE, "internal micro-controller halted (the GPU needs a reset)"),
    63: (NOTICE, "ECC page retirement or row remapping recorded (gpu.row_remap says if one is still pending)"),
    64: (HARDWARE, "ECC page retirement or row remapping failed"),
    68: (HARDWARE, "video decoder (NVDEC) exception"),
    69: (HARDWARE, "graphics engine class error"),
    74: (HARDWARE, "NVLink error"),
    79: (HARDWARE, "GPU has fallen off the bus (PCIe link lost)"),
    92: (HARDWARE, "high single-bit ECC error rate"),
    94: (HARDWARE, "contained ECC error (the GPU needs a reset)"),
    95: (HARDWARE, "uncontained ECC error (the GPU needs a reset)"),
    109: (APPLICATION, "context switch timeout (a program's kernel that does not yield, or the driver)"),
    119: (HARDWARE, "GSP firmware RPC timeout (the GPU needs a reset)"),
    120: (HARDWARE, "GSP firmware error (the GPU needs a reset)"),
    140: (HARDWARE, "unrecovered ECC error"),
}


def xid_class(xid: int) -> str:
    return XIDS.get(xid, (UNKNOWN, ""))[0]


def xid_meaning(xid: int) -> str:
    return XIDS.get(xid, (UNKNOWN, "not in clusterkit's table: see NVIDIA's Xid catalogue"))[1]
