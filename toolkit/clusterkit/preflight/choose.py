"""The job's choice of nodes from its own preflight report (hot spares, bad nodes excluded).

A Slurm job with the in-job preflight checks every allocated node first and writes the report
(``preflight --json``) into its run directory, ``logs/preflight-<job>.r<restart>.json``.  The job
script then runs ``clusterkit choose-nodes``, which reads that report and decides:

* **launch** on the best ``--nodes`` of the allocation: every node whose verdict is not ``ok``
  (or ``warn``) is dropped first (``failed``, ``unreachable``, ``slow``, ``wrong-result``, and a node
  with no result at all); among the good nodes the perf figures (``gemm_tflops``,
  ``busbw_*_gbps``, each relative to the median of the good nodes) rank them when every good
  node has them, else allocation order is kept.  The chosen nodes keep allocation order.
* **requeue** the job with the bad nodes excluded, when too few good nodes are left (more bad
  nodes than spares), the job may requeue, its restart budget is not spent and the site keeps
  enough nodes without them for the nodes and spares asked for (``scontrol update
  ExcNodeList=...`` and a requeue: what a Slurm user would do by hand, counted as a restart).
* **end** before training otherwise, with the result ``preflight: M nodes failed, K spares`` (or
  ``perf check: M nodes below par, K spares`` when a perf verdict is among them), the nodes, and
  the command that resubmits without them.

The decision is written as ``logs/nodes-<job>.r<restart>.json`` (:class:`Selection`); ``status``,
``doctor`` and ``submit --exclude-from`` read it back.  Both files are data from the nodes:
read within a byte budget, validated (host names, verdicts, figures), never trusted to name a
file or a node outside the allocation.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from clusterkit import jobfiles
from clusterkit.errors import ClusterkitError, ExitCode
from clusterkit.hostlist import HostlistError, check_host, fold
from clusterkit.preflight.alike import UNJUDGED
from clusterkit.preflight.choose_check import problem
from clusterkit.safefile import is_real_dir, read_capped, write_atomic
from clusterkit.tooltext import decode, load_json, printable, shorten
from clusterkit.vocab import is_job_id

SELECTION_VERSION = 1
REPORT_MAX_BYTES = 16 * 1024 * 1024    # a preflight report of 10,000 nodes fits well within it
SELECTION_MAX_BYTES = 4 * 1024 * 1024
MAX_NODES = 100_000
REASON_MAX = 300                       # characters of one node's reason kept
#: verdicts of a node the job may launch on (unjudged: the check failed on every node alike, its fault)
GOOD = ("ok", "warn", UNJUDGED)
#: verdicts of the perf check (preflight --perf): "below par" rather than "failed"
PERF_VERDICTS = ("slow", "wrong-result")
KNOWN = (*GOOD, "failed", "unreachable", *PERF_VERDICTS)
#: the figures that rank good nodes, higher is better (preflight --perf's names)
RANKED = ("gemm_tflops", "busbw_intra_gbps", "busbw_inter_gbps")
_FIGURE = re.compile(r"[a-z][a-z0-9_]{0,47}")
_FIGURE_UNITS = ("_tflops", "_gbps", "_gbs")   # a node's own keys taken as figures (not duration_s)

Outcome = Literal["launch", "requeue", "end"]


class ChooseError(ClusterkitError):
    """The report cannot be read or is not a preflight report: the job cannot choose its nodes."""

    exit_code = ExitCode.USAGE


@dataclass(frozen=True)
class NodeVerdict:
    """One allocated node as the report judged it."""

    host: str
    verdict: str                     # ok, warn, failed, unreachable, slow, wrong-result, unchecked
    reason: str = ""                 # one line; empty for a good node
    figures: dict[str, float] = field(default_factory=dict)

    @property
    def good(self) -> bool:
        return self.verdict in GOOD

    def worded(self) -> str:
        """``node3 (failed: gpu.count: 7 GPUs, expected 8)``."""
        what = f"{self.verdict}: {self.reason}" if self.reason else self.verdict
        return f"{self.host} ({what})"


@dataclass(frozen=True)
class Selection:
    """What the job decided, as written to ``logs/nodes-<job>.r<restart>.json``."""

    job_id: str
    restart: int
    check: str                       # base or perf
    allocation: tuple[str, ...]
    wanted: int
    spares: int
    outcome: Outcome
    chosen: tuple[str, ...]
    dropped: tuple[NodeVerdict, ...]
    unused: tuple[str, ...]          # good nodes left idle (spares not needed)
    reason: str                      # the result line (end), or what happened (launch, requeue)
    exclude: tuple[str, ...] = ()    # requeue: the job's ExcNodeList

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["version"] = SELECTION_VERSION
        return d

    @classmethod
    def from_dict(cls, data: Any, where: str) -> Selection:
        """A selection read back (a file others could write): every field checked."""
        if not isinstance(data, dict) or data.get("version") != SELECTION_VERSION:
            raise ChooseError(f"{where}: not a node selection of version {SELECTION_VERSION}")
        try:
            outcome = data["outcome"]
            if outcome not in ("launch", "requeue", "end"):
                raise ValueError(f"outcome {outcome!r}")
            dropped = tuple(_verdict_back(d) for d in _list(data["dropped"]))
            sel = cls(job_id=_text(data["job_id"], 40), restart=_count(data["restart"]),
                       check=_text(data["check"], 10), allocation=_hosts(data["allocation"]),
                       wanted=_count(data["wanted"]), spares=_count(data["spares"]), outcome=outcome,
                       chosen=_hosts(data["chosen"]), dropped=dropped, unused=_hosts(data["unused"]),
                       reason=_text(data["reason"], 4000), exclude=_hosts(data.get("exclude", [])))
        except (KeyError, TypeError, ValueError, HostlistError) as exc:
            raise ChooseError(f"{where}: not a valid node selection ({printable(str(exc))[:200]})") from None
        if (wrong := problem(sel)) is not None:
            raise ChooseError(f"{where}: not a valid node selection ({wrong})")
        return sel


def _list(v: Any) -> list[Any]:
    if not isinstance(v, list) or len(v) > MAX_NODES:
        raise ValueError("expected a list")
    return v


def _text(v: Any, limit: int) -> str:
    if not isinstance(v, str):
        raise ValueError("expected text")
    return printable(v)[:limit]


def _count(v: Any) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= 1_000_000:
        raise ValueError(f"expected a count, got {str(v)[:40]!r}")
    return v


def _hosts(v: Any) -> tuple[str, ...]:
    return tuple(check_host(h) if isinstance(h, str) else _bad_host(h) for h in _list(v))


def _bad_host(h: Any) -> str:
    raise ValueError(f"host {str(h)[:40]!r} is not text")


def _verdict_back(d: Any) -> NodeVerdict:
    if not isinstance(d, dict):
        raise ValueError("expected a node")
    verdict = _text(d["verdict"], 20)
    if verdict not in (*KNOWN, "unchecked"):
        raise ValueError(f"verdict {verdict!r}")
    return NodeVerdict(check_host(_text(d["host"], 253)), verdict, _text(d.get("reason", ""), REASON_MAX),
                       _figures(d.get("figures", {})))


def _figures(raw: Any) -> dict[str, float]:
    """Numeric figures with plain names (``gemm_tflops``), finite; anything else is left out."""
    out: dict[str, float] = {}
    if not isinstance(raw, dict):
        return out
    for key, value in list(raw.items())[:64]:
        if (isinstance(key, str) and _FIGURE.fullmatch(key) and isinstance(value, (int, float))
                and not isinstance(value, bool) and math.isfinite(value)):
            out[key] = float(value)
    return out


# ---------------------------------------------------------------------------------------------
# reading the preflight report
# ---------------------------------------------------------------------------------------------


def read_report(path: Path) -> dict[str, NodeVerdict]:
    """The verdict of every node in the report at ``path``, by host (ChooseError when unusable)."""
    try:
        raw, more = read_capped(path, REPORT_MAX_BYTES)
    except OSError as exc:
        raise ChooseError(f"cannot read the preflight report {path}: {exc.strerror or exc}") from None
    if more:
        raise ChooseError(f"preflight report {path} is larger than {REPORT_MAX_BYTES} bytes")
    try:
        data = load_json(decode(raw), allow_nan=True)   # a non-finite figure is dropped by _figures
    except ValueError as exc:
        raise ChooseError(f"preflight report {path} is not JSON ({printable(str(exc))[:120]})") from None
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        raise ChooseError(f"preflight report {path} has no list of nodes (is it `preflight --json` output?)")
    if len(data["nodes"]) > MAX_NODES:
        raise ChooseError(f"preflight report {path} lists more than {MAX_NODES} nodes")
    out: dict[str, NodeVerdict] = {}
    for i, node in enumerate(data["nodes"]):
        try:
            verdict = _node(node)
        except (ValueError, HostlistError) as exc:
            raise ChooseError(f"preflight report {path}: nodes[{i}]: {printable(str(exc))[:200]}") from None
        out.setdefault(verdict.host, verdict)
    return out


def _node(node: Any) -> NodeVerdict:
    if not isinstance(node, dict):
        raise ValueError("not an object")
    host, status = node.get("host"), node.get("status")
    if not isinstance(host, str):
        raise ValueError("no host name")
    check_host(host)
    if not isinstance(status, str) or status not in KNOWN:
        raise ValueError(f"{host}: verdict {str(status)[:40]!r} is not one of {', '.join(KNOWN)}")
    return NodeVerdict(host, status, "" if status in ("ok", "warn") else _reason(node), _node_figures(node))


def _reason(node: dict[str, Any]) -> str:
    """One line: the node's own reason (preflight --perf gives one), else its error and failed checks."""
    parts: list[str] = []
    if isinstance(node.get("reason"), str) and node["reason"]:
        parts.append(node["reason"])
    elif isinstance(node.get("error"), str) and node["error"]:
        parts.append(node["error"])
    checks = [] if parts and "reason" in node else node.get("checks")
    if isinstance(checks, list):
        for c in checks[:64]:
            if isinstance(c, dict) and c.get("status") in ("fail", "failed") and isinstance(c.get("message"), str):
                parts.append(f"{str(c.get('check', '?'))[:60]}: {c['message']}")
    text = printable("; ".join(dict.fromkeys(parts)))
    return shorten(text, REASON_MAX)


def _node_figures(node: dict[str, Any]) -> dict[str, float]:
    """The node's perf figures: its ``figures`` (or ``perf``) object, or figure-named keys of its own;
    a list of measurements (``busbw_inter_gbps``: one per pairing, ``{"gbps": ...}``) counts by its lowest."""
    for key in ("figures", "perf"):
        if isinstance(node.get(key), dict):
            return _figures(node[key])
    own: dict[str, Any] = {}
    for k, v in list(node.items())[:64]:
        if not (isinstance(k, str) and k.endswith(_FIGURE_UNITS)):
            continue
        if isinstance(v, list):
            values = [e.get("gbps") for e in v[:64] if isinstance(e, dict)]
            v = min((x for x in values if isinstance(x, (int, float)) and not isinstance(x, bool)), default=None)
        own[k] = v
    return _figures(own)


# ---------------------------------------------------------------------------------------------
# the choice
# ---------------------------------------------------------------------------------------------


def choose(verdicts: dict[str, NodeVerdict], allocation: Sequence[str], *, wanted: int, spares: int,
           job_id: str, restart: int, check: str = "base", restarts_left: int = 0,
           exclude: Iterable[str] = (), resubmit: str = "", site_nodes: int | None = None) -> Selection:
    """Decide which ``wanted`` nodes of ``allocation`` the job launches on (see the module docstring).

    A node of the allocation missing from the report is ``unchecked`` and dropped; report entries
    for nodes outside the allocation are ignored.  ``exclude`` is what the job already keeps out
    (its ``#SBATCH --exclude`` and earlier requeues); ``resubmit`` the command that resubmits it;
    ``site_nodes`` how many nodes the site has (a requeue that would leave fewer than ``wanted``
    of them would wait forever: the job ends instead).
    """
    alloc = list(dict.fromkeys(allocation))
    judged = [verdicts.get(h) or NodeVerdict(h, "unchecked", "no result in the preflight report") for h in alloc]
    good = [v for v in judged if v.good]
    bad = tuple(v for v in judged if not v.good)
    ranked = _ranked(good)

    def decided(outcome: Outcome, reason: str, chosen: tuple[str, ...] = (), unused: tuple[str, ...] = (),
                keep_out: tuple[str, ...] = ()) -> Selection:
        return Selection(job_id=job_id, restart=restart, check=check, allocation=tuple(alloc), wanted=wanted,
                         spares=spares, outcome=outcome, chosen=chosen, dropped=bad, unused=unused, reason=reason,
                         exclude=keep_out)

    if len(good) >= wanted:
        keep = {v.host for v in ranked[:wanted]}
        chosen = tuple(h for h in alloc if h in keep)
        unused = tuple(v.host for v in good if v.host not in keep)
        said = f"launching on {len(chosen)} of {len(alloc)} allocated nodes: {fold(chosen)}"
        if bad:
            said += f"; dropped {', '.join(v.worded() for v in bad)}"
        if unused:
            said += f"; spare, unused: {fold(unused)}"
        if unjudged := [v for v in good if v.verdict == UNJUDGED]:
            said += f"; preflight judged no node: it failed on every node alike ({unjudged[0].reason})"
        return decided("launch", said, chosen, unused)
    perf = any(v.verdict in PERF_VERDICTS for v in bad)
    head = (f"perf check: {len(bad)} nodes below par, {spares} spares" if perf
            else f"preflight: {len(bad)} nodes failed, {spares} spares")
    listed = ", ".join(v.worded() for v in bad)
    keep_out = tuple(sorted({*exclude, *(v.host for v in bad)}))
    left = None if site_nodes is None else site_nodes - len(keep_out)
    # the requeued job asks for the same nodes again, its spares included
    if restarts_left > 0 and (left is None or left >= wanted + spares):
        return decided("requeue", f"{head}: {listed}; requeueing with {fold(keep_out)} excluded", keep_out=keep_out)
    if restarts_left > 0:
        listed += (f"; not requeued: without them {left} of the site's {site_nodes} nodes remain for "
                   f"{wanted}{f' and {spares} spare(s)' if spares else ''}")
    way_out = f"; resubmit without them: {resubmit}" if resubmit else f"; resubmit with --exclude {fold(keep_out)}"
    return decided("end", f"{head}: {listed}{way_out}", keep_out=keep_out)


def _ranked(good: list[NodeVerdict]) -> list[NodeVerdict]:
    """Good nodes, best first: by the worst of their ranked figures relative to the median, when
    every good node has the same ones; else in allocation order."""
    names = [n for n in RANKED if good and all(n in v.figures for v in good)]
    if not names:
        return good
    medians = {n: statistics.median(v.figures[n] for v in good) for n in names}

    def score(v: NodeVerdict) -> float:
        return min(v.figures[n] / medians[n] if medians[n] > 0 else 1.0 for n in names)

    return sorted(good, key=score, reverse=True)   # stable: ties keep allocation order


# ---------------------------------------------------------------------------------------------
# the files in the run directory
# ---------------------------------------------------------------------------------------------


def report_path(run_dir: Path, job_id: str, restart: int) -> Path:
    return jobfiles.PREFLIGHT_REPORT.path(run_dir, job_id, restart)


def selection_path(run_dir: Path, job_id: str, restart: int) -> Path:
    return jobfiles.NODE_CHOICE.path(run_dir, job_id, restart)


def check_job_id(job_id: str) -> str:
    """``job_id`` if it is one (:func:`clusterkit.vocab.is_job_id`): it names files in the run directory."""
    if not is_job_id(job_id):
        raise ChooseError(f"job id {printable(job_id)[:40]!r} is not a Slurm job id")
    return job_id


def selections(run_dir: Path, job_id: str, allocated: int | None = None) -> list[Selection]:
    """The job's node selections in its run directory, one per restart that made one, in restart
    order; unreadable, invalid or inconsistent files are skipped: another job's or restart's (by
    their own fields), an allocation of other than ``allocated`` nodes, a ``logs`` that is a link."""
    check_job_id(job_id)
    logs = jobfiles.logs(run_dir)
    if not is_real_dir(logs):
        return []
    found: list[tuple[int, Path]] = []
    pattern = jobfiles.NODE_CHOICE.restarts(job_id)
    try:
        names = [p.name for p in logs.iterdir()][:100_000]
    except OSError:
        return []
    for name in names:
        m = pattern.fullmatch(name)
        if m:
            found.append((int(m.group(1)), logs / name))
    out: list[Selection] = []
    for restart, path in sorted(found):
        try:
            raw, more = read_capped(path, SELECTION_MAX_BYTES, follow_symlinks=False)
            sel = None if more else Selection.from_dict(load_json(decode(raw)), str(path))
        except (OSError, ValueError, ChooseError):
            continue
        if sel and (sel.job_id, sel.restart) == (job_id, restart) and allocated in (None, len(sel.allocation)):
            out.append(sel)
    return out


def dropped_nodes(run_dir: Path, job_id: str, allocated: int | None = None) -> list[NodeVerdict]:
    """Every node the job dropped, in any restart (the latest verdict of each)."""
    latest: dict[str, NodeVerdict] = {}
    for sel in selections(run_dir, job_id, allocated):
        for v in sel.dropped:
            latest.pop(v.host, None)
            latest[v.host] = v
    return list(latest.values())


def write_selection(sel: Selection, path: Path) -> None:
    """Write ``sel`` whole or not at all (a temporary file renamed into place)."""
    write_atomic(path, (json.dumps(sel.to_dict(), indent=2) + "\n").encode())
