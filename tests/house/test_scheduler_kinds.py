"""No module outside ``clusterkit.scheduler`` compares a scheduler kind to a name (docs/architecture.md §1).

The code outside the scheduler package asks what a scheduler is able to answer or do
(:func:`clusterkit.scheduler.traits`, a plan's ``slurm``) instead of ``rec.scheduler == "slurm"``.
The layers below the scheduler's, which cannot import it, hold none either: what a kind asks of a
site file is its section model's own (``hosts`` of :class:`clusterkit.config.scheduler_keys.LocalSection`).
"""

from __future__ import annotations

import ast

from clusterkit.vocab import SCHEDULER_KINDS
from tests.conftest import REPO

ROOT = REPO / "toolkit" / "clusterkit"


def _names_a_kind(node: ast.expr) -> bool:
    """``x.scheduler``, ``x.scheduler.kind``, ``kind``, ``scheduler``: an expression that holds a kind."""
    if isinstance(node, ast.Attribute):
        return node.attr in ("scheduler", "kind") or (_names_a_kind(node.value) and node.attr == "kind")
    return isinstance(node, ast.Name) and node.id in ("scheduler", "kind")


def _is_kind_literal(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in SCHEDULER_KINDS
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_is_kind_literal(e) for e in node.elts)
    return False


def comparisons(source: str) -> list[int]:
    """The lines of ``source`` that compare a scheduler kind to one of the kinds' names."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_names_a_kind(s) for s in sides) and any(_is_kind_literal(s) for s in sides):
                out.append(node.lineno)
    return out


def _found() -> dict[str, list[int]]:
    found = {}
    for p in sorted(ROOT.rglob("*.py")):
        name = str(p.relative_to(ROOT))
        if name.startswith("scheduler/"):
            continue
        lines = comparisons(p.read_text(encoding="utf-8"))
        if lines:
            found[name] = lines
    return found


def test_no_module_outside_the_scheduler_package_compares_a_kind_to_a_name() -> None:
    found = _found()
    assert not found, (f"{found}: ask clusterkit.scheduler.traits(kind) (what the scheduler is able to answer "
                       "or do), not the kind's name")


def test_the_scan_sees_each_form() -> None:
    src = ('rec.scheduler == "slurm"\nsite.scheduler.kind != "local"\nkind in ("slurm", "local")\n'
           'p.scheduler == "slurm"\ntransport == "local"\ns.type == "local"\ntraits(kind).queued\n')
    assert comparisons(src) == [1, 2, 3, 4]
