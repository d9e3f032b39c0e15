"""``doctor`` on real failure logs from public threads: the corpus under ``corpus/``.

Each ``corpus/*.log`` holds one log as its poster pasted it (whole lines, never edited) behind a
header: its source (repository and issue, or page), the label written from the thread's
conclusion before doctor ever read it, and why.  ``corpus/HELDOUT`` names the quarter drawn at
random before any signature was written from the rest.

The scorer counts a case right when the category is right and, where the label names them, the
node and the rank too; it prints the accuracy per category, overall and on the held-out part.
A cascade symptom (``nccl-timeout``) is never the verdict of a case whose thread found another cause.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from clusterkit.diagnose import catalogue
from clusterkit.diagnose.doctor import diagnose_files

CORPUS = Path(__file__).parent / "corpus"
_LABEL = re.compile(r"# label: category=(\S+) node=(\S+) rank=(\S+) cascade=(yes|no)$")
OVERALL_MIN = 0.90
HELDOUT_MIN = 0.85


@dataclass(frozen=True)
class Case:
    name: str
    source: str
    category: str
    node: str | None
    rank: int | None
    cascade: bool
    body: bytes


def load(path: Path) -> Case:
    raw = path.read_bytes()
    head, sep, body = raw.partition(b"\n# ---\n")
    assert sep, f"{path.name}: no '# ---' line after the header"
    lines = head.decode().splitlines()
    assert lines[0].startswith("# source: "), f"{path.name}: the first line names the source"
    m = _LABEL.match(lines[1])
    assert m, f"{path.name}: the second line is the label"
    cat, node, rank, cascade = m.groups()
    assert cat in catalogue.CATEGORIES, f"{path.name}: {cat} is not a doctor category"
    return Case(path.name, lines[0][len("# source: "):], cat, None if node == "-" else node,
                None if rank == "-" else int(rank), cascade == "yes", body)


def cases() -> list[Case]:
    return [load(p) for p in sorted(CORPUS.glob("*.log"))]


def heldout() -> set[str]:
    text = (CORPUS / "HELDOUT").read_text()
    return {ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")}


@dataclass(frozen=True)
class Result:
    case: Case
    category: str
    node: str | None
    rank: int | None

    @property
    def category_ok(self) -> bool:
        return self.category == self.case.category

    @property
    def location_ok(self) -> bool:
        c = self.case
        return (c.node is None or self.node == c.node) and (c.rank is None or self.rank == c.rank)

    @property
    def ok(self) -> bool:
        return self.category_ok and self.location_ok


def run(case: Case, tmp: Path) -> Result:
    path = tmp / case.name
    path.write_bytes(case.body)
    v = diagnose_files([path])["verdict"]
    return Result(case, v["category"], v["node"], v["rank"])


def table(results: list[Result], held: set[str]) -> str:
    """Accuracy per labelled category (category alone, category and location), then the totals."""
    per: dict[str, Counter[str]] = {}
    for r in results:
        c = per.setdefault(r.case.category, Counter())
        c["n"] += 1
        c["cat"] += r.category_ok
        c["ok"] += r.ok
    rows = [f"{'category':<18} {'cases':>5} {'category':>9} {'+location':>10}"]
    for cat in sorted(per):
        c = per[cat]
        rows.append(f"{cat:<18} {c['n']:>5} {c['cat']:>9} {c['ok']:>10}")

    def pct(rs: list[Result]) -> str:
        n = len(rs)
        ok = sum(r.ok for r in rs)
        return f"{ok}/{n} = {100 * ok / n:.1f}%" if n else "0/0"

    held_rs = [r for r in results if r.case.name in held]
    rows.append(f"category and location right: corpus {pct(results)}; held-out {pct(held_rs)}; "
                f"the rest {pct([r for r in results if r.case.name not in held])}")
    return "\n".join(rows)


def test_the_corpus_is_well_formed() -> None:
    cs = cases()
    held = heldout()
    names = {c.name for c in cs}
    assert len(cs) >= 80
    assert held <= names and len(held) * 4 >= len(cs) - 3  # a quarter, rounded
    sources = Counter(c.source.split(" (")[0] for c in cs)
    assert max(sources.values()) == 1, "one log per thread"
    kinds = Counter(c.category for c in cs)
    assert kinds["ok"] >= 3, "clean runs whose logs look scary"
    assert sum(c.body.count(b"\n") <= 3 for c in cs) >= 10, "short logs (one rank, one line)"


def test_doctor_on_the_corpus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    held = heldout()
    results = [run(c, tmp_path) for c in cases()]
    with capsys.disabled():
        print("\n" + table(results, held))
    # a cascade symptom is never the verdict where the thread found the cause elsewhere
    blamed = [r.case.name for r in results if r.category == "nccl-timeout" and r.case.category != "nccl-timeout"]
    assert blamed == []
    overall = sum(r.ok for r in results) / len(results)
    held_rs = [r for r in results if r.case.name in held]
    assert overall >= OVERALL_MIN, table(results, held)
    assert sum(r.ok for r in held_rs) / len(held_rs) >= HELDOUT_MIN, table(results, held)


def test_every_family_has_one_real_example_that_it_claims() -> None:
    """A signature is a family: one real line and its source in the catalogue, and the line is
    classified by that family (not by an earlier one)."""
    from clusterkit.diagnose import lines

    held = heldout()
    held_threads = {re.sub(r"^https://github\.com/([^/]+/[^/]+)/(?:issues|pull)/(\d+).*", r"\1#\2", c.source)
                    for c in cases() if c.name in held}
    for sig in catalogue.SIGNATURES:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+#\d+", sig.source), sig.name
        assert sig.source not in held_threads, f"{sig.name}: its example comes from a held-out log"
        assert catalogue.classify(lines.strip_prefix(sig.example)) is sig, sig.name


def test_re2_and_python_re_find_the_same_lines_in_the_corpus() -> None:
    """The trigger is written in the common subset of both engines: same candidate lines on real logs."""
    from clusterkit.diagnose import reader

    fallback = re.compile(catalogue.trigger_pattern().encode(), re.M)
    for c in cases():
        fast = {c.body.rfind(b"\n", 0, m.start()) for m in reader.TRIGGER.finditer(c.body)}
        slow = {c.body.rfind(b"\n", 0, m.start()) for m in fallback.finditer(c.body)}
        assert fast == slow, c.name
