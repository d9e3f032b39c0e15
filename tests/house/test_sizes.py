"""No module of clusterkit, its tests, benchmarks or examples grows past 400 lines
(docs/architecture.md §1).

The modules still over the line are listed with the size they may not pass: debt to pay by
splitting them, never room to grow.  A listed module that has come down under 400 must leave the
list, so the list only shrinks.  The package has none left; the one listed is the tests' SSH lab.
"""

from __future__ import annotations

from tests.conftest import REPO

LIMIT = 400
#: module (from the repository's root) -> the most lines it may have until it is split
OVER: dict[str, int] = {
    "tests/sshlab/lab.py": 512,             # the SSH lab: sshd, its nodes' fake tools, network namespaces
}
ROOTS = ("toolkit/clusterkit", "tests", "bench", "examples")


def _sizes() -> dict[str, int]:
    return {str(p.relative_to(REPO)): len(p.read_text(encoding="utf-8").splitlines())
            for root in ROOTS for p in (REPO / root).rglob("*.py")}


def test_no_module_grows_past_its_limit() -> None:
    sizes = _sizes()
    too_big = {name: n for name, n in sizes.items() if n > OVER.get(name, LIMIT)}
    assert not too_big, f"over {LIMIT} lines (or past the listed debt): {too_big}; split the module"


def test_the_debt_list_only_shrinks() -> None:
    sizes = _sizes()
    paid = [name for name in OVER if sizes.get(name, 0) <= LIMIT]
    assert not paid, f"{paid} are {LIMIT} lines or fewer now (or gone): take them off OVER"


def test_the_sizes_are_of_the_package_and_its_tests() -> None:
    sizes = _sizes()   # the walk finds every root's modules, the listed ones among them
    for root in ROOTS:
        assert any(name.startswith(root + "/") for name in sizes), root
    assert len(sizes) > 300 and set(OVER) <= set(sizes)
