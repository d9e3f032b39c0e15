"""The storage checks of the catalogue (:mod:`clusterkit.preflight.catalogue`): each ``storage:``
path of the site mounted as its type, free space, writable where checkpoints go, and the NFS
warning at large-cluster scale."""

from __future__ import annotations

from typing import TYPE_CHECKING

from clusterkit.nodes import parsers as P
from clusterkit.nodes import sections as S
from clusterkit.nodes.script import Section, SectionOutput
from clusterkit.preflight.engine import LARGE, Check, Severity, Verdict

if TYPE_CHECKING:
    from clusterkit.preflight.expect import StorageExpect


def _identity(text: str) -> str:
    return text


def storage_sections(items: list[tuple[int, StorageExpect]]) -> list[Section]:
    sections = [S.mounts_section()]
    for i, s in items:
        sections.append(S.df_section(i, s.path, s.timeout_s))
        if s.writable:
            sections.append(S.write_section(i, s.path, s.timeout_s))
    return sections


def storage_checks(stage: str, items: list[tuple[int, StorageExpect]]) -> list[Check]:
    checks: list[Check] = []
    for i, s in items:
        checks += _checks_for_path(stage, i, s)
    return checks


def _checks_for_path(stage: str, i: int, s: StorageExpect) -> list[Check]:
    def mounted(mounts: tuple[P.Mount, ...], _: SectionOutput) -> Verdict:
        m = P.find_mount(mounts, s.path)
        if s.type == "local":
            return Verdict(m is not None, f"{s.path} on {m.fstype if m else '?'}")
        if m is None or not S.mounted_as(m, s.type):
            where = f"only {m.mountpoint} ({m.fstype})" if m else "nothing"
            return Verdict(False, f"{s.path} not mounted as {s.type} ({where} serves it)")
        return Verdict(True, f"{s.path} mounted ({m.fstype} from {m.source})")

    def nfs_at_scale(mounts: tuple[P.Mount, ...], _: SectionOutput) -> Verdict:
        m = P.find_mount(mounts, s.path)
        nfs = S.mounted_as(m, "nfs")
        # hundreds of ranks opening files at once swamp a single NFS server's metadata path
        return Verdict(not nfs, f"{s.path} is NFS: at large-cluster scale prefer Lustre/GPFS" if nfs
                       else f"{s.path} is not NFS")

    def free(d: P.DiskSpace, _: SectionOutput) -> Verdict:
        ok = d.available_gb >= s.min_free_gb
        msg = f"{s.path} {d.available_gb:,.0f} GB free"
        return Verdict(ok, msg if ok else f"{msg} < {s.min_free_gb:g} GB required")

    def writable(_text: str, out: SectionOutput) -> Verdict:
        ok = out.rc == "0" and "writable" in out.text
        why = P.first_line(out.text) or f"rc {out.rc}"
        return Verdict(ok, f"{s.path} writable" if ok else f"{s.path} not writable: {why}")

    checks = [Check("storage.mounted", "mounts", P.parse_mounts, mounted, target=s.path,
                    describe=f"{s.path} mounted as {s.type}")]
    if stage == LARGE and s.type == "nfs":
        checks.append(Check("storage.nfs_at_scale", "mounts", P.parse_mounts, nfs_at_scale, Severity.WARN,
                            target=s.path, describe="large-cluster stage: warn on NFS"))
    checks.append(Check("storage.free", f"df_{i}", P.parse_df, free, target=s.path, requires="storage.mounted",
                        describe=f"answers within {s.timeout_s:g} s with >= {s.min_free_gb:g} GB free"))
    if s.writable:
        checks.append(Check("storage.writable", f"write_{i}", _identity, writable, target=s.path,
                            requires="storage.mounted", describe="writable (used for checkpoints)"))
    return checks
