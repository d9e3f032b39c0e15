"""Text inside a comment of a rendered file (nccl.env's "(replaced ...)", a reason, a source).

A comment ends at the line's end: a value holding a newline would end it and start a live line
of the script or of ``nccl.env``, which its header says to source.  So no value reaches a
comment with a control character in it: each is written as ``\\xNN`` (a backslash as ``\\\\``,
so the text reads back unambiguously), and Unicode's line and paragraph separators likewise.
"""

from __future__ import annotations

import re

_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\\]")


def comment_text(value: object) -> str:
    """``value`` as text that stays on its comment line."""
    def escape(m: re.Match[str]) -> str:
        ch = m.group()
        return "\\\\" if ch == "\\" else f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"
    return _UNSAFE.sub(escape, str(value))
