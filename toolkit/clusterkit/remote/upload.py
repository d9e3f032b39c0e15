"""The laptop's half of the code upload: the snapshot taken here (as ``submit`` takes it), then
every file the login node's upload store lacks sent once over SFTP, checked against its sha256,
and the tree's manifest (:mod:`clusterkit.codesnap.checkout` reads it on the login node)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from clusterkit.codesnap import Limits, take
from clusterkit.codesnap.checkout import UPLOAD_DIR, tree_manifest
from clusterkit.config.schema import Site
from clusterkit.job.code import CodeSnapshot, size_text
from clusterkit.nodes.transport.session import LoginSession


@dataclass(frozen=True)
class Uploaded:
    info: CodeSnapshot    # the snapshot as taken here (the laptop's commit, dirty, diff)
    tree: str
    files_sent: int
    bytes_sent: int


def upload(session: LoginSession, site: Site, code_dir: str | None, *, limits: Limits | None = None,
           note: Callable[[str], None] = lambda _: None) -> Uploaded:
    """Snapshot the code here (``code_dir``: ``--code``) and upload what the login node lacks."""
    limits = limits or Limits(site.code.max_files, site.code.max_mb << 20)
    taken = take(site, code_dir, Path.cwd() / "runs", limits, write=False)
    root = Path(taken.info.source)
    objects = f"{UPLOAD_DIR}/objects"
    for folder in (UPLOAD_DIR, objects, f"{UPLOAD_DIR}/trees"):
        session.makedirs(folder)
    wanted: dict[tuple[str, bool], str] = {}
    for rel, sha, executable in taken.entries:
        wanted.setdefault((sha, executable), rel)
    present: set[str] = set()
    for prefix in sorted({sha[:2] for sha, _ in wanted}):
        present.update(f"{prefix}/{name}" for name in session.listdir(f"{objects}/{prefix}"))
    missing = [(sha, x, rel) for (sha, x), rel in wanted.items()
               if f"{sha[:2]}/{sha}{'.x' if x else ''}" not in present]
    sizes = {rel: (root / rel).stat().st_size for _, _, rel in missing}
    if missing:
        note(f"uploading {len(missing)} of {len(taken.entries)} file(s) ({size_text(sum(sizes.values()))}) "
             f"to {session.host}")
    made: set[str] = set()
    for sha, executable, rel in missing:
        folder = f"{objects}/{sha[:2]}"
        if folder not in made:
            session.makedirs(folder)
            made.add(folder)
        session.put_checked(root / rel, f"{folder}/{sha}{'.x' if executable else ''}", sha,
                            0o555 if executable else 0o444)
    tree, manifest = tree_manifest(taken.entries, taken.info.workdir)
    if f"{tree}.json" not in session.listdir(f"{UPLOAD_DIR}/trees"):
        session.put_bytes(manifest, f"{UPLOAD_DIR}/trees/{tree}.json", 0o400)
    return Uploaded(taken.info, tree, len(missing), sum(sizes.values()))
