"""Flight-recorder dumps and ``--debug``'s NCCL files kept on the nodes, and the copy back of those a
verdict names (docs/nccl.md, "In a job"; docs/architecture.md §3, "Recovery inside the allocation").

Above the site's ``logs.debug_max_nodes`` the job sets the flight recorder's dump file, and without
``--debug-nodes`` ``--debug``'s ``NCCL_DEBUG_FILE``, to each node's own disk
(``<logs.node_local_dir>/clusterkit-fr-<job>.r<restart>.rank<R>``, :data:`clusterkit.pyspy.FR_LOCAL`;
``.../clusterkit-nccl-<job>.r<restart>.<host>.<pid>.log``, :data:`clusterkit.pyspy.NCCL_LOCAL`): at
2,048 nodes of 8 GPUs a timeout would otherwise make 16,384 dumps at once in the run's shared
``logs/``.  After a failed attempt the supervisor has a verdict (doctor's on the attempt's logs, or
the stall watch's rank behind); :func:`copy_named` then runs one bounded ``srun --overlap`` step,
one task on the verdict's node, as py-spy's step does (:mod:`clusterkit.supervise.spy`), and the
node copies the named rank's dump into the run's logs as ``fr-<job>.r<restart>.rank<R>`` and its
own NCCL files as ``nccl-<job>.r<restart>.<node>.<pid>.log``, where doctor reads them.

On the node (``python -m clusterkit.supervise.frback``): every name is made from the job, the
restart, the rank, the node's Slurm name and a process number read as digits (no name a node wrote
picks a path); a file is opened without following a link and without blocking, a regular file of
this user; a dump at most :data:`MAX_BYTES` (else left), an NCCL file its last :data:`MAX_BYTES`, at
most :data:`MAX_RANKS` ranks and :data:`MAX_NCCL_FILES` NCCL files; each written to a hidden
temporary name in the logs folder (opened by descriptor, never through a link) and renamed.  One
line per file (stdout); exit 0.
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

from clusterkit import jobfiles, pyspy, slurmclient
from clusterkit.tooltext import printable_lines

MAX_BYTES = 64 << 20     # doctor reads a dump up to this size (clusterkit.diagnose.flight.MAX_BYTES)
MAX_RANKS = 16           # ranks (and nodes) copied back after one failure
MAX_NCCL_FILES = 64      # NCCL files copied back from one node (one per process: 8 GPUs, a few relaunches)
COPY_WAIT_S = 30.0       # the step's start on the nodes, then the copies
CHUNK = 1 << 20
_JOB = re.compile(r"[0-9]{1,12}(?:_[0-9]{1,9})?")
_TARGET = re.compile(r"(\d{1,7}|nccl)@([A-Za-z0-9._-]{1,64})")
_NCCL_TAIL = re.compile(r"\.[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}\.(\d{1,10})\.log")   # .<host>.<pid>.log
_DIR = re.compile(r"/[A-Za-z0-9._+/-]{0,200}")
_NODE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}")
_FLAGS = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
Log = Callable[[str], None]


def _folder(value: str, name: str) -> str | None:
    folder, _, last = value.rpartition("/")
    folder = folder or "/"
    if last != name or not _DIR.fullmatch(folder) or os.path.normpath(folder) != folder:
        return None
    return folder


def local_dir(env: Mapping[str, str], job: str, restart: int) -> str | None:
    """The node-local folder of this run's flight-recorder dumps, where the job script put them
    there (its ``TORCH_FR_DUMP_TEMP_FILE``, or the older name, ends in :data:`pyspy.FR_LOCAL`); else
    None (the dumps go to the run's logs already, or the job set its own)."""
    value = env.get("TORCH_FR_DUMP_TEMP_FILE") or env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE") or ""
    return _folder(value, pyspy.FR_LOCAL.format(job=job, restart=restart))


def nccl_dir(env: Mapping[str, str], job: str, restart: int) -> str | None:
    """The node-local folder of ``--debug``'s NCCL files (``NCCL_DEBUG_FILE`` is
    ``<folder>/`` :data:`pyspy.NCCL_LOCAL` ``.%h.%p.log``), else None."""
    value = env.get("NCCL_DEBUG_FILE") or ""
    return _folder(value, pyspy.NCCL_LOCAL.format(job=job, restart=restart) + ".%h.%p.log")


def argv(python: str, folders: tuple[str, str], logs: str, job: str, restart: int, targets: list[str]) -> list[str]:
    """One step, one task on each node named (``RANK@NODE``: that rank's dump; ``nccl@NODE``: the node's
    NCCL files)."""
    hosts = sorted({t.rsplit("@", 1)[1] for t in targets})
    n = str(len(hosts))
    return ["srun", "--nodes", n, "--ntasks", n, "--ntasks-per-node", "1", "--nodelist", ",".join(hosts),
            "--overlap", "--kill-on-bad-exit=0", "--cpus-per-task", "1", "--job-name", "clusterkit-frback",
            python, "-m", "clusterkit.supervise.frback", "--from", folders[0], "--nccl-from", folders[1],
            "--logs", logs, "--job", job, "--restart", str(restart), *targets]


def copy_named(ranks: list[tuple[int, str | None]], nodes: list[str], run_dir: str, job: str, restart: int,
               log: Log, env: Mapping[str, str] = os.environ, python: str = sys.executable) -> None:
    """Copy the dumps of the ranks named (rank, node), and the NCCL files of the nodes named, from those
    nodes into the run's logs, where the job keeps them node-local; a rank whose node is not known is said."""
    fr, nccl = local_dir(env, job, restart), nccl_dir(env, job, restart)
    targets = []
    if fr is not None:
        targets += [f"{r}@{h}" for r, h in ranks[:MAX_RANKS] if h is not None]
        for r, _ in [t for t in ranks[:MAX_RANKS] if t[1] is None]:
            log(f"flight recorder: rank {r}'s dump stays on its node ({fr}): its node is not known")
    if nccl is not None:
        targets += [f"nccl@{h}" for h in sorted(set(nodes))[:MAX_RANKS]]
    if targets:
        logs = f"{run_dir.rstrip('/')}/{jobfiles.LOGS}"
        _step(argv(python, (fr or "/", nccl or "/"), logs, job, restart, targets), log)


def _step(words: list[str], log: Log) -> None:
    with tempfile.TemporaryFile(prefix="ck-frback-") as out:
        try:
            proc = slurmclient.step(words, out)
        except OSError as exc:
            log(f"copy back: the step could not start: {exc.strerror or exc}")
            return
        try:
            proc.wait(timeout=COPY_WAIT_S)
        except subprocess.TimeoutExpired:   # the step is ended; what it copied stands
            slurmclient.stop(proc, grace_s=1.0)
            log(f"copy back: the step had not ended after {COPY_WAIT_S:.0f} s: ended")
        out.seek(0)
        text = printable_lines(out.read(16 << 10).decode("utf-8", errors="replace"))
    for line in [ln.strip()[:300] for ln in text.splitlines() if ln.strip()][:4 * MAX_RANKS]:
        log(f"copy back: {line}")


def _node() -> str:
    return os.environ.get("SLURMD_NODENAME") or os.uname().nodename


def _open(src_dir: int, name: str) -> int | str:
    """A file of the node's folder, opened without following a link or blocking: its descriptor, or why not."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | _FLAGS, dir_fd=src_dir)
    except FileNotFoundError:
        return "none there"
    except OSError as exc:
        return f"cannot open it: {exc.strerror or exc}"
    try:
        st = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        return f"cannot read it: {exc.strerror or exc}"
    why = ("not a regular file: left alone" if not stat.S_ISREG(st.st_mode) else
           "not this user's: left alone" if st.st_uid != os.getuid() else "")
    if why:
        os.close(fd)
        return why
    return fd


def copy_one(src_dir: int, logs_dir: int, job: str, restart: int, rank: int) -> str:
    """One rank's dump from the node's folder into the logs folder (both open descriptors); what happened.
    A dump over :data:`MAX_BYTES` stays (a cut pickle is no dump)."""
    fd = _open(src_dir, f"{pyspy.FR_LOCAL.format(job=job, restart=restart)}{rank}")
    if isinstance(fd, str):
        return f"dump: {fd}"
    try:
        if os.fstat(fd).st_size > MAX_BYTES:
            return f"dump: larger than {MAX_BYTES >> 20} MiB: left on the node"
        return _write(fd, logs_dir, f"fr-{job}.r{restart}.rank{rank}")
    finally:
        os.close(fd)


def copy_nccl(src_dir: int, logs_dir: int, job: str, restart: int) -> list[str]:
    """This node's NCCL files of the run (at most :data:`MAX_NCCL_FILES`; of one over :data:`MAX_BYTES`,
    its end), each as ``nccl-<job>.r<restart>.<this node>.<pid>.log``: the name is made here, from the
    node's Slurm name and the process number alone."""
    stem = pyspy.NCCL_LOCAL.format(job=job, restart=restart)
    try:
        names = sorted(n for n in os.listdir(src_dir) if n.startswith(stem) and _NCCL_TAIL.fullmatch(n[len(stem):]))
    except OSError as exc:
        return [f"NCCL files: cannot list the folder: {exc.strerror or exc}"]
    said = [] if names else ["NCCL files: none there"]
    if len(names) > MAX_NCCL_FILES:
        said.append(f"NCCL files: {len(names)}, the first {MAX_NCCL_FILES} copied")
    for name in names[:MAX_NCCL_FILES]:
        m = _NCCL_TAIL.fullmatch(name[len(stem):])
        assert m is not None
        fd = _open(src_dir, name)
        if isinstance(fd, str):
            said.append(f"NCCL file of process {m.group(1)}: {fd}")
            continue
        try:
            start = max(0, os.fstat(fd).st_size - MAX_BYTES)
            os.lseek(fd, start, os.SEEK_SET)
            final = f"nccl-{job}.r{restart}.{_node()}.{int(m.group(1))}.log"
            said.append(f"NCCL file of process {m.group(1)}: " + _write(fd, logs_dir, final)
                        + (f", its last {MAX_BYTES >> 20} MiB" if start else ""))
        finally:
            os.close(fd)
    return said


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
        return f"grew past {MAX_BYTES >> 20} MiB while copied: left on the node"
    os.replace(tmp, final, src_dir_fd=logs_dir, dst_dir_fd=logs_dir)   # a link at the name is replaced, not followed
    return f"copied to {final} ({done} bytes)"


def _dir(path: str, nofollow: bool) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | (_FLAGS if nofollow else getattr(os, "O_CLOEXEC", 0)))


def main(argv_: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m clusterkit.supervise.frback")
    p.add_argument("--from", dest="src", default="/")
    p.add_argument("--nccl-from", dest="nccl", default="/")
    p.add_argument("--logs", required=True)
    p.add_argument("--job", required=True)
    p.add_argument("--restart", type=int, default=0)
    p.add_argument("--all", action="store_true", help="every target, whatever its node")
    p.add_argument("targets", nargs="*")
    a = p.parse_args(argv_)
    node = _node()
    if not _JOB.fullmatch(a.job) or not 0 <= a.restart < 10**6 or not _NODE.fullmatch(node):
        print(f"on {node[:64]!r}: {a.job[:20]!r}.r{a.restart}: not a job id and restart, or not a node name",
              flush=True)
        return 0
    mine = [m.group(1) for t in a.targets[:2 * MAX_RANKS] if (m := _TARGET.fullmatch(t))
            and (a.all or m.group(2) == node)]
    if not mine:
        return 0
    try:
        logs = _dir(a.logs, nofollow=True)
    except OSError as exc:
        print(f"on {node}: cannot open the run's logs: {exc.strerror or exc}", flush=True)
        return 0
    lines = []
    try:
        for folder, picked in ((a.src, [w for w in mine if w != "nccl"]), (a.nccl, [w for w in mine if w == "nccl"])):
            if not picked:
                continue
            try:
                src = _dir(folder, nofollow=False)   # the site's folder (a link is fine: /local -> /scratch)
            except OSError as exc:
                lines.append(f"on {node}: cannot open {folder}: {exc.strerror or exc}")
                continue
            try:
                for what in picked[:MAX_RANKS]:
                    if what == "nccl":
                        lines += [f"on {node}: {ln}" for ln in copy_nccl(src, logs, a.job, a.restart)]
                    else:
                        lines.append(f"rank {what} on {node}: {copy_one(src, logs, a.job, a.restart, int(what))}")
            finally:
                os.close(src)
    finally:
        os.close(logs)
    print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
