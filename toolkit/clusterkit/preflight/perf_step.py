"""The srun step of ``preflight --perf`` and what it prints: run it bounded, read the figure lines.

Split from :mod:`clusterkit.preflight.perf` (which re-exports these names): :func:`run_step`
runs the one step through :mod:`clusterkit.slurmclient`, :func:`parse_output` keeps the valid
figure lines, :func:`task_errors` each task's last stderr line and srun's own lines.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from clusterkit.hostlist import fold
from clusterkit.preflight.perf_claims import label_of
from clusterkit.tooltext import load_json, parse_int, printable

if TYPE_CHECKING:
    from clusterkit.config.schema import Perf, Site

MAX_STREAM_BYTES = 8 << 20   # what is kept of srun's stdout and of its stderr
MAX_LINE_CHARS = 4096        # a figure line longer than this is not a figure line
_TAIL_LINES = 200


def held_gpus(env: dict[str, str]) -> int | None:
    """The GPUs per node the job holds, inside an allocation (``SLURM_GPUS_PER_NODE``: ``2``,
    ``h100:2``; else ``SLURM_GPUS_ON_NODE``); None outside one or where Slurm does not say."""
    if not env.get("SLURM_JOB_ID"):
        return None
    for name in ("SLURM_GPUS_PER_NODE", "SLURM_GPUS_ON_NODE"):
        count = parse_int(env.get(name, "").rsplit(":", 1)[-1])
        if count is not None and count > 0:
            return count
    return None


@dataclass
class StepOutput:
    """What the srun step printed, bounded."""

    stdout: list[str]
    stderr: list[str]
    returncode: int | None
    timed_out: bool = False
    interrupted: bool = False


def run_step(argv: Sequence[str], timeout_s: float, env: dict[str, str] | None = None) -> StepOutput:
    """Run the step; keep at most :data:`MAX_STREAM_BYTES` of each stream; stop it after ``timeout_s``."""
    from clusterkit import slurmclient

    proc = slurmclient.start(argv, env=env)   # srun, in its own session (slurmclient: the one seam)
    streams: dict[str, list[str]] = {"out": [], "err": []}

    def read(name: str, pipe: Any) -> None:
        kept = 0
        for raw in pipe:
            if kept < MAX_STREAM_BYTES:
                kept += len(raw)
                streams[name].append(raw.decode("utf-8", "replace").rstrip("\n"))
        pipe.close()

    readers = [threading.Thread(target=read, args=(n, p), daemon=True)
               for n, p in (("out", proc.stdout), ("err", proc.stderr))]
    for t in readers:
        t.start()
    timed_out = interrupted = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    except KeyboardInterrupt:
        interrupted = True
    finally:
        slurmclient.stop(proc, grace_s=15)   # TERM (srun passes it on to the tasks), then KILL
        for t in readers:
            t.join(timeout=5)
    return StepOutput(streams["out"], streams["err"], proc.returncode, timed_out, interrupted)


# ---------------------------------------------------------------------------------------------
# reading the figures
# ---------------------------------------------------------------------------------------------


_FIELDS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "start": {},
    "init": {"backend": str, "import_s": (int, float), "init_s": (int, float)},
    "gemm": {"tflops": (int, float), "checksum": str, "local": int},
    "intra": {"gbps": (int, float)},
    "pair": {"round": int, "pair": list, "gbps": (int, float)},
    "world": {"gbps": (int, float)},
    "done": {"measure_s": (int, float)},
    "error": {"error": str},
}


def parse_output(lines: Iterable[str], marker: str, hosts: Sequence[str]) -> list[dict[str, Any]]:
    """The figure lines (``MARKER {json}``) of the step's stdout, validated: an event with
    an unknown kind, a field of the wrong type, or a host not among ``hosts`` is dropped."""
    known = set(hosts)
    events: list[dict[str, Any]] = []
    for raw in lines:
        if len(raw) > MAX_LINE_CHARS:
            continue
        label, text = label_of(raw)
        if not text.startswith(marker + " "):
            continue
        try:
            ev = load_json(text[len(marker) + 1:])  # NaN, 1e400, a 5,000-digit int or deep nesting: no figure
        except ValueError:
            continue
        if not isinstance(ev, dict) or ev.get("ev") not in _FIELDS:
            continue
        if not isinstance(ev.get("rank"), int) or isinstance(ev.get("rank"), bool) or ev.get("host") not in known:
            continue
        if label is not None and label != ev["rank"]:
            continue
        want = _FIELDS[ev["ev"]]
        if all(isinstance(ev.get(k), t) and not isinstance(ev.get(k), bool) for k, t in want.items()):
            if ev["ev"] == "pair" and not _pair_ok(ev, known):
                continue
            events.append(ev)
    return events


def _pair_ok(ev: dict[str, Any], known: set[str]) -> bool:
    """A pair figure names two known hosts, and its sweep (optional: one sweep before there were
    two) is a small integer."""
    sweep = ev.get("sweep", 1)
    return len(ev["pair"]) == 2 and all(h in known for h in ev["pair"]) and type(sweep) is int and 1 <= sweep <= 16


def task_errors(lines: Iterable[str]) -> tuple[dict[int, str], list[str]]:
    """The last line each task printed on stderr, and srun's own lines, printable."""
    last: dict[int, str] = {}
    srun_lines: list[str] = []
    for raw in lines:
        label, text = label_of(raw)
        text = printable(text.strip())[:300]
        if not text:
            continue
        if label is None:
            srun_lines = [*srun_lines[-_TAIL_LINES:], text]
        else:
            last[label] = text
    return last, srun_lines


def tasks_per_node(site: Site, env: dict[str, str] | None = None) -> int:
    """One task per GPU (NCCL), one per node on the CPU (gloo); inside a job (``env``) one per GPU
    the job holds on a node, where that is fewer than the site's (a job on part of a node)."""
    if site.perf.backend == "gloo":
        return 1
    held = held_gpus(env) if env is not None else None
    return min(int(site.nodes.gpus_per_node), held) if held else int(site.nodes.gpus_per_node)


def worker_spec(perf: Perf, marker: str, port: int) -> dict[str, Any]:
    """What every task is told (one JSON argument)."""
    return {"marker": marker, "port": port, "backend": perf.backend, "timeout_s": perf.timeout_s,
            "rounds": perf.rounds, "gemm_n": perf.gemm_n, "gemm_iters": perf.gemm_iters,
            "warmup": perf.warmup, "iters": perf.iters,
            "intra_bytes": int(perf.intra_message_mb * 1e6), "inter_bytes": int(perf.inter_message_mb * 1e6)}


def srun_argv(site: Site, hosts: Sequence[str], spec: dict[str, Any], extra_args: Sequence[str] = (),
              python: str | None = None, srun: str = "srun", per: int | None = None) -> list[str]:
    """The one srun step of the check: every task runs the worker with the same spec.

    Sized within any allocation that holds the nodes: one CPU a task, and ``--overcommit`` where
    the job holds fewer CPUs than the step has tasks (never "More processors requested than
    permitted" because the job asked for one task with many CPUs, whose count srun would inherit)."""
    per = per or tasks_per_node(site)
    n = len(hosts)
    gpus = [] if site.perf.backend == "gloo" else ["--gpus-per-task=1"]
    return [srun, "--nodes", str(n), "--ntasks", str(n * per), "--ntasks-per-node", str(per),
            "--nodelist", fold(hosts), "--label", "--kill-on-bad-exit=0", "--overlap",
            "--cpus-per-task", "1", "--overcommit", "--job-name", "clusterkit-perf", *gpus, *extra_args,
            python or sys.executable, "-m", "clusterkit.preflight.perf_worker",
            json.dumps(spec, separators=(",", ":"))]
