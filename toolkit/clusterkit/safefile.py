"""Files that others write (a job's logs and result file, job records): opened only when they
are regular files, never blocking on the open, and read within a byte budget.

A job can leave a FIFO where its log or ``<job>.result`` should be (an open for reading would
wait forever), a symlink to a file outside its run directory, ``/dev/zero``, or a sparse
terabyte; :func:`open_regular` refuses the first three and :func:`read_capped` stops at a cap.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path
from typing import BinaryIO


class NotRegular(OSError):
    """The path is not a regular file (a FIFO, a device, a directory, or a symlink where none
    is followed); ``strerror`` says which."""


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_regular(path: str | os.PathLike[str], *, follow_symlinks: bool = True) -> BinaryIO:
    """``path`` opened for reading in binary, if it is a regular file; :class:`NotRegular`
    (an OSError) otherwise.  The open never blocks (``O_NONBLOCK``: a FIFO with no writer);
    the type is checked on the open file, so a file swapped after a check is caught too.
    With ``follow_symlinks`` False a symlink is refused (``O_NOFOLLOW``)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if not follow_symlinks and exc.errno == errno.ELOOP and os.path.islink(path):
            raise NotRegular(exc.errno, "a symbolic link (not followed)", str(path)) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegular(0, _kind(mode), str(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_capped(path: str | os.PathLike[str], limit: int, *, follow_symlinks: bool = True) -> tuple[bytes, bool]:
    """The first ``limit`` bytes of the regular file ``path`` and whether it held more."""
    with open_regular(path, follow_symlinks=follow_symlinks) as fh:
        data = fh.read(limit + 1)
    return data[:limit], len(data) > limit


def is_regular_file(path: Path) -> bool:
    """Whether ``path`` itself (not what a symlink points to) is a regular file."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def is_real_dir(path: Path) -> bool:
    """Whether ``path`` itself (not what a symlink points to) is a directory."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """``data`` as the file ``path``, whole or not at all, in a directory others may reach: the
    directory must be a real one (not a symlink), the temporary file is a new name created with
    ``O_EXCL | O_NOFOLLOW`` (a planted file or symlink of any name is never written through),
    synced, then renamed over ``path`` (which replaces a symlink there, never its target)."""
    if not is_real_dir(path.parent):
        raise NotRegular(errno.ENOTDIR, "not a directory (or a symbolic link)", str(path.parent))
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def skip_hole(fh: BinaryIO) -> bool:
    """Move ``fh`` past a hole of a sparse file (what ``truncate -s 1T`` leaves: zeros never
    written) to its next data; False when no data follows.  Where the file system cannot say,
    True: read on."""
    fd = fh.fileno()
    pos = fh.tell()
    raw = os.lseek(fd, 0, os.SEEK_CUR)
    try:
        data = os.lseek(fd, pos, os.SEEK_DATA)
    except OSError as exc:
        os.lseek(fd, raw, os.SEEK_SET)
        return exc.errno != errno.ENXIO
    os.lseek(fd, raw, os.SEEK_SET)   # the buffered reader's own idea of the offset stays true
    if data != pos:
        fh.seek(data)
    return True


def not_own_dir(path: Path, kind: str) -> str | None:
    """Why ``path`` is not a directory of the user's alone (None: it is, or it does not exist yet).
    ``own``: a real directory (no link) you own that others cannot write; ``run``: the same, a link
    followed; ``shared``: the folder that holds every user's own (yours or root's; writable by
    others only with the sticky bit, as /tmp).  The job script checks the same before it starts."""
    try:
        st = os.lstat(path) if kind == "own" else os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path} cannot be checked ({exc.strerror})"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is {'a symbolic link' if stat.S_ISLNK(st.st_mode) else 'not a directory'}"
    if st.st_uid != os.getuid() and (kind != "shared" or st.st_uid != 0):
        return f"{path} is owned by uid {st.st_uid}, not by you"
    if st.st_mode & stat.S_IWOTH and (kind != "shared" or not st.st_mode & stat.S_ISVTX):
        return f"{path} is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None
