"""``python -m clusterkit.supervise [options] -- LAUNCH ARGV...``: the job script's last line
(``exec``).  The launch argv is the job script's own, expanded by it; the run directory, the
job id and the restart count come from its environment (CK_RUN_DIR, CK_JOB_ID,
SLURM_RESTART_COUNT).  A wrong call is a usage error: one line, exit 2."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from clusterkit.supervise.endgame import Spec, Supervisor
from clusterkit.supervise.stall import Limits

USAGE = "python -m clusterkit.supervise --mode step|here|local [options] -- LAUNCH ARGV..."


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"clusterkit supervise: {message} (usage: {USAGE})", file=sys.stderr)
        raise SystemExit(2)


def parse(argv: Sequence[str], env: dict[str, str]) -> Spec:
    """The supervisor's :class:`Spec` from its argv and the job's environment; SystemExit(2)
    with one line when either is wrong."""
    words = list(argv)
    if "--" not in words or words.index("--") == len(words) - 1:
        _Parser().error("no launch command after --")
    cut = words.index("--")
    p = _Parser(prog="clusterkit.supervise", add_help=False)
    p.add_argument("--mode", choices=("step", "here", "local"), required=True)
    p.add_argument("--grace-s", type=int, default=0)
    p.add_argument("--max-restarts", type=int, default=0)
    p.add_argument("--max-relaunches", type=int, default=-1)
    p.add_argument("--stop-signal", default="TERM")
    p.add_argument("--requeue-by", choices=("clusterkit", "framework"), default="clusterkit")
    p.add_argument("--chain-ids", default="")
    p.add_argument("--chain-stops", default="")
    p.add_argument("--stall-floor-s", type=float, default=0.0)   # 0 (or none given): not watched
    p.add_argument("--stall-factor", type=float, default=Limits.factor)
    p.add_argument("--warmup-steps", type=int, default=Limits.warmup_steps)
    p.add_argument("--save-limit-s", type=float, default=Limits.save_s)
    p.add_argument("--straggler-replace", type=float, default=0.0)   # the straggler ratio; 0: never replaced
    p.add_argument("--recheck-site", default="")    # with --recheck-stage: spares checked before a relaunch
    p.add_argument("--recheck-stage", default="")
    p.add_argument("--hang-check-site", default="")   # with -stage and -s: the perf check after a hang
    p.add_argument("--hang-check-stage", default="")
    p.add_argument("--hang-check-s", type=float, default=600.0)
    p.add_argument("--teardown", action="append", default=[])   # a step's text, once per step, in order
    a = p.parse_args(words[:cut])
    if a.grace_s < 0 or a.max_restarts < 0 or a.max_relaunches < -1 or not a.stop_signal.isalnum():
        p.error("--grace-s and --max-restarts must be 0 or more, --stop-signal a signal name")
    if not (0 <= a.stall_floor_s <= 86400 and 1 <= a.stall_factor <= 1000 and a.warmup_steps >= 0
            and 0 < a.save_limit_s <= 86400):
        p.error("--stall-floor-s must be 0 to 86400, --stall-factor 1 to 1000, --warmup-steps 0 or more, "
                "--save-limit-s above 0 and at most 86400")
    if not (a.straggler_replace == 0 or 1 < a.straggler_replace <= 100):
        p.error("--straggler-replace must be 0 (off) or a ratio above 1 and at most 100")
    if bool(a.recheck_site) != bool(a.recheck_stage):
        p.error("--recheck-site and --recheck-stage go together")
    if bool(a.hang_check_site) != bool(a.hang_check_stage) or not 0 < a.hang_check_s <= 86400:
        p.error("--hang-check-site and --hang-check-stage go together, --hang-check-s above 0 and at most 86400")
    missing = [name for name in ("CK_RUN_DIR", "CK_JOB_ID") if not env.get(name)]
    if missing:
        p.error(f"{' and '.join(missing)} not set: the job script sets them before it starts the supervisor")
    restarts = env.get("SLURM_RESTART_COUNT", "0") or "0"
    if not restarts.isdigit():
        p.error(f"SLURM_RESTART_COUNT={restarts[:20]!r} is not a number")
    return Spec(launch=tuple(words[cut + 1:]), mode=a.mode, run_dir=env["CK_RUN_DIR"], job_id=env["CK_JOB_ID"],
                restarts=int(restarts), max_restarts=a.max_restarts, grace_s=a.grace_s, stop_signal=a.stop_signal,
                requeue_by=a.requeue_by, chain_ids=a.chain_ids,
                chain_stops=tuple(a.chain_stops.split()), max_relaunches=a.max_relaunches,
                watch=Limits(a.stall_floor_s, a.stall_factor, a.warmup_steps, a.save_limit_s)
                if a.stall_floor_s else None,
                recheck=(a.recheck_site, a.recheck_stage) if a.recheck_site else None,
                hang_check=(a.hang_check_site, a.hang_check_stage, a.hang_check_s) if a.hang_check_site else None,
                teardown=tuple(a.teardown), straggler_replace=a.straggler_replace)


def main(argv: Sequence[str] | None = None) -> None:
    Supervisor(parse(sys.argv[1:] if argv is None else argv, dict(os.environ))).run()


if __name__ == "__main__":
    main()
