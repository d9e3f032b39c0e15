"""No module of clusterkit, its tests, benchmarks or examples grows past 400 lines
(docs/architecture.md §1): a longer one is split by concern before it lands.
"""

from __future__ import annotations

from tests.conftest import REPO

LIMIT = 400
ROOTS = ("toolkit/clusterkit", "tests", "bench", "examples")


def _sizes() -> dict[str, int]:
    return {str(p.relative_to(REPO)): len(p.read_text(encoding="utf-8").splitlines())
            for root in ROOTS for p in (REPO / root).rglob("*.py")}


def test_no_module_grows_past_the_limit() -> None:
    too_big = {name: n for name, n in _sizes().items() if n > LIMIT}
    assert not too_big, f"over {LIMIT} lines: {too_big}; split the module"


def test_the_sizes_are_of_the_package_and_its_tests() -> None:
    sizes = _sizes()   # the walk finds every root's modules
    for root in ROOTS:
        assert any(name.startswith(root + "/") for name in sizes), root
    assert len(sizes) > 300 and max(sizes.values()) > LIMIT // 2
