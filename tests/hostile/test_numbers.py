"""Numbers and bytes from Slurm and nodes: one lenient decoding place (tooltext.parse_int,
parse_float, decode), so no text a cluster prints raises.  Each case mutates a capture
(tests/data, each file's source in its README) the way a hostile or broken cluster would:
``²`` (``isdigit()`` yes, ``int()`` no), ``٣`` (a digit int() takes, not an ASCII one), a
5,000-digit number (past int()'s 4,300-digit limit), ``1e400`` (a float that is infinite),
a 200 KB CSV field (past the csv module's field limit), an invalid UTF-8 byte.  Every parser
must return a value or a ParseFailure; the admin commands must end in one clusterkit error
line or a draft, never a traceback."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from clusterkit.errors import ClusterkitError
from clusterkit.nodes import device_parsers as D
from clusterkit.nodes import facts as F
from clusterkit.nodes import parsers as P
from clusterkit.scheduler.slurm import tables as ST
from clusterkit.sites import admin
from clusterkit.sites import slurm_text as T
from clusterkit.slurmtext import parse_exit_code, parse_time
from clusterkit.tooltext import decode, parse_float, parse_int

REPO = Path(__file__).resolve().parents[2]
PRE = REPO / "tests" / "data" / "preflight"
SLURM = REPO / "tests" / "data" / "sites" / "slurm-22.05"

BIG = "9" * 5000
MUTATIONS: dict[str, Callable[[str], str]] = {
    "superscript-digits": lambda t: re.sub(r"(?<![0-9])[0-9]+", "²", t),
    "arabic-digits": lambda t: re.sub(r"(?<![0-9])[0-9]+", "٣", t),
    "5000-digit-numbers": lambda t: re.sub(r"(?<![0-9])[0-9]+", BIG, t, count=40),
    "1e400": lambda t: re.sub(r"(?<![0-9.])[0-9]+(?:\.[0-9]+)?", "1e400", t, count=40),
    "400-digit-floats": lambda t: re.sub(r"(?<![0-9])[0-9]+", "9" * 400, t, count=40),
    "invalid-utf8": lambda t: decode(t.encode().replace(b"0", b"\xff", 5)),
    "200kb-field": lambda t: t.replace(",", "," + "x" * 200_000, 1) if "," in t else t + "x" * 200_000,
    "nul-and-controls": lambda t: t.replace(" ", "\x00\x1c\x85\u2028 ", 10),
}

NODE_PARSERS: dict[str, tuple[Callable[[str], Any], Sequence[str]]] = {
    "gpu_query": (D.parse_gpu_query, ["nvidia_smi_query_h100x8.csv", "nvidia_smi_query_a100_mig.csv",
                                      "nvidia_smi_query_nounits.csv"]),
    "cuda_version": (D.parse_cuda_version, ["nvidia_smi_version.txt", "nvidia_smi_header.txt",
                                            "nvidia_smi_version_610.txt"]),
    "ib_sysfs": (D.parse_ib_sysfs, ["ib_sysfs_8x400.txt", "ib_sysfs_roce_prefixed.txt"]),
    "ibstat": (D.parse_ibstat, ["ibstat_multi_ca.txt", "ibstat_roce.txt", "ibstat_partial_ibpanic.txt"]),
    "ib": (D.parse_ib, ["ibstat_multi_ca.txt", "ib_sysfs_8x400.txt"]),
    "mounts": (P.parse_mounts, ["proc_mounts.txt"]),
    "df": (P.parse_df, ["df_lustre.txt", "df_nfs_full.txt", "df_space_mount.txt"]),
    "modules": (P.parse_modules, ["lsmod.txt", "proc_modules_no_peermem.txt"]),
    "version": (P.version_tuple, ["nvidia_smi_version.txt"]),
    "interfaces": (F.parse_interfaces, ["ib_sysfs_8x400.txt"]),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
@pytest.mark.parametrize("parser", sorted(NODE_PARSERS))
def test_node_tool_parsers_never_raise(parser: str, mutation: str) -> None:
    parse, files = NODE_PARSERS[parser]
    for name in files:
        text = MUTATIONS[mutation]((PRE / name).read_text())
        result = parse(text)  # a value or a ParseFailure; an exception fails the test
        assert result is not None or parser == "version"


SLURM_PARSERS: dict[str, tuple[Callable[[str], Any], Sequence[str]]] = {
    "nodes": (T.parse_nodes, ["show-node-o.txt", "show-node-o-typed.txt", "show-node-multiline.txt"]),
    "partitions": (T.parse_partitions, ["show-partition-o.txt", "show-partition-multiline.txt"]),
    "config": (T.parse_config, ["show-config.txt"]),
    "scontrol_jobs": (ST.parse_scontrol_jobs, ["show-job-o-hostile.txt"]),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
@pytest.mark.parametrize("parser", sorted(SLURM_PARSERS))
def test_slurm_text_parsers_never_raise(parser: str, mutation: str) -> None:
    parse, files = SLURM_PARSERS[parser]
    for name in files:
        parsed = parse(MUTATIONS[mutation]((SLURM / name).read_text()))
        for node in getattr(parsed, "nodes", ()):  # the derived numbers too
            assert node.gpus is None or 0 <= node.gpus < 10**16
            assert node.cpus is None or node.cpus < 10**13


@pytest.mark.parametrize("text", ["²", "٣", BIG, BIG + ":0", "0:" + BIG, "1e400", "-1", "+", "", " 7 ", "0x10",
                                  "1_000", "inf", "nan", BIG + "-00:00:00"])
def test_the_one_number_decoder(text: str) -> None:
    i, f = parse_int(text), parse_float(text)
    assert i is None or (text.strip().isascii() and i == int(text))
    assert f is None or (f == float(text) and abs(f) < 1e18)
    assert (parse_exit_code(text) is not None and parse_time(text) is None) or True  # total: no exception


def _admin_run(node_text: str, part_text: str | None = None) -> Callable[[Sequence[str]], str]:
    files = {("scontrol", "show", "config"): "show-config.txt",
             ("scontrol", "show", "partition", "-o"): "show-partition-o.txt"}

    def run(argv: Sequence[str]) -> str:
        key = tuple(argv)
        if key == ("scontrol", "show", "node", "-o"):
            return node_text
        if key == ("scontrol", "show", "partition", "-o") and part_text is not None:
            return part_text
        return (SLURM / files[key]).read_text()
    return run


NODE = (SLURM / "show-node-o.txt").read_text()
PART = (SLURM / "show-partition-o.txt").read_text()
NODE_CASES = {
    "CPUTot=²": NODE.replace("CPUTot=8", "CPUTot=²").replace("CPUEfctv=8", "CPUEfctv=²"),
    "RealMemory 400 digits": NODE.replace("RealMemory=64000", "RealMemory=" + "9" * 400),
    "RealMemory 5000 digits": NODE.replace("RealMemory=64000", "RealMemory=" + BIG),
    "Gres count 5000 digits": NODE.replace("Gres=gpu:8", "Gres=gpu:" + BIG),
    "Gres count times P": NODE.replace("Gres=gpu:8", "Gres=gpu:999999999999P"),
    "CfgTRES gres/gpu 5000 digits": NODE.replace("Gres=gpu:8", "Gres=(null)").replace(
        "billing=8", "billing=8,gres/gpu=" + BIG),
    "NodeName not UTF-8": NODE.replace("NodeName=node1", "NodeName=node\ufffd1"),
    "Gres type not UTF-8": NODE.replace("Gres=gpu:8", "Gres=gpu:h\ufffd100:8"),
    "State not UTF-8": NODE.replace("State=IDLE", "State=ID\ufffdLE"),
}
PART_CASES = {
    "Nodes=@group": PART.replace("Nodes=node[1-4]", "Nodes=@rack1"),
    "Nodes=unbalanced": PART.replace("Nodes=node[1-4]", "Nodes=node[1-4]]x,,y["),
    "Nodes=10^8 hosts": PART.replace("Nodes=node[1-4]", "Nodes=node[1-99999999]"),
    "Nodes=not UTF-8": PART.replace("Nodes=node[1-4]", "Nodes=n\ufffdode[1-4]"),
}


@pytest.mark.parametrize("case", sorted(NODE_CASES) + sorted(PART_CASES))
def test_init_and_drift_on_hostile_slurm_text_end_in_a_draft_or_one_error(case: str, tmp_path: Path) -> None:
    run = _admin_run(NODE_CASES.get(case, NODE), PART_CASES.get(case))
    site = REPO / "site_configs" / "testbed.yaml"
    try:
        draft = admin.init_site("tb", partition=None, nodes=None, probe_with=None, run=run)
    except ClusterkitError as exc:
        assert ((case in PART_CASES and "not a plain host list" in str(exc))
                or (case == "Gres count times P" and "draft line" in str(exc) and "/tmp" not in str(exc))), exc
    else:
        assert case not in PART_CASES
        assert "\ufffd" not in draft.text.split("nodelist:")[1].splitlines()[0]  # never a bad host name
    result = admin.drift_sites([str(site)], run=run)
    assert result.exit_code in (0, 1) if case not in PART_CASES else result.exit_code == 1


@pytest.mark.parametrize("sep", ["\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\r", "\x0b", "\x0c"])
def test_a_line_separator_in_free_text_starts_no_record(sep: str) -> None:
    # str.splitlines() splits at each of these: another user's job name or a node's OS string
    # would start a record of its own (a forged job result, an extra host in a nodelist)
    job = f"JobId=77 JobName=a{sep}JobId=1234 JobState=FAILED ExitCode=13:0 JobState=RUNNING ExitCode=0:0\n"
    assert [j["JobId"] for j in ST.parse_scontrol_jobs(job)] == ["77"]
    node = NODE.replace("OS=Linux", f"OS=Linux{sep}NodeName=evil1 State=IDLE", 1)
    assert "evil1" not in {n.name for n in T.parse_nodes(node).nodes}
