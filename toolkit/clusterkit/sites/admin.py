"""What ``clusterkit sites init`` and ``sites drift`` do, behind the thin CLI commands."""

from __future__ import annotations

import os
import tempfile
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clusterkit.errors import ClusterkitError, ConfigError, InputError, SlurmTextError, SlurmUnreachable
from clusterkit.nodes.facts import NodeFacts, probe
from clusterkit.nodes.runners import make_runner
from clusterkit.scheduler import traits
from clusterkit.sites import drift as D
from clusterkit.sites import writer as W
from clusterkit.sites.create import Draft, pick_nodes, render
from clusterkit.sites.facts import ClusterFacts, SlurmCommand, gather
from clusterkit.slurmclient import require
from clusterkit.tooltext import printable
from clusterkit.vocab import PROBE_TRANSPORTS

if TYPE_CHECKING:
    from clusterkit.config.schema import Site

Runner = Any
RunnerFactory = Callable[[Any, str], Runner]


def _probe(site: Any, hosts: Sequence[str], transport: str | None,
           runner_for: RunnerFactory) -> dict[str, NodeFacts] | None:
    if transport is None:
        return None
    if transport not in PROBE_TRANSPORTS:
        raise InputError(f"--probe {transport!r}: choose one of {', '.join(PROBE_TRANSPORTS)}")
    return probe(hosts, runner_for(site, transport), timeout_s=float(site.ssh.command_timeout_s))


# ---------------------------------------------------------------------------------------------
# init
# ---------------------------------------------------------------------------------------------


def init_site(name: str, *, partition: str | None, nodes: str | None, probe_with: str | None,
              run: SlurmCommand = require, runner_for: RunnerFactory = make_runner) -> Draft:
    """Draft a site config for ``name`` from the live cluster (nothing is written here)."""
    from clusterkit.config.schema import SSH, SlurmSection

    _check_name(name)
    facts = gather(run)
    part = facts.partition(partition) if partition else facts.default_partition()
    chosen = pick_nodes(facts, part, nodes)
    stand_in = types.SimpleNamespace(ssh=SSH(), scheduler=SlurmSection(partition=part.name if part else None))
    probed = _probe(stand_in, [n.name for n in chosen], probe_with, runner_for)
    down = {h: nf.error for h, nf in (probed or {}).items() if not nf.reachable}
    if probed and len(down) == len(probed):
        first = next(iter(down.items()))
        raise SlurmUnreachable(f"--probe reached none of the {len(down)} nodes ({first[0]}: {first[1]})")
    draft = render(name, facts, part, chosen, probed)
    draft.unreachable = down
    _check_draft(draft)
    return draft


def _check_name(name: str) -> None:
    if not name or not all(c.isalnum() or c in "._-" for c in name) or not name[0].isalnum():
        raise InputError(f"site name {name!r}: use letters, digits, '.', '_' and '-'")


def init_from_example(name: str, example: str) -> Draft:
    """Draft a site config ``name`` from a shipped example site, comments kept, without Slurm:
    the example's text with its ``name:`` set and a header saying what to check.  A partial it
    ``extends:`` travels with it (``draft.companions``), to be written beside it."""
    import re

    from clusterkit.config.load import builtin_sites_dir

    _check_name(name)
    shipped = builtin_sites_dir()
    examples = sorted(p.stem for p in shipped.glob("*.yaml") if not p.name.startswith("_"))
    if example not in examples:
        raise InputError(f"--from-example {example[:80]!r}: not an example site; choose one of {', '.join(examples)}")
    text = (shipped / f"{example}.yaml").read_text(encoding="utf-8")
    text, named = re.subn(r"(?m)^name:[ \t]*[^#\n]*?([ \t]*(#.*)?)$", lambda m: f"name: {name}{m.group(1)}", text,
                          count=1)
    if not named:
        raise InputError(f"--from-example {example}: the example has no top-level name:")  # pragma: no cover
    header = (f"# {name}: drafted from clusterkit's example site {example!r} (sites init --from-example).\n"
              "# Every value below is the example's: check nodes, partition, account, fabric and storage\n"
              f"# against your cluster; `clusterkit sites drift {name}` compares them once Slurm is reachable.\n")
    draft = Draft(header + text)
    m = re.search(r"(?m)^extends:[ \t]*([^\s#]+)", text)
    if m and "/" not in m.group(1) and (shipped / m.group(1)).is_file():
        draft.companions[m.group(1)] = (shipped / m.group(1)).read_text(encoding="utf-8")
    draft.missing = [f"the example's values ({example}): nodes.nodelist, scheduler.partition/account, "
                     "network, storage"]
    _check_draft(draft)
    return draft


def _check_draft(draft: Draft) -> None:
    """A draft that does not validate is never written: Slurm reported facts no site can hold
    (a GPU count past the schema's range, ...).  The error names the draft's line, not the
    temp file it was checked in."""
    from clusterkit.config.load import load_file

    _read_back(draft)
    with tempfile.TemporaryDirectory() as tmp:
        for file, text in draft.companions.items():
            Path(tmp, file).write_text(text, encoding="utf-8")
        site = Path(tmp, "draft.yaml")
        site.write_text(draft.text, encoding="utf-8")
        try:
            load_file(site)
        except ConfigError as exc:
            first = exc.issues[0]
            where = f"draft line {first.line}: " if first.line else ""
            raise SlurmTextError(f"what Slurm reports makes no valid site: {where}"
                                 f"{first.loc + ': ' if first.loc else ''}{first.message}") from None


def write_companions(site_path: Path, draft: Draft) -> list[str]:
    """Write the partials a draft extends beside its site file, unless one is there already
    (an existing one is kept: it may be the site's own).  The names written."""
    written = []
    for file, text in draft.companions.items():
        target = site_path.parent / file
        if not target.exists():
            write_new(target, text)
            written.append(str(target))
    return written



def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _read_back(draft: Draft) -> None:
    """Every value the draft took from Slurm or the nodes reads back as itself."""
    import yaml

    try:
        data = yaml.safe_load(draft.text)
    except yaml.YAMLError as exc:
        raise SlurmTextError(f"what Slurm reports makes no readable site: {printable(str(exc)).strip()}") from None
    for path, want in draft.expected.items():
        got: object = data
        for key in path:
            got = got.get(key) if isinstance(got, dict) else None
        if got != want:
            raise SlurmTextError(f"what Slurm reports makes no valid site: {'.'.join(path)} would read back as "
                                 f"{got!r}, not {want!r}")


def write_new(path: Path, text: str) -> None:
    """Write a new site file atomically; never overwrite one."""
    if path.exists():
        raise InputError(f"--out {path}: file exists (drift --write edits an existing site)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)   # site_configs/ of a new checkout
    except OSError as exc:
        raise InputError(f"--out {path}: cannot create directory {path.parent}: {exc.strerror or exc}") from None
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o666 & ~_umask())  # as any new file: the umask decides
        os.link(tmp, path)  # fails if someone created it meanwhile: never clobber
    except FileExistsError:
        raise InputError(f"--out {path}: file exists") from None
    finally:
        os.unlink(tmp)


# ---------------------------------------------------------------------------------------------
# drift
# ---------------------------------------------------------------------------------------------


@dataclass
class DriftRun:
    """The outcome of ``sites drift``: reports, skipped sites, errors, and the exit code."""

    reports: list[D.DriftReport] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (site, why)
    errors: list[ClusterkitError] = field(default_factory=list)
    diffs: dict[str, str] = field(default_factory=dict)  # file -> unified diff

    @property
    def exit_code(self) -> int:
        """2 (usage/config) wins over 3 (could not reach) over 1 (drift)."""
        codes = {int(e.exit_code) for e in self.errors} | {r.exit_code for r in self.reports}
        return next((c for c in (2, 3, 1) if c in codes), 0)

    def to_json(self) -> dict[str, Any]:
        return {"sites": [r.to_json() for r in self.reports],
                "skipped": [{"site": s, "why": w} for s, w in self.skipped],
                "errors": [line for e in self.errors for line in e.lines()],
                "diffs": self.diffs, "exit_code": self.exit_code}


Located = tuple["Site", D.Lines]  # a site and where each of its keys was set


def _load(ref: str) -> Located:
    from clusterkit.config.load import find_site, load_file_located

    return load_file_located(find_site(ref))


def _targets(refs: Sequence[str], every: bool, result: DriftRun) -> list[tuple[str, Located]]:
    """(site, lines) to check; problems go to ``result.errors`` so other sites still run."""
    from clusterkit.config.load import list_sites, load_file_located

    out: list[tuple[str, Located]] = []
    entries: list[tuple[str, Callable[[], Located]]] = [(r, partial(_load, r)) for r in refs]
    if every:
        for e in list_sites():
            if e.origin == "built-in":
                continue  # an example shipped with clusterkit (shadowed or not) describes no cluster of yours
            if e.shadowed:
                result.skipped.append((f"{e.name} ({e.path})", "shadowed by a site of the same name"))
                continue
            entries.append((f"{e.name} ({e.path})", partial(load_file_located, e.path)))
    for label, load in entries:
        try:
            out.append((label, load()))
        except ClusterkitError as exc:
            result.errors.append(exc)
    return out


def drift_sites(refs: Sequence[str], *, every: bool = False, probe_with: str | None = None,
                write: bool = False, dry_run: bool = False, run: SlurmCommand = require,
                runner_for: RunnerFactory = make_runner) -> DriftRun:
    """Check sites against the live cluster; with ``write``/``dry_run``, plan (and apply) fact edits."""
    if not refs and not every:
        raise InputError("name at least one SITE, or --all")
    if write and dry_run:
        raise InputError("--write and --dry-run exclude each other")
    result = DriftRun()
    targets = _targets(refs, every, result)
    try:
        facts = gather(run)
    except SlurmUnreachable as exc:
        result.errors.append(exc)
        return result
    for label, (site, lines) in targets:
        why = _skip_reason(site, facts) if every and label not in refs else None
        if why:
            result.skipped.append((label, why))
            continue
        if not traits(site.scheduler.kind).queued:
            result.errors.append(InputError(f"{label}: scheduler.kind is {site.scheduler.kind}: "
                                            "there is no Slurm cluster to compare it with"))
            continue
        _check_one(site, lines, facts, probe_with, runner_for, result)
    if write or dry_run:
        _edit(result, targets, apply=write)
    return result


def _skip_reason(site: Site, facts: ClusterFacts) -> str | None:
    if not traits(site.scheduler.kind).queued:
        return f"scheduler.kind is {site.scheduler.kind}"
    if not site.scheduler.cluster:
        return "no scheduler.cluster"
    if site.scheduler.cluster != facts.cluster:
        return f"cluster {site.scheduler.cluster}, not {facts.cluster}"
    return None


def _check_one(site: Site, lines: D.Lines, facts: ClusterFacts, probe_with: str | None,
               runner_for: RunnerFactory, result: DriftRun) -> None:
    try:
        probed = _probe(site, site.nodes.hosts, probe_with, runner_for)
        result.reports.append(D.check(site, lines, facts, probed))
    except ClusterkitError as exc:
        result.errors.append(exc)


def _edit(result: DriftRun, targets: list[tuple[str, Located]], *, apply: bool) -> None:
    by_source = {site.source: site for _, (site, _) in targets}
    for report in result.reports:
        site = by_source[report.file]
        edits = W.plan_edits(site, report.live)
        if not edits:
            continue
        path = Path(site.source)
        shown = _display(path)
        try:
            old, newline = W.read_site_text(path)
            new = W.apply_edits(old, edits)
        except ConfigError as exc:
            result.errors.append(ConfigError.single(shown, None, exc.issues[0].loc, exc.issues[0].message))
            continue
        result.diffs[shown] = W.unified_diff(shown, old, new)
        if apply:
            try:
                W.write_validated(path, new, newline)
            except ConfigError as exc:
                result.errors.append(exc)


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
