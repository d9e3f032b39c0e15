"""Every relative link in README.md and docs/*.md points at a file that exists and, where it
names an anchor, at a heading of that file (GitHub's anchors)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.docs.markdown import anchors, doc_files, links, rel, slug

LINKS = [(path, n, target) for path in doc_files() for n, target in links(path)]


def broken(path: Path, target: str, root: Path = REPO) -> str | None:
    """Why ``target`` (a link in ``path``) does not resolve inside ``root``, or None."""
    file, _, anchor = target.partition("#")
    dest = (path.parent / file).resolve() if file else path.resolve()
    if not dest.exists():
        return f"no file {file}"
    if root.resolve() not in dest.parents and dest != root.resolve():
        return f"{file} is outside the repository"
    if anchor:
        if dest.suffix != ".md":
            return f"an anchor into {file}, which is not markdown"
        if anchor not in anchors(dest):
            return f"no heading #{anchor} in {dest.relative_to(root.resolve()).as_posix()}"
    return None


def test_the_docs_link_each_other() -> None:
    """The README's "where to go next" reaches every guide, so an empty link list cannot pass."""
    readme = {target.partition("#")[0] for path, _, target in LINKS if path == REPO / "README.md"}
    guides = {f"docs/{p.name}" for p in (REPO / "docs").glob("*.md")}
    assert guides <= readme, guides - readme


@pytest.mark.parametrize(("path", "line", "target"), LINKS, ids=[f"{rel(p)}:{n}:{t}" for p, n, t in LINKS])
def test_relative_link_resolves(path: Path, line: int, target: str) -> None:
    why = broken(path, target)
    assert why is None, f"{rel(path)}:{line}: ({target}): {why}"


def test_a_broken_link_is_caught(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Title: `one` and two\n\n## Title: `one` and two\n")
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "b.md"
    page.write_text("```bash\n# not a heading\n```\n")
    assert anchors(tmp_path / "a.md") == {"title-one-and-two", "title-one-and-two-1"}
    assert anchors(page) == set()
    assert slug("Find the slow node: `clusterkit preflight --perf`") == "find-the-slow-node-clusterkit-preflight---perf"
    assert slug("The framework's own signal: `stop_signal` and `requeue_by`") == \
        "the-frameworks-own-signal-stop_signal-and-requeue_by"
    assert broken(page, "../a.md#title-one-and-two-1", tmp_path) is None
    assert broken(page, "../a.md#title-one-and-three", tmp_path) == "no heading #title-one-and-three in a.md"
    assert broken(page, "a.md", tmp_path) == "no file a.md"
    assert broken(page, "#anything", tmp_path) == "no heading #anything in docs/b.md"
    assert broken(page, "../../x.md", tmp_path) in ("no file ../../x.md", "../../x.md is outside the repository")
