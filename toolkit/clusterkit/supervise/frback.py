"""Flight-recorder dumps kept on the nodes, and the copy back of the ranks a verdict names
(docs/nccl.md, "Flight recorder"; docs/architecture.md §3, "Recovery inside the allocation").

Above the site's ``logs.debug_max_nodes`` the job sets the flight recorder's dump file to each
node's own disk (``<logs.node_local_dir>/clusterkit-fr-<job>.r<restart>.rank<R>``:
:data:`clusterkit.pyspy.FR_LOCAL`): at 2,048 nodes of 8 GPUs a timeout would otherwise make 16,384
dumps at once in the run's shared ``logs/``.  After a failed attempt the supervisor has a verdict
(doctor's on the attempt's logs, or the stall watch's rank behind); :func:`copy_named` then runs one
bounded ``srun --overlap`` step, one task on the node of each rank named, as py-spy's step does
(:mod:`clusterkit.supervise.spy`), and each node copies its named ranks' dumps into the run's logs
as ``fr-<job>.r<restart>.rank<R>``, where doctor reads them.

On the node (``python -m clusterkit.supervise.frback``): the source name is made from the job, the
restart and the rank alone (no name a node wrote picks a path), opened without following a link and
without blocking, a regular file of this user, at most :data:`MAX_BYTES`; at most :data:`MAX_RANKS`
ranks; written to a hidden temporary name in the logs folder (opened by descriptor, never through a
link) and renamed.  One line per rank (stdout); exit 0.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping

from clusterkit import pyspy, slurmclient
from clusterkit.tooltext import printable_lines

MAX_BYTES = 64 << 20     # doctor reads a dump up to this size (clusterkit.diagnose.flight.MAX_BYTES)
MAX_RANKS = 16           # ranks copied back after one failure
COPY_WAIT_S = 30.0       # the step's start on the nodes, then the copies
CHUNK = 1 << 20
_JOB = re.compile(r"[0-9]{1,12}(?:_[0-9]{1,9})?")
_TARGET = re.compile(r"(\d{1,7})@([A-Za-z0-9._-]{1,64})")
_DIR = re.compile(r"/[A-Za-z0-9._+/-]{0,200}")
_FLAGS = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def local_dir(env: Mapping[str, str], job: str, restart: int) -> str | None:
    """The node-local folder of this run's flight-recorder dumps, where the job script put them
    there (its ``TORCH_FR_DUMP_TEMP_FILE``, or the older name, ends in :data:`pyspy.FR_LOCAL`); else
    None (the dumps go to the run's logs already, or the job set its own)."""
    value = env.get("TORCH_FR_DUMP_TEMP_FILE") or env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE") or ""
    folder, _, name = value.rpartition("/")
    folder = folder or "/"
    if name != pyspy.FR_LOCAL.format(job=job, restart=restart) or not _DIR.fullmatch(folder) \
            or os.path.normpath(folder) != folder:
        return None
    return folder


def argv(python: str, folder: str, logs: str, job: str, restart: int, targets: list[tuple[int, str]]) -> list[str]:
    """One step, one task on each node of the ranks named."""
    hosts = sorted({h for _, h in targets})
    n = str(len(hosts))
    return ["srun", "--nodes", n, "--ntasks", n, "--ntasks-per-node", "1", "--nodelist", ",".join(hosts),
            "--overlap", "--kill-on-bad-exit=0", "--cpus-per-task", "1", "--job-name", "clusterkit-frback",
            python, "-m", "clusterkit.supervise.frback", "--from", folder, "--logs", logs, "--job", job,
            "--restart", str(restart), *[f"{r}@{h}" for r, h in targets]]


def copy_named(targets: list[tuple[int, str | None]], run_dir: str, job: str, restart: int,
               log: Callable[[str], None], env: Mapping[str, str] = os.environ, python: str = sys.executable) -> None:
    """Copy the dumps of the ranks named (rank, node) from their nodes into the run's logs, where the
    job keeps them node-local; a rank whose node is not known is said, not looked for."""
    folder = local_dir(env, job, restart)
    if folder is None or not targets:
        return
    known = [(r, h) for r, h in targets[:MAX_RANKS] if h is not None]
    for r, _ in [t for t in targets[:MAX_RANKS] if t[1] is None]:
        log(f"flight recorder: rank {r}'s dump stays on its node ({folder}): its node is not known")
    if not known:
        return
    with tempfile.TemporaryFile(prefix="ck-frback-") as out:
        try:
            proc = slurmclient.step(argv(python, folder, f"{run_dir.rstrip('/')}/logs", job, restart, known), out)
        except OSError as exc:
            log(f"flight recorder: the copy step could not start: {exc.strerror or exc}")
            return
        try:
            proc.wait(timeout=COPY_WAIT_S)
        except subprocess.TimeoutExpired:   # the step is ended; what it copied stands
            slurmclient.stop(proc, grace_s=1.0)
            log(f"flight recorder: the copy step had not ended after {COPY_WAIT_S:.0f} s: ended")
        out.seek(0)
        text = printable_lines(out.read(16 << 10).decode("utf-8", errors="replace"))
    for line in [ln.strip()[:300] for ln in text.splitlines() if ln.strip()][:2 * MAX_RANKS]:
        log(f"flight recorder: {line}")


def _node() -> str:
    return os.environ.get("SLURMD_NODENAME") or os.uname().nodename


def copy_one(src_dir: int, logs_dir: int, job: str, restart: int, rank: int) -> str:
    """One rank's dump from the node's folder into the logs folder (both open descriptors); what happened."""
    name = f"{pyspy.FR_LOCAL.format(job=job, restart=restart)}{rank}"
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | _FLAGS, dir_fd=src_dir)
    except FileNotFoundError:
        return "no dump"
    except OSError as exc:
        return f"cannot open its dump: {exc.strerror or exc}"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "its dump is not a regular file: left alone"
        if st.st_uid != os.getuid():
            return "its dump is not this user's: left alone"
        if st.st_size > MAX_BYTES:
            return f"its dump is larger than {MAX_BYTES >> 20} MiB: left on the node"
        return _write(fd, logs_dir, f"fr-{job}.r{restart}.rank{rank}")
    finally:
        os.close(fd)


def _write(fd: int, logs_dir: int, final: str) -> str:
    tmp = f".{final}.{os.getpid()}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp, dir_fd=logs_dir)
    try:
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _FLAGS, 0o644, dir_fd=logs_dir)
    except OSError as exc:
        return f"cannot write {final}: {exc.strerror or exc}"
    done, ok = 0, False
    try:
        while done <= MAX_BYTES:
            data = os.read(fd, CHUNK)
            if not data:
                ok = True
                break
            os.write(out, data)
            done += len(data)
    except OSError as exc:
        return f"cannot copy to {final}: {exc.strerror or exc}"
    finally:
        os.close(out)
        if not ok:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=logs_dir)
    if not ok:
        return f"its dump grew past {MAX_BYTES >> 20} MiB: left on the node"
    os.replace(tmp, final, src_dir_fd=logs_dir, dst_dir_fd=logs_dir)   # a link at the name is replaced, not followed
    return f"copied to {final} ({done} bytes)"


def main(argv_: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m clusterkit.supervise.frback")
    p.add_argument("--from", dest="src", required=True)
    p.add_argument("--logs", required=True)
    p.add_argument("--job", required=True)
    p.add_argument("--restart", type=int, default=0)
    p.add_argument("--all", action="store_true", help="every target, whatever its node")
    p.add_argument("targets", nargs="*")
    a = p.parse_args(argv_)
    if not _JOB.fullmatch(a.job) or not 0 <= a.restart < 10**6:
        print(f"flight recorder: {a.job[:20]!r}.r{a.restart}: not a job id and restart", flush=True)
        return 0
    mine = []
    for t in a.targets[:MAX_RANKS]:
        m = _TARGET.fullmatch(t)
        if m and (a.all or m.group(2) == _node()):
            mine.append(int(m.group(1)))
    if not mine:
        return 0
    lines = []
    try:
        src = os.open(a.src, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        logs = os.open(a.logs, os.O_RDONLY | os.O_DIRECTORY | _FLAGS)
    except OSError as exc:
        print(f"flight recorder on {_node()}: cannot open {exc.filename}: {exc.strerror or exc}", flush=True)
        return 0
    try:
        for rank in mine:
            lines.append(f"rank {rank} on {_node()}: {copy_one(src, logs, a.job, a.restart, rank)}")
    finally:
        os.close(src)
        os.close(logs)
    print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
