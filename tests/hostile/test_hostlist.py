"""Host lists are data: the grammar, the limit, and ClusterShell without group resolution."""

from __future__ import annotations

import inspect

import pytest

from clusterkit import hostlist


@pytest.mark.parametrize("text,hosts", [
    ("gpu[001-003]", ["gpu001", "gpu002", "gpu003"]),
    ("n1,n3,n2", ["n1", "n2", "n3"]),
    ("r[1-2]n[01-02]-ib", ["r1n01-ib", "r1n02-ib", "r2n01-ib", "r2n02-ib"]),
    ("a100-[03-04],login.cluster", ["a100-03", "a100-04", "login.cluster"]),
    ("node[1,3-4]", ["node1", "node3", "node4"]),
    ("127.0.0.1", ["127.0.0.1"]),
])
def test_plain_slurm_hostlists_expand(text: str, hosts: list[str]) -> None:
    assert sorted(hostlist.expand(text)) == sorted(hosts)


@pytest.mark.parametrize("text,words", [
    ("n1,@x';touch${IFS}pwned;'", "no '@group'"),
    ("@all", "no '@group'"),
    ("*", "bad hostlist '*'"),
    ("n?", "bad hostlist 'n?'"),
    ("n[1-4]!n2", "bad hostlist"),
    ("n[1-4]&n[2-3]", "bad hostlist"),
    ("n[1-4]^n2", "bad hostlist"),
    ("n1 n2", "bad hostlist"),
    ("n1\n", "bad hostlist 'n1\\n'"),
    ("n1:abc", "bad hostlist 'n1:abc'"),
    ("n[1-10/2]", "bad hostlist"),
    ("n[5-1]", "runs backwards"),
    ("n[1-100001]", "more than 100000 hosts"),
    ("n[1-99999999999999999999]", "more than 100000 hosts"),
    ("a[1-1000]b[1-1000]", "more than 100000 hosts"),
    ("x" * 64, "is not a valid host name"),
    ("-n1", "is not a valid host name"),
    ("n1.", "is not a valid host name"),
    ("", "empty hostlist"),
])
def test_everything_else_is_refused_naming_the_problem(text: str, words: str) -> None:
    with pytest.raises(hostlist.HostlistError) as err:
        hostlist.parse(text)
    assert words in str(err.value)


def test_the_limit_itself_is_accepted() -> None:
    assert len(hostlist.parse(f"n[1-{hostlist.MAX_HOSTS}]")) == hostlist.MAX_HOSTS


def test_clustershell_runs_without_a_group_resolver() -> None:
    # ClusterShell only reaches its group upcalls (shell commands from groups.conf) through
    # ParsingEngine.group_resolver; RESOLVER_NOGROUP leaves it None.
    from ClusterShell.NodeSet import ParsingEngine

    assert hostlist.parse("n[1-2]")._resolver is None
    assert "if self.group_resolver and pat[0] == '@'" in inspect.getsource(ParsingEngine.parse_string)
