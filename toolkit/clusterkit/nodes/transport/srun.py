"""SrunRunner: one srun step inside a Slurm allocation, one task per node."""

from __future__ import annotations

import queue
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import Any

from clusterkit import slurmclient
from clusterkit.tooltext import parse_int

from .base import (
    DEFAULT_COMMAND_TIMEOUT_S,
    DEFAULT_FANOUT,
    MAX_OUTPUT_BYTES,
    ErrorKind,
    NodeOutput,
    ResultCallback,
    RunResults,
    _decode,
    _one_line,
    _unique,
)

LINE_MAX_BYTES = 1 << 20    # one output line kept whole up to this; longer lines lose their middle
_LINE_TAIL_BYTES = 4096     # ... but keep their end, where the wrapper's markers are
_SRUN_MESSAGES = 200        # srun's own (unlabelled) lines kept
_EVENTS = 1024              # lines in flight between the reader threads and the step


class SrunRunner:
    """Runs the script inside a Slurm allocation: one ``srun`` step, one task per node.

    For sites that block SSH to compute nodes, and for the rendered job script's own first
    step.  ``srun --nodes=N --ntasks=N --ntasks-per-node=1 --nodelist=HOSTS --label`` runs a
    small bash wrapper on each node that prints a marker with the Slurm node name, runs the
    script under ``timeout`` and prints a marker with its exit status; ``--label`` tags each
    output line with the task, so the outputs are told apart without a shared filesystem.
    Outside an allocation srun asks Slurm for one, as srun does.  ``fanout`` is ignored
    (Slurm launches all tasks at once).  Output is line based: a missing final newline
    is kept, but stdout and stderr lose their relative order.  What a node prints is bounded
    as over SSH: :data:`MAX_OUTPUT_BYTES` per stream per node (the rest dropped, the result
    ``truncated``), one line at most :data:`LINE_MAX_BYTES` (its middle dropped).  Every host
    gets a result, and ``on_result`` is called for each (but those cut off by Ctrl-C): a node
    whose task never answered is a LAUNCH or COMMAND_TIMEOUT failure, never left out.
    """

    name = "srun"

    def __init__(self, *, command_timeout_s: float = DEFAULT_COMMAND_TIMEOUT_S,
                 launch_timeout_s: float = 60.0, srun: str = "srun",
                 extra_args: Sequence[str] = (), env: dict[str, str] | None = None,
                 fanout: int = DEFAULT_FANOUT):
        self.command_timeout_s = command_timeout_s
        self.launch_timeout_s = launch_timeout_s
        self.srun = srun
        self.extra_args = tuple(extra_args)
        self.env = env
        self.fanout = fanout

    def argv(self, hosts: Sequence[str], script: str, timeout: float, marker: str) -> list[str]:
        """The srun command line for ``hosts`` (exposed for ``--dry-run`` style displays)."""
        from clusterkit.hostlist import fold

        n = str(len(hosts))
        # $1 script, $2 timeout, $3 marker.  `timeout -k 2` so a script ignoring TERM dies too.
        # The exit marker goes to both streams: srun keeps each stream's order per task but not
        # the order between them, so a node is complete once both markers have arrived.
        wrapper = ('printf "%s node %s\\n" "$3" "${SLURMD_NODENAME:-$(hostname -s)}"; '
                   'timeout -k 2 "$2" bash -c "$1"; rc=$?; printf "%s exit %s\\n" "$3" "$rc"; '
                   'printf "%s exit %s\\n" "$3" "$rc" >&2')
        return [self.srun, "--nodes", n, "--ntasks", n, "--ntasks-per-node", "1",
                "--nodelist", fold(hosts), "--label", "--kill-on-bad-exit=0", "--overlap",
                "--cpus-per-task", "1",   # within any allocation: not the job's own count, which srun inherits
                "--job-name", "clusterkit-preflight", *self.extra_args,
                "bash", "-c", wrapper, "clusterkit-preflight", script, f"{timeout:g}", marker]

    def run_many(self, hosts: Sequence[str], script: str, *, timeout_s: float | None = None,
                 fanout: int | None = None,
                 on_result: ResultCallback | None = None) -> RunResults:
        """Run ``script`` once on every host with one srun step; see the module docstring."""
        import secrets

        hosts = _unique(hosts)
        if not hosts:
            return RunResults()
        timeout = self.command_timeout_s if timeout_s is None else timeout_s
        marker = f"@@clusterkit-{secrets.token_hex(6)}"
        step = _SrunStep(hosts, marker, on_result)
        t0 = time.monotonic()
        interrupted = False
        try:
            step.start(self.argv(hosts, script, timeout, marker), self.env)
            step.wait(self.launch_timeout_s + timeout + 5)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            step.stop()
        results = RunResults(((h, step.result(h, timeout, interrupted)) for h in hosts),
                             interrupted=interrupted, wall_s=time.monotonic() - t0)
        if on_result is not None:  # nodes that never finished are results too
            for host, res in results.items():
                if host not in step.done and res.error is not ErrorKind.INTERRUPTED:
                    on_result(res)
        return results


class _SrunStep:
    """One running srun and what its labelled output said so far."""

    def __init__(self, hosts: list[str], marker: str, on_result: ResultCallback | None):
        self.hosts = hosts
        self.marker = marker
        self.on_result = on_result
        self.task_host: dict[str, str] = {}           # task label -> node name
        self.out: dict[str, list[str]] = {}           # task label -> stdout lines
        self.err: dict[str, list[str]] = {}           # task label -> stderr lines
        self.kept: dict[tuple[str, bool], int] = {}   # (label, is_stdout) -> bytes kept
        self.cut: set[str] = set()                    # labels whose output was cut
        self.status: dict[str, int] = {}              # task label -> exit status
        self.ends: dict[str, set[bool]] = {}          # task label -> streams that ended
        self.srun_err: list[str] = []                 # srun's own messages
        self.t0 = time.monotonic()
        self.done: dict[str, NodeOutput] = {}
        self.events: queue.Queue[str] = queue.Queue(maxsize=_EVENTS)  # bounded: readers wait
        self.closing = threading.Event()
        self.proc: subprocess.Popen[bytes] | None = None
        self.launch_error = ""
        self.timed_out = False

    def start(self, argv: list[str], env: dict[str, str] | None) -> None:
        try:
            # Own session: the terminal's Ctrl-C reaches us, and we end the step ourselves.
            self.proc = slurmclient.start(argv, env=env)
        except OSError as exc:
            self.launch_error = f"cannot run {argv[0]}: {exc.strerror or exc}"
            return
        threading.Thread(target=self._read, args=(self.proc.stdout, True), daemon=True).start()
        threading.Thread(target=self._read, args=(self.proc.stderr, False), daemon=True).start()

    def _read(self, stream: Any, is_stdout: bool) -> None:
        """Hand srun's lines to the step, each at most LINE_MAX_BYTES (head and tail kept)."""
        tag = "o" if is_stdout else "e"
        head, tail, cut = bytearray(), b"", False
        for chunk in iter(lambda: stream.readline(65536), b""):
            if len(head) < LINE_MAX_BYTES:
                head += chunk
            else:
                cut, tail = True, (tail + chunk)[-_LINE_TAIL_BYTES:]
            if chunk.endswith(b"\n"):
                self._put(tag, head, tail, cut)
                head, tail, cut = bytearray(), b"", False
        if head:
            self._put(tag, head, tail, cut)
        self._put_event("x")

    def _put(self, tag: str, head: bytes | bytearray, tail: bytes, cut: bool) -> None:
        raw = bytes(head) + (b" [...] " + tail if cut else b"")
        self._put_event(("C" if cut else "") + tag + _decode(raw).rstrip("\n"))

    def _put_event(self, event: str) -> None:
        while not self.closing.is_set():
            try:
                self.events.put(event, timeout=0.5)
                return
            except queue.Full:
                continue

    def wait(self, limit_s: float) -> None:
        """Consume output until srun's streams close or ``limit_s`` passes."""
        if self.proc is None:
            return
        closed = 0
        deadline = time.monotonic() + limit_s
        while closed < 2:
            left = deadline - time.monotonic()
            if left <= 0:
                self.timed_out = True
                return
            try:
                ev = self.events.get(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            if ev == "x":
                closed += 1
                continue
            cut = ev[0] == "C"
            ev = ev[1:] if cut else ev
            self._line(ev[0] == "o", ev[1:], cut)

    def _line(self, is_stdout: bool, line: str, cut: bool = False) -> None:
        label, sep, text = line.partition(": ")
        label = label.strip()
        if not sep or parse_int(label, max_digits=9) is None:
            if line.strip() and len(self.srun_err) < _SRUN_MESSAGES:
                self.srun_err.append(line[:1000])  # srun's own messages are not labelled
            return
        if cut:
            self.cut.add(label)
        mark = text.rfind(self.marker + " ")
        if mark < 0:
            self._keep(label, is_stdout, text + "\n")
            return
        before, rest = text[:mark], text[mark + len(self.marker) + 1:]
        word, _, value = rest.partition(" ")
        if before:  # the script's last line had no newline
            self._keep(label, is_stdout, before)
        if word == "node":
            self.task_host.setdefault(label, value.strip())  # the wrapper's line comes first
        elif word == "exit":
            ends = self.ends.setdefault(label, set())
            ends.add(is_stdout)
            status = parse_int(value.strip(), max_digits=3, signed=True)
            self.status[label] = -1 if status is None else status
            if len(ends) == 2 and label in self.task_host:
                self._finish(self.task_host[label], label)

    def _keep(self, label: str, is_stdout: bool, text: str) -> None:
        """Keep a node's output within MAX_OUTPUT_BYTES per stream; mark the rest as cut."""
        key = (label, is_stdout)
        kept = self.kept.get(key, 0)
        size = len(text.encode("utf-8", errors="replace"))
        if kept + size > MAX_OUTPUT_BYTES:
            self.cut.add(label)
            return
        self.kept[key] = kept + size
        (self.out if is_stdout else self.err).setdefault(label, []).append(text)

    def _finish(self, host: str, label: str) -> None:
        rc = self.status[label]
        out, err = "".join(self.out.get(label, [])), "".join(self.err.get(label, []))
        dt = time.monotonic() - self.t0
        cut = label in self.cut
        if host in self.done:  # a second task claiming the same node: the first one stands
            return
        if rc == 124:  # coreutils timeout's "timed out" status
            res = NodeOutput(host, None, out, err, ErrorKind.COMMAND_TIMEOUT,
                             "command still running at its timeout; killed on the node", dt, cut)
        else:
            res = NodeOutput(host, rc, out, err, duration_s=dt, truncated=cut)
        self.done[host] = res
        if self.on_result is not None:
            self.on_result(res)

    def stop(self) -> None:
        """End srun if it still runs (TERM ends the step; KILL if it lingers)."""
        self.closing.set()  # reader threads stop handing lines over
        if self.proc is not None:
            slurmclient.stop(self.proc)

    def result(self, host: str, timeout: float, interrupted: bool) -> NodeOutput:
        """The node's result, or why it has none."""
        label = next((t for t, h in self.task_host.items() if h == host), None)
        if host not in self.done and label in self.status and not interrupted:
            self._finish(host, label)  # srun ended after one stream's marker: good enough
        if host in self.done:
            return self.done[host]
        dt = time.monotonic() - self.t0
        out = "".join(self.out.get(label, [])) if label else ""
        err = "".join(self.err.get(label, [])) if label else ""
        if interrupted:
            return NodeOutput(host, None, out, err, ErrorKind.INTERRUPTED,
                              "interrupted before this node finished", dt)
        if self.timed_out and label is not None:
            return NodeOutput(host, None, out, err, ErrorKind.COMMAND_TIMEOUT,
                              f"no exit status within {timeout:g} s; srun stopped", dt)
        why = self.launch_error or _one_line(" | ".join(self.srun_err[-3:])) or "no output from srun"
        if self.timed_out:
            why = f"srun did not start a task here in time ({why})"
        return NodeOutput(host, None, out, err, ErrorKind.LAUNCH, why, dt)
