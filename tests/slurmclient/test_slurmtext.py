"""scontrol's Key=Value records read field by field: free text that spells other fields cannot
replace the fields Slurm printed.  Real records: Slurm 22.05.8 node lines captured on the test
cluster (tests/data/sites/slurm-22.05, see its README) and the abridged `scontrol -o show job`
records of tests/submit/test_records.py; the hostile values are put where Slurm prints free text."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from clusterkit.slurmtext import parse_exit_code, parse_time, split_record
from clusterkit.vocab import slurm_seconds

DATA = Path(__file__).resolve().parents[1] / "data" / "sites" / "slurm-22.05"
NODE2 = (DATA / "show-node-o-down-drain.txt").read_text().splitlines()[1]   # node2: DOWN, Reason=test
OS = "OS=Linux 6.18.44-fc-v1045 #1 SMP PREEMPT_DYNAMIC @0 "
JOB = ("JobId=7001 JobName=f.sh UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901758 Nice=0 "
       "Account=(null) QOS=(null) JobState=FAILED Reason=NonZeroExitCode Dependency=(null) Requeue=1 Restarts=0 "
       "BatchFlag=1 Reboot=0 ExitCode=3:0 RunTime=00:00:00 TimeLimit=UNLIMITED NodeList=node1 BatchHost=node1 "
       "NumNodes=1 NumCPUs=1 Command=/tmp/ckt/f.sh WorkDir=/tmp/ckt StdOut=/tmp/ckt/slurm-2.out Power= ")


def test_captured_node_record() -> None:
    kv = split_record(NODE2)
    assert kv["NodeName"] == "node2" and kv["OS"] == OS[3:].strip() and kv["RealMemory"] == "64000"
    assert kv["State"].startswith("DOWN") and kv["Reason"].startswith("test [")


def _with_os(line: str, text: str) -> str:
    assert OS in line
    return line.replace(OS, f"OS=Linux {text} ", 1)


@pytest.mark.parametrize("hostile", [
    "RealMemory=1",                                       # a field Slurm prints right after OS
    "RealMemory=1 AllocMem=0 FreeMem=9 State=IDLE",       # several, in Slurm's own order
    "State=IDLE Reason=fine",                             # a field printed later, and free text
    "NodeName=evil",                                      # the record's first key
])
def test_os_cannot_replace_later_fields(hostile: str) -> None:
    real = split_record(NODE2)
    kv = split_record(_with_os(NODE2, hostile))
    assert kv["OS"] == f"Linux {hostile}"
    for key in ("NodeName", "RealMemory", "AllocMem", "FreeMem", "State", "Reason"):
        assert kv[key] == real[key], key


@pytest.mark.parametrize("hostile", ["State=IDLE", "RealMemory=999999 State=IDLE", "NodeName=node1 Partitions=x"])
def test_reason_cannot_replace_earlier_fields(hostile: str) -> None:
    real = split_record(NODE2)
    line = NODE2.replace("Reason=test ", f"Reason=test {hostile} ", 1)
    kv = split_record(line)
    assert kv["Reason"].startswith(f"test {hostile} [")
    for key in ("NodeName", "RealMemory", "State", "Partitions"):
        assert kv[key] == real[key], key


def test_hostile_os_and_reason_together() -> None:
    line = _with_os(NODE2, "RealMemory=1 State=IDLE").replace("Reason=test ", "Reason=test RealMemory=2 State=IDLE ", 1)
    kv = split_record(line)
    assert (kv["RealMemory"], kv["State"][:4]) == ("64000", "DOWN")


@pytest.mark.parametrize("field,hostile", [
    ("WorkDir=/tmp/ckt", "WorkDir=/tmp/a JobState=COMPLETED ExitCode=0:0"),
    ("JobName=f.sh", "JobName=f JobState=COMPLETED ExitCode=0:0 Restarts=9"),
    ("Command=/tmp/ckt/f.sh", "Command=/tmp/f.sh NodeList=evil[1-9]"),
    ("StdOut=/tmp/ckt/slurm-2.out", "StdOut=/tmp/x JobId=1 JobState=RUNNING"),
])
def test_job_free_text_cannot_replace_fields(field: str, hostile: str) -> None:
    kv = split_record(JOB.replace(field, hostile, 1))
    assert (kv["JobId"], kv["JobState"], kv["ExitCode"], kv["Restarts"], kv["NodeList"]) == \
        ("7001", "FAILED", "3:0", "0", "node1")
    key = field.split("=")[0]
    assert kv[key] == hostile.split("=", 1)[1]


def test_a_key_slurm_did_not_print_is_only_an_extra_key() -> None:
    kv = split_record(JOB.replace("WorkDir=/tmp/ckt", "WorkDir=/tmp/a Frobnicate=1", 1))
    assert kv["JobState"] == "FAILED" and kv["ExitCode"] == "3:0"


def test_lines_built_to_make_the_search_explode_are_still_read() -> None:
    # thousands of free-text keys: the search gives up after its budget and reads plainly,
    # keeping only the keys that occur once (a field that cannot be told from a copy is left out)
    many = "JobId=1 " + " ".join("Reason=a Comment=b WorkDir=c StdOut=d" for _ in range(500)) + " JobState=FAILED"
    assert split_record(many) == {"JobId": "1", "JobState": "FAILED"}
    wide = "NodeName=n1 OS=" + " ".join(f"K{i}=v" for i in range(3000)) + " RealMemory=5 State=IDLE"
    assert split_record(wide)["RealMemory"] == "5"


def test_empty_and_garbage() -> None:
    assert split_record("") == {} and split_record("no keys here") == {}
    assert split_record("lower=case Key=v") == {"Key": "v"}


@pytest.mark.parametrize("text,seconds", [
    ("UNLIMITED", math.inf), ("INFINITE", math.inf), (" 30 ", 1800.0), ("0", 0.0), ("2-00:00:00", 172800.0),
    ("1-12", 129600.0), ("NONE", None), ("soon", None), ("", None),
])
def test_time_is_vocabs_parser(text: str, seconds: float | None) -> None:
    assert parse_time(text) == seconds
    if seconds not in (None, math.inf, 0.0):  # where both read it, both read the same
        assert slurm_seconds(text.strip()) == seconds


def test_exit_code() -> None:
    assert parse_exit_code("3:0") == (3, None) and parse_exit_code("0:15") == (None, 15)
    assert parse_exit_code("junk") == (None, None)


# --------------------------------------------------------------------------- captured hostile records


def test_captured_job_whose_name_workdir_and_comment_spell_other_fields() -> None:
    """A real record (see tests/data/sites/README.md): the job name comes before the real JobState,
    the working directory and comment after it, and all three spell JobState/ExitCode."""
    from clusterkit.scheduler.slurm.tables import scontrol_statuses

    text = (DATA / "show-job-o-hostile.txt").read_text()
    kv = split_record(text.splitlines()[0])
    assert (kv["JobName"], kv["JobState"], kv["ExitCode"], kv["Restarts"], kv["NodeList"]) == \
        ("ck JobState=FAILED ExitCode=3:0", "PENDING", "0:0", "0", "")
    assert kv["WorkDir"] == "/tmp/ckwd JobState=FAILED ExitCode=3:0 Restarts=7"
    assert kv["Comment"] == "NodeList=evil[1-9] JobState=RUNNING"
    (st,) = scontrol_statuses(text).values()
    assert (st.state, st.exit_code, st.restarts, st.nodes) == ("PENDING", 0, 0, None)


def test_captured_node_whose_reason_spells_other_fields() -> None:
    from clusterkit.sites import slurm_text as T

    (node,) = T.parse_nodes((DATA / "show-node-o-hostile-reason.txt").read_text()).nodes
    assert (node.name, node.state, node.real_memory_mb, node.usable) == ("node2", "IDLE+DRAIN", 64000, False)
    assert node.reason == "gpu gone State=IDLE RealMemory=1 NodeName=node9"
