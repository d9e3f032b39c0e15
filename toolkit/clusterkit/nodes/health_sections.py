"""The deeper health sections: ``nvidia-smi -q`` (row remapping, retired pages, the PCIe link,
clock event reasons), ``nvidia-smi nvlink -s``, two reads of ``nvidia-smi nvlink -e`` (the links'
error counters), the kernel log's Xid lines since boot, and two
reads of the InfiniBand error counters some seconds apart.  Their parsers are
:mod:`clusterkit.nodes.smi_query` and :mod:`clusterkit.nodes.health_parsers`."""

from __future__ import annotations

from clusterkit.nodes.health_parsers import IB_COUNTERS
from clusterkit.nodes.script import Section

#: seconds between the two reads of the InfiniBand error counters
COUNTER_INTERVAL_S = 2


# ``nvidia-smi -q`` prints some 9 KB per GPU; only these blocks come back (about 1 KB per GPU,
# so a 4,096-node run does not pull 300 MB): every line before the first GPU block (the header,
# or nvidia-smi's own error), each ``GPU <bus id>`` line, the performance state, the clock
# event (throttle) reasons, retired pages, remapped rows and PCI's GPU Link Info, as printed.
_SMI_Q_KEEP = ("BEGIN { top = \"\"; sub8 = \"\"; seen = 0 } "
               "/^GPU / { seen = 1; top = \"\"; print; next } "
               "!seen { print; next } "
               "/^    [^ ]/ { top = $0; sub(/^ +/, \"\", top); sub(/ *:.*/, \"\", top); sub8 = \"\"; "
               "if (top ~ /^(Performance State|Clocks Event Reasons|Clocks Throttle Reasons|Retired Pages|"
               "Remapped Rows|PCI)$/) print; next } "
               "/^        [^ ]/ { sub8 = $0; sub(/^ +/, \"\", sub8); sub(/ *:.*/, \"\", sub8) } "
               "top ~ /^(Clocks Event Reasons|Clocks Throttle Reasons|Retired Pages|Remapped Rows)$/ { print; next } "
               "top == \"PCI\" && sub8 == \"GPU Link Info\" { print }")


def smi_query_section(timeout_s: float) -> Section:
    """The blocks of ``nvidia-smi -q`` the health checks read; skipped when the GPU query hung."""
    return Section("smi_q", f"nvidia-smi -q 2>&1 | awk '{_SMI_Q_KEEP}'", timeout_s, unless_timed_out="gpu")


def nvlink_section(timeout_s: float) -> Section:
    """``nvidia-smi nvlink -s``; skipped when the GPU query hung."""
    return Section("nvlink", "nvidia-smi nvlink -s", timeout_s, unless_timed_out="gpu", simple=True)


def nvlink_errors_section(timeout_s: float) -> Section:
    """``nvidia-smi nvlink -e`` read, then read again :data:`COUNTER_INTERVAL_S` seconds later
    where the first read listed links (a GPU without NVLink prints none: no wait); skipped when
    the GPU query hung."""
    read = "nvidia-smi nvlink -e 2>&1"
    return Section("nvlink_e", f"a=$({read}); echo 'read 1'; printf '%s\\n' \"$a\"; "
                   f"case \"$a\" in *'Link '*) sleep {COUNTER_INTERVAL_S}; "
                   f"echo 'read 2 after {COUNTER_INTERVAL_S} s'; {read} ;; esac; true",
                   2 * timeout_s + COUNTER_INTERVAL_S, unless_timed_out="gpu")


# dmesg where the kernel lets this user read it (its ring buffer: the newest messages), else
# the journal's kernel messages of this boot; a journal this user may not read (it then shows
# only the user's own messages and says so) is no answer.  Only the driver's Xid lines come
# back (the last 200), after a line naming the log read.
_XID = ("if l=$(dmesg 2>&1); then s=dmesg; else d=$l; "
        "if l=$(journalctl -k -b --no-pager 2>&1) && ! printf '%s\\n' \"$l\" "
        "| grep -qiE 'insufficient permissions|not seeing messages from other users'; then s=journalctl; "
        "else printf 'kernel log unreadable: %s\\n' \"$(printf '%s\\n' \"$d\" | head -n 1)\"; exit 0; fi; fi; "
        "echo \"kernel log: $s\"; printf '%s\\n' \"$l\" | grep -F 'NVRM: Xid' | tail -n 200; true")


def xid_section(timeout_s: float) -> Section:
    """The kernel log's ``NVRM: Xid`` lines since boot."""
    return Section("xid", _XID, timeout_s)


def ib_counters_section() -> Section:
    """The ports' error counters, read, then read again :data:`COUNTER_INTERVAL_S` seconds later
    where the first read found any (a node without them: an empty second read, no wait)."""
    files = " ".join(f'"$CK_ROOT"/sys/class/infiniband/*/ports/*/counters/{c}' for c in IB_COUNTERS)
    read = f"grep -H '' {files} 2>/dev/null"
    return Section("ib_counters", f"a=$({read}); echo 'read 1'; printf '%s\\n' \"$a\"; "
                   f"if [ -n \"$a\" ]; then sleep {COUNTER_INTERVAL_S}; "
                   f"echo 'read 2 after {COUNTER_INTERVAL_S} s'; {read}; else echo 'read 2'; fi; true",
                   COUNTER_INTERVAL_S + 5.0)
