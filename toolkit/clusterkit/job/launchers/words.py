"""The words of a launch line: plain text (quoted when rendered) or :class:`Sh`, a shell word
clusterkit wrote itself (re-exported by :mod:`clusterkit.job.launchers`)."""

from __future__ import annotations


class Sh(str):
    """A shell word we generated ourselves (e.g. ``"$CK_HEAD:$CK_PORT"``): rendered verbatim."""


Word = str | Sh

__all__ = ["Sh", "Word"]
