"""The supervisor at work: starts the launcher, hears Slurm's signals, acts on
:mod:`clusterkit.supervise.decide`'s answers (docs/architecture.md §3, "Signals, requeue, budget").

It runs as the batch script itself (the job script ``exec``s it), so Slurm's ``--signal=B:USR2``
and TERM reach it directly.  srun answers SIGTERM with "forcing job termination" (SIGKILL to
every task), so it never signals srun: the time-limit warning reaches the ranks through their step
(``scancel --signal=SIG JOBID``: every task and its children, not the batch host's processes), and
Slurm's own TERM has reached them already.  A launcher on the batch host (no step) is told by TERM.
"""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import NoReturn

from clusterkit import jobfiles, slurmclient
from clusterkit.hostlist import fold
from clusterkit.safefile import NotRegular, read_capped
from clusterkit.supervise import decide, dumps, judge, owned, recheck, recovery, replan, stall, teardown, watch
from clusterkit.supervise.events import Events, die_by_term
from clusterkit.supervise.hangcheck import after_hang, perf_check
from clusterkit.supervise.joblog import log, relay, say
from clusterkit.supervise.straggle_watch import ended_why, poll_s, replacer_of

WAITING = "waiting for Slurm to end this run; no result is written"
SLURM_END_WAIT_S = 600.0   # how long a run waits for Slurm to end it before it exits itself
_LOOP_S = 30.0             # the longest one wait lasts (the pipe ends it on any signal)

Client = Callable[..., "subprocess.CompletedProcess[str]"]


@dataclass(frozen=True)
class Spec:
    """What the job script hands over: the launch argv and how this run ends."""

    launch: tuple[str, ...]
    mode: str                      # step (srun step), here (launcher on the batch host), local (no Slurm)
    run_dir: str
    job_id: str
    restarts: int = 0
    max_restarts: int = 0
    grace_s: int = 0
    stop_signal: str = "TERM"
    requeue_by: str = "clusterkit"
    chain_ids: str = ""            # a chain member that is not the last: the chain's ids file
    chain_stops: tuple[str, ...] = ()
    max_relaunches: int = -1       # relaunches in the allocation after a failure; -1: recovery off
    watch: stall.Limits | None = None   # stall detection (supervise/watch.py); None: not watched
    recheck: tuple[str, str] | None = None   # (site file, stage): spares checked before a relaunch takes them
    hang_check: tuple[str, str, float] | None = None   # (site file, stage, seconds): the perf check after a hang
    teardown: tuple[str, ...] = ()      # the job's teardown steps, run before the result (supervise/teardown.py)
    straggler_replace: float = 0.0      # a straggler by this ratio replaced at a checkpoint; 0: never


class Supervisor:
    """One run of one job: the launcher, the signals, the end."""

    def __init__(self, spec: Spec, client: Client = slurmclient.run) -> None:
        self.spec, self.client = spec, client
        self.warned: str | None = None
        self.preempted = False
        self.stopping = False
        self.grace_end: float | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.attempts: recovery.Run | None = None
        self.watcher: watch.Watcher | None = None
        self.stalled: replan.Verdict | None = None   # the attempt the watcher ended, for recovery
        self.parent: int | None = None   # the start's batch shell: its end ends a wait for Slurm's
        slurm = spec.mode != "local"
        if slurm:   # an INT ends a batch script as it ended the shell: by that signal, no traceback
            signal.signal(signal.SIGINT, signal.SIG_DFL)
        self.events = Events([signal.SIGUSR2, signal.SIGTERM, signal.SIGALRM] if slurm   # local: USR2 before
                             else [signal.SIGINT, signal.SIGTERM, signal.SIGUSR2])   # its time limit too

    # ---- the launcher
    def start(self) -> int | None:
        """Start the launcher (stdin /dev/null, INT and QUIT ignored); its status if it cannot start."""
        try:
            self.proc = slurmclient.launch(self.spec.launch)
        except OSError as exc:
            say(f"{self.spec.launch[0]}: {exc.strerror or 'cannot run'}")
            return 127
        return None

    def signal_launcher(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def wait_launcher(self) -> int:
        """Until the launcher is gone, or, after a warning, the grace time is over (143 then)."""
        assert self.proc is not None
        while True:
            for signum in self.events.take():
                self.on_signal(signum)
            if self.proc.poll() is not None:
                return decide.exit_status(self.proc.returncode)
            if self.grace_end is not None and time.monotonic() >= self.grace_end:
                log(f"the grace time of {self.spec.grace_s} s is over and ranks are still running")
                return 143
            watching = self.watcher is not None and self.grace_end is None and not self.stopping
            if watching and self.watcher is not None and (found := self.watcher.check()):
                log(f"watch: the run stalled: {found.worded()}: ending the launch step")
                self.stalled = watch.stalled_verdict(found, self.watcher.behind)
                return watch.end_step(self.proc, log)
            if self.replacer and self.grace_end is None and not self.stopping and (v := self.replacer.check()):
                self.stalled = v   # recovery's verdict: the straggler's node dropped, no doctor run
                return watch.end_step(self.proc, log)
            left = _LOOP_S if self.grace_end is None else max(0.0, self.grace_end - time.monotonic())
            poll = min(self.watcher.poll if self.watcher is not None else _LOOP_S, poll_s(self.replacer))
            for signum in self.events.wait(min(left, _LOOP_S, poll)):
                self.on_signal(signum)

    # ---- the signals while the run is on
    def on_signal(self, signum: int) -> None:
        if self.spec.mode == "local" and signum != signal.SIGUSR2:
            log(f"{signal.Signals(signum).name} received: sending TERM to the launcher")
            self.signal_launcher()
        elif signum == signal.SIGUSR2:
            self.warn()
        elif signum == signal.SIGTERM:
            self.stopping = True
            log("SIGTERM: Slurm is ending this run (cancel, preemption or time limit); the ranks have it too")
            if self.spec.mode == "here":
                self.signal_launcher()

    def warn(self) -> None:
        """Slurm's USR2 before the time limit: the ranks get the stop signal and the grace time to save."""
        if self.warned is not None:
            return
        self.warned = decide.WARNING
        log(f"SIGUSR2: time limit near (or preempted): SIG{self.spec.stop_signal} to every rank, "
            f"{self.spec.grace_s} s to save")
        if self.spec.mode == "step":
            relay(self.client(["scancel", f"--signal={self.spec.stop_signal}", self.spec.job_id]))
        else:
            self.signal_launcher()
        self.grace_end = time.monotonic() + self.spec.grace_s

    def drain(self) -> None:
        """The signals that came while a client ran (Slurm's TERM reaches the job's every process)."""
        for signum in self.events.take():
            self.on_signal(signum)

    # ---- the end
    def facts(self, rc: int) -> decide.Facts:
        s = self.spec
        return decide.Facts(restarts=s.restarts, max_restarts=s.max_restarts, rc=rc, warned=self.warned,
                            preempted=self.preempted, stopping=self.stopping, requeue_by=s.requeue_by,
                            judges_chain=bool(s.chain_ids))

    def show_job(self) -> str:
        answer = self.client(["scontrol", "-o", "show", "job", self.spec.job_id], ignore_term=True)
        self.drain()
        return answer.stdout[:65536] if answer.returncode == 0 else ""

    def look_for_preemption(self) -> None:
        """A preempted job's steps get SIGTERM while the batch script hears nothing until the grace
        time is over; ending now would record the run COMPLETED, and Slurm would never requeue it."""
        if (seen := decide.preemption(self.show_job())) is not None:
            self.warned, self.preempted = seen, True

    def run(self) -> NoReturn:
        why = owned.problem(os.environ)
        if why:   # checked again here, right before any rank starts (the job script did a moment ago)
            say(why)
            self.result(1, why)
            sys.exit(1)
        if self.spec.mode == "step" and self.spec.max_relaunches >= 0:
            s = self.spec
            self.attempts = recovery.start(os.environ, s.job_id, s.run_dir, s.restarts, s.max_relaunches, log)
        rc = self.launch_once()
        if self.spec.mode == "local":   # no requeue here: a time limit's end says how to go on
            rc, why = decide.local_end(rc, self.warned, self.spec.grace_s)
            self.result(rc, why)
            sys.exit(rc)
        while True:
            self.drain()
            if not self.stopping and self.warned is None:
                self.look_for_preemption()
            if rc == 0 or self.stopping or self.warned is not None or self.attempts is None:
                break
            rc = self.recover(rc, self.attempts)
        self.act(decide.end_game(self.facts(rc)), rc)

    def launch_once(self) -> int:
        rc = self.start()
        s, at = self.spec, self.attempts.attempt if self.attempts is not None else 0
        if s.watch is not None and s.mode != "local":
            self.watcher = watch.Watcher(s.watch, s.run_dir, s.job_id, s.restarts, at, log,
                                         dumps.sender(s.mode, s.job_id, self.client, self.proc), spy_mode=s.mode)
        self.replacer = replacer_of(s.straggler_replace, s.run_dir, s.job_id, self.attempts,
                                    s.max_restarts - s.restarts, log)
        if rc is None:
            rc = self.wait_launcher()
        self.grace_end = None
        log(f"launcher exited with status {rc}")
        return rc

    # ---- recovery inside the allocation (a failed attempt, the run not stopping)
    def recover(self, rc: int, run: recovery.Run) -> int:
        """Judge the failed attempt and act: the next attempt's status (a relaunch), or the end (a requeue
        without the bad nodes, a stop with the verdict).  Without doctor: as before recovery (``rc``)."""
        how = "doctor judges its logs" if self.stalled is None else ended_why(self.stalled)
        log(f"attempt {run.attempt} on {','.join(run.nodes)} failed (status {rc}): {how}")
        v, self.stalled = self.stalled or recovery.judge_launch(run, self.spec.launch, log), None
        recovery.copy_dumps(run, v, log)
        self.drain()
        if v is None:   # the run ends as it would without recovery
            self.attempts = None
            return rc
        hc = self.spec.hang_check
        v = after_hang(v, run, perf_check(*hc, log) if hc and not self.stopping else None, log)
        s, shown = self.spec, self.show_job()
        if decide.preemption(shown) or decide.requeue_pending(shown, s.restarts):   # the step died of Slurm's end
            self.warned, self.preempted = decide.preemption(shown) or "preemption (Slurm requeued the run)", True
            return rc   # (a preemption can kill the steps before the batch script hears of it)
        gone = replan.left_allocation(shown, run.allocation) or []   # Slurm took them out (node failure)
        down = [h for h in run.allocation if h in gone or h in recovery.down_nodes(self.client, run)]
        v = replan.with_slurm_facts(v, down)   # logs that blame nothing, a node Slurm calls down: its failure
        facts = replan.Attempted(attempt=run.attempt, nodes=run.nodes, unused=tuple(h for h in run.unused
                                 if h not in down), max_relaunches=run.max_relaunches, unknown_used=run.unknown_used,
                                 restarts_left=s.max_restarts - s.restarts, excluded=recovery.kept_out(shown, run),
                                 pinned=replan.requested(shown), partition=recovery.partition_nodes(self.client, shown),
                                 allocation=run.allocation, switch_of=recovery.switches(self.client, run))
        step = recheck.checked(v, down, facts, recheck.preflight(*s.recheck, log) if s.recheck else None, log)
        self.drain()
        if self.stopping or self.warned is not None:
            return rc   # Slurm is ending this run meanwhile: its end, not a relaunch
        try:
            recovery.record(run, rc, v, step)
        except OSError as exc:
            log(f"recovery: cannot write the attempts record: {exc.strerror or exc}")
        if step.dropped and s.chain_ids:
            self.keep_out_of_chain(step.dropped)
        if isinstance(step, replan.Relaunch):
            log(step.line)
            argv = recovery.relaunch(run, step, s.launch, os.environ, log)   # type: ignore[arg-type]
            if argv is not None:
                run.unknown_used = run.unknown_used or step.once
                self.spec = replace(s, launch=argv)
                return self.launch_once()
            step = replan.Stop(f"attempt {run.attempt} failed ({v.category}) and the launch cannot be rebuilt")
        if isinstance(step, replan.RequeueWithout):
            log(step.line)
            self.requeue_without(step.exclude)
        assert isinstance(step, replan.Stop)
        if s.chain_ids:
            self.judge_chain(v.category)
        say(step.reason)
        self.result(rc, step.reason)
        sys.exit(rc)

    def requeue_without(self, exclude: tuple[str, ...], because: str = "") -> NoReturn:
        """Requeue this job with ``exclude`` kept out (requeuehold, ExcNodeList, release: the start's
        choice of nodes and recovery both), ``because`` said if it fails; counted as a restart."""
        s, nodes = self.spec, fold(exclude)
        answer = self.client(["scontrol", "requeuehold", s.job_id], ignore_term=True)
        relay(answer)
        if answer.returncode != 0:
            why = f"{because}; but " * bool(because) + f"scontrol requeuehold failed: resubmit with --exclude {nodes}"
            say(why)
            self.result(1, why)
            sys.exit(1)
        if self.client(["scontrol", "update", f"JobId={s.job_id}", f"ExcNodeList={nodes}"],
                       ignore_term=True).returncode != 0:
            log(f"warning: scontrol update ExcNodeList={nodes} failed: the requeued job may get the same nodes")
        if self.client(["scontrol", "release", s.job_id], ignore_term=True).returncode != 0:
            log(f"warning: scontrol release failed: the requeued job is held (scontrol release {s.job_id})")
        if self.parent is None:   # (the start drops them unsaid): Slurm's next TERM ends the wait
            self.drain()
        self.events.take()
        self.wait_for_slurm_end(0, f"requeued with {nodes} excluded (restart {s.restarts + 1} of {s.max_restarts})")

    def act(self, action: decide.Action, rc: int) -> NoReturn:
        if isinstance(action, decide.WaitForSlurm):
            self.wait_for_slurm_end(action.status, action.why)
        if isinstance(action, decide.Finish):
            if action.judge_chain:
                self.judge_chain()
            self.result(action.status)
            sys.exit(action.status)
        if isinstance(action, decide.Fail):
            say(action.line or action.reason)
            self.result(action.status, action.reason)
            sys.exit(action.status)
        if isinstance(action, decide.Requeue):
            log(action.line)
            answer = self.client(["scontrol", "requeue", self.spec.job_id], ignore_term=True)
            relay(answer)
            self.drain()
            self.act(decide.after_requeue(self.facts(rc), answer.returncode == 0), rc)
        pending = decide.requeue_pending(self.show_job(), self.spec.restarts)
        self.act(decide.after_framework(self.facts(rc), pending), rc)

    def wait_for_slurm_end(self, status: int, why: str) -> NoReturn:
        """The one wait for Slurm's end, wherever Slurm ends this run itself (a requeue, a preemption,
        a cancel, the time limit).  No result (it would mark the job ended for good), no exit first
        (slurmctld may record a requeued run FAILED): Slurm's next TERM ends this process by that
        signal, or its KILL does; a late USR2 is noted.  Bounded: after 600 s it exits STATUS."""
        log(why)
        log(WAITING)
        end, slice_s = time.monotonic() + SLURM_END_WAIT_S, _LOOP_S if self.parent is None else 1.0
        while (left := end - time.monotonic()) > 0 and self.parent in (None, os.getppid()):   # (a KILLed parent)
            for signum in self.events.wait(min(left, slice_s)):
                if signum == signal.SIGTERM:
                    die_by_term()
                if signum == signal.SIGUSR2:
                    log("SIGUSR2 while waiting for Slurm to end this run: ignored")
        sys.exit(status)

    def result(self, status: int, reason: str = "") -> None:
        """The end for good: ``<job id>.result`` (its status) tells ``clusterkit status`` and
        submitit the job ended; ``<job id>.reason`` says why, when there is more to say."""
        s = self.spec
        if s.mode != "local" and decide.requeue_off_first(s.restarts, self.preempted, self.warned):
            answer = self.client(["scontrol", "update", f"JobId={s.job_id}", "Requeue=0"], ignore_term=True)
            if answer.returncode != 0:
                log("scontrol update Requeue=0 failed: Slurm 24.05 and later may requeue this job once more")
        if s.teardown:   # the training's status and result stay as they are, whatever the steps do
            teardown.run(s.teardown, status, reason, s.run_dir, s.job_id, os.environ, log)
        result = jobfiles.RESULT.path(s.run_dir, s.job_id)
        written = result.with_name(result.name + jobfiles.TMP)
        try:
            if reason:
                jobfiles.REASON.path(s.run_dir, s.job_id).write_text(f"{reason}\n")
            written.write_text(f"{status}\n")
            os.replace(written, result)
        except OSError as exc:
            say(f"cannot write {result}: {exc.strerror or exc}")

    # ---- a chain member that failed on its own (not stopped by Slurm)
    def judge_chain(self, known: str | None = None) -> None:
        """Ask doctor whether a restart can fix this failure (``known``: its verdict already);
        when not, mark this member unfixable and cancel the later members."""
        category = known if known is not None else judge.doctor_category(str(jobfiles.logs(self.spec.run_dir)))
        if category is None:
            log("chain: clusterkit is not on PATH on the batch host, so doctor cannot judge the failure: "
                "the next member runs")
            return
        if (category or "none") not in self.spec.chain_stops:
            log(f"chain: doctor says {category or 'nothing'}: a restart may fix it; the next member runs")
            return
        jobfiles.UNFIXABLE.path(self.spec.run_dir, self.spec.job_id).write_text(f"{category}\n")
        log(f"chain: doctor says {category}, which a restart cannot fix: the chain stops here")
        self.cancel_later_members()

    def later_members(self) -> list[str]:
        """The later members Slurm holds as this chain's (own jobs only).  The ids file lies in a
        run directory others may reach: a regular file only (never a FIFO or a link), 4 KiB, and
        each id kept only while Slurm holds it as this chain's next member (``decide.chain_successors``)."""
        ids = self.spec.chain_ids
        try:
            text = read_capped(ids, 4096, follow_symlinks=False)[0].decode("ascii", errors="replace")
        except NotRegular:
            log(f"chain: {ids} is not a regular file; the next member stops at its start")
            return []
        except OSError:
            text = ""
        listed = decide.later_members(text, self.spec.job_id)
        if not listed:
            log(f"chain: no later member listed in {ids} yet; the next member stops at its start")
            return []
        user = pwd.getpwuid(os.getuid()).pw_name
        pending = self.client(["squeue", "-h", "-u", user, "-t", "PENDING", "-o", "%i %E"], ignore_term=True).stdout
        rest = decide.chain_successors(listed, self.spec.job_id, pending)
        if rest != listed:
            log(f"chain: job {listed[len(rest)]} in {ids} is not a pending job of this user queued after job "
                f"{rest[-1] if rest else self.spec.job_id}; not touched, nor what follows it")
        return rest

    def keep_out_of_chain(self, dropped: tuple[tuple[str, str], ...]) -> None:
        """The chain's later members keep the dropped nodes out (their ExcNodeList, added to)."""
        for job in self.later_members():
            shown = self.client(["scontrol", "-o", "show", "job", job], ignore_term=True)
            keep = fold(dict.fromkeys([*recovery.excluded(shown.stdout[:65536]), *(h for h, _ in dropped)]))
            if self.client(["scontrol", "update", f"JobId={job}", f"ExcNodeList={keep}"],
                           ignore_term=True).returncode == 0:
                log(f"chain: job {job} keeps {keep} out")
            else:
                log(f"chain: scontrol update JobId={job} ExcNodeList={keep} failed")
        self.drain()

    def cancel_later_members(self) -> None:
        """The later members, cancelled (own jobs only)."""
        rest = self.later_members()
        if not rest:
            return
        user = pwd.getpwuid(os.getuid()).pw_name
        log(f"chain: cancelling the later members: {' '.join(rest)}")
        if self.client(["scancel", f"--user={user}", "--", *rest]).returncode != 0:
            log(f"chain: scancel of {' '.join(rest)} failed")
