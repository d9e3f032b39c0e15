"""``python -m clusterkit.supervise.start [options]``: the supervisor's start of a Slurm run with
the in-job preflight (docs/architecture.md §3, "The supervisor's start").

Before any setup step or rank runs on the allocated nodes, the supervisor checks them (``clusterkit
preflight --transport srun --json`` over the whole allocation, the report kept as
``logs/preflight-<job>.r<restart>.json``), chooses the nodes the job launches on (``clusterkit
choose-nodes``, which writes ``logs/nodes-<job>.r<restart>.json``) and acts on the choice:

* launch: the chosen hosts, one a line, on stdout, exit 0; the job script sets its hosts from them
  and goes on (its node setup steps and the launch run on those nodes alone);
* end: the result line written (:meth:`Supervisor.result`), exit 1;
* requeue with the bad nodes excluded: the supervisor's own requeue (the one recovery makes when
  no spare is left, :meth:`Supervisor.requeue_without`), then its wait for Slurm's end.

It runs as a child of the batch shell (the job script waits for it and passes a TERM sent to the
shell alone on to it); Slurm's TERM ends it by that signal (exit status 143 to the shell), except
while a requeue's scontrol calls run; a parent that is gone (Slurm's KILL to the batch shell)
ends its wait for Slurm's end.  ``clusterkit`` is the one on PATH where there is one (as the
job script ran it), else this Python's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from clusterkit import jobfiles
from clusterkit.hostlist import HostlistError, expand, is_host
from clusterkit.supervise.endgame import Spec, Supervisor
from clusterkit.supervise.events import die_by_term
from clusterkit.supervise.joblog import log, say
from clusterkit.tooltext import decode, load_json, printable

USAGE = ("python -m clusterkit.supervise.start --site FILE --stage NAME --nodes N [--spares N] [--perf] "
         "[--srun-arg ARG]... [--max-restarts N] [--exclude NODESET] [--site-nodes N] [--resubmit CMD]")
CHOOSE_TIMEOUT_S = 300.0
CHOOSE_MAX_OUT = 16 << 20
_POLL_S = 1.0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"clusterkit supervise.start: {message} (usage: {USAGE})", file=sys.stderr)
        raise SystemExit(2)


def clusterkit_command() -> list[str]:
    """The ``clusterkit`` the job script ran: PATH's, else this Python's (which the job script chose)."""
    found = shutil.which("clusterkit")
    return [found] if found else [sys.executable, "-m", "clusterkit"]


class Start:
    """The start of one run: preflight, choice, and what the choice says."""

    def __init__(self, a: argparse.Namespace, env: dict[str, str]) -> None:
        self.a, self.env = a, env
        self.slurm_job = env["SLURM_JOB_ID"]
        self.nodelist = env["SLURM_JOB_NODELIST"]
        restarts = int(env.get("SLURM_RESTART_COUNT", "0") or "0")
        self.sup = Supervisor(Spec(launch=("true",), mode="step", run_dir=env["CK_RUN_DIR"], job_id=env["CK_JOB_ID"],
                                   restarts=restarts, max_restarts=a.max_restarts))
        self.sup.parent = os.getppid()
        self.logs = jobfiles.logs(env["CK_RUN_DIR"])

    def fail(self, why: str) -> NoReturn:
        say(why)
        self.sup.result(1, why)
        sys.exit(1)

    def heard_term(self) -> bool:
        return signal.SIGTERM in self.sup.events.take()

    def run_child(self, argv: list[str], **kw: object) -> int:
        """A child (preflight) to its end, this process watching for Slurm's TERM meanwhile:
        the child is told too, and this process ends by it; 127 when it cannot run."""
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, **kw)   # type: ignore[call-overload]
        except OSError:
            return 127
        heard: list[int] = []
        while True:
            ended = proc.poll() is not None
            heard += self.sup.events.take()
            if signal.SIGTERM in heard or os.getppid() != self.sup.parent:   # (Slurm's TERM ends the child too)
                if not ended:
                    proc.send_signal(signal.SIGTERM)
                die_by_term()
            if ended:
                return int(proc.returncode)
            heard += self.sup.events.wait(_POLL_S)

    def preflight(self) -> None:
        """The report of every allocated node, in place at ``logs/preflight-<job>.r<restart>.json``."""
        a = self.a
        report = jobfiles.PREFLIGHT_REPORT.path(self.sup.spec.run_dir, self.slurm_job, self.sup.spec.restarts)
        argv = [*clusterkit_command(), "preflight", "--site", a.site, "--stage", a.stage, "--transport=srun",
                "--nodelist", self.nodelist, *(["--perf"] if a.perf else []),
                *(f"--srun-arg={arg}" for arg in a.srun_arg), *self.capacity_args(), "--json"]
        tmp = Path(f"{report}.tmp")
        try:
            with tmp.open("wb") as out:
                rc = self.run_child(argv, stdout=out)
        except OSError as exc:
            self.fail(f"cannot write the preflight report {tmp}: {exc.strerror or exc}")
        if rc not in (0, 1, 3):   # 0 all ok, 1 some bad, 3 some unreachable: the report says which
            self.fail(f"preflight could not check the allocated nodes (exit {rc}); not starting the launcher")
        try:
            os.replace(tmp, report)
        except OSError:
            self.fail(f"cannot move the preflight report into place at {report}")
        for line in storage_warnings(report):
            log(f"preflight: warning: {line}")

    def capacity_args(self) -> list[str]:
        """The checkpoint capacity check (a warning in the job: the nodes are not at fault)."""
        ckpt = self.env.get("CK_CHECKPOINT_DIR", "")
        if not self.a.model_params or not ckpt:
            return []
        return ["--model-params", self.a.model_params, "--keep-checkpoints", str(self.a.keep_checkpoints),
                "--checkpoint-dir", ckpt, "--checkpoint-warn-only"]

    def choose(self) -> tuple[int, list[str]]:
        """``clusterkit choose-nodes`` on the report: its exit status and its lines (bounded)."""
        a, s = self.a, self.sup.spec
        argv = [*clusterkit_command(), "choose-nodes", "--run-dir", s.run_dir, "--job", self.slurm_job,
                "--restart", str(s.restarts), "--allocation", self.nodelist, "--nodes", str(a.nodes),
                "--spares", str(a.spares), "--check", "perf" if a.perf else "base",
                "--restarts-left", str(max(s.max_restarts - s.restarts, 0)),
                *(["--exclude", a.exclude] if a.exclude else []),
                *(["--site-nodes", str(a.site_nodes)] if a.site_nodes else []), "--resubmit", a.resubmit]
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, timeout=CHOOSE_TIMEOUT_S,
                                  check=False)
        except (OSError, subprocess.TimeoutExpired):
            return 1, []
        if self.heard_term():
            die_by_term()
        return proc.returncode, decode(proc.stdout[:CHOOSE_MAX_OUT]).splitlines()[:100_000]

    def run(self) -> NoReturn:
        self.preflight()
        rc, lines = self.choose()
        if rc == 0 and lines and all(is_host(h) for h in lines):
            print("\n".join(lines), flush=True)
            sys.exit(0)
        if rc == 4 and len(lines) >= 2:   # requeue: the ExcNodeList, then why
            try:
                exclude = tuple(expand(lines[0]))
            except HostlistError:
                self.fail(f"clusterkit choose-nodes named no nodes to exclude ({lines[0][:200]!r})")
            self.sup.requeue_without(exclude, because=lines[1])
        if rc == 1:   # too few good nodes: the result line names them
            self.fail(lines[0] if lines else "clusterkit choose-nodes failed (exit 1; the error above says why)")
        self.fail(f"clusterkit choose-nodes failed (exit {rc}; the error above says why); not starting the launcher")


def storage_warnings(report: Path) -> list[str]:
    """The checkpoint checks' warnings of a preflight report, each once with its nodes (bounded)."""
    try:
        with report.open("rb") as f:
            nodes = load_json(decode(f.read(16 << 20)))["nodes"]
        said: dict[str, list[str]] = {}
        for node in nodes[:100_000]:
            for c in node.get("checks", [])[:1000]:
                if str(c.get("check", "")).startswith("checkpoint.") and c.get("status") == "warn":
                    said.setdefault(printable(str(c.get("message", "")))[:300], []).append(str(node.get("host"))[:64])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []
    return [f"{msg} (on {', '.join(hosts[:8])}{' ...' if len(hosts) > 8 else ''})" for msg, hosts in said.items()]


def parse(argv: Sequence[str], env: dict[str, str]) -> argparse.Namespace:
    p = _Parser(prog="clusterkit.supervise.start", add_help=False)
    p.add_argument("--site", required=True)
    p.add_argument("--stage", required=True)
    p.add_argument("--perf", action="store_true")
    p.add_argument("--srun-arg", action="append", default=[])
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--spares", type=int, default=0)
    p.add_argument("--max-restarts", type=int, default=0)
    p.add_argument("--exclude", default="")
    p.add_argument("--site-nodes", type=int, default=0)
    p.add_argument("--resubmit", default="")
    p.add_argument("--model-params", default="")
    p.add_argument("--keep-checkpoints", type=int, default=2)
    a = p.parse_args(list(argv))
    if a.nodes < 1 or a.spares < 0 or a.max_restarts < 0 or a.site_nodes < 0:
        p.error("--nodes must be 1 or more, --spares, --max-restarts and --site-nodes 0 or more")
    missing = [n for n in ("CK_RUN_DIR", "CK_JOB_ID", "SLURM_JOB_ID", "SLURM_JOB_NODELIST") if not env.get(n)]
    if missing:
        p.error(f"{' and '.join(missing)} not set: the job script sets them before it starts the supervisor")
    if not (env.get("SLURM_RESTART_COUNT", "0") or "0").isdigit():
        p.error(f"SLURM_RESTART_COUNT={env['SLURM_RESTART_COUNT'][:20]!r} is not a number")
    return a


def main(argv: Sequence[str] | None = None) -> None:
    env = dict(os.environ)
    Start(parse(sys.argv[1:] if argv is None else argv, env), env).run()


if __name__ == "__main__":
    main()
