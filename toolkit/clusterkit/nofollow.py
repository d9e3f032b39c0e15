"""Read a bounded part of a regular file that others write (a rank's heartbeat, its stack file):
never through a symlink, never blocking on a FIFO, never more than ``limit`` bytes.

The lowest layer (docs/architecture.md §1): the training process imports it through
``clusterkit.progress``, so it imports nothing of clusterkit's.
"""

from __future__ import annotations

import os
import stat


def read_regular(path: str | os.PathLike[str], limit: int, *, tail: bool = False, start: int = 0) -> bytes | None:
    """``limit`` bytes of ``path`` from byte ``start`` (with ``tail``: its last ``limit`` bytes);
    None when it is not a regular file or cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        if tail and st.st_size > limit:
            os.lseek(fd, st.st_size - limit, os.SEEK_SET)
        elif start > 0:
            os.lseek(fd, start, os.SEEK_SET)
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)
