"""The site's ``login:`` key: the cluster's login node, through which ``submit``, ``status``,
``logs``, ``cancel`` and ``doctor`` work from a laptop (docs/laptop.md; the flow:
:mod:`clusterkit.remote`).

clusterkit runs on the login node too: the laptop uploads the code snapshot's files the login
node lacks and runs ``python -m clusterkit submit`` there over SSH, so the job is rendered where
it runs, by the same code as a submit made on the login node (docs/laptop.md says why).
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from clusterkit.config.model import _Model

_HOST = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,252}")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}")
_JUMP = re.compile(r"([A-Za-z0-9_][A-Za-z0-9_.-]{0,31}@)?[A-Za-z0-9_][A-Za-z0-9_.-]{0,252}(:[0-9]{1,5})?")


class LoginKeys(_Model):
    """The login node: reached over SSH with the user's ``~/.ssh/config``, agent and known hosts."""

    host: str = Field(description="the login node's name or address (an ~/.ssh/config Host alias works)")
    user: str | None = Field(None, description="user on the login node (default: ~/.ssh/config's, else yours)")
    port: int | None = Field(None, ge=1, le=65535, description="SSH port (default: ~/.ssh/config's, else 22)")
    proxy_jump: str | None = Field(None, description="jump host(s), as ssh -J: [user@]host[:port][,...] "
                                   "(default: ~/.ssh/config's ProxyJump)")
    python: str = Field("python3", description="the Python on the login node that has clusterkit installed "
                        "(a name on its PATH or an absolute path)")
    site: str | None = Field(None, description="the site's name on the login node (default: this site's name)")
    connect_timeout_s: float = Field(10, gt=0, le=300, description="seconds to reach the login node")

    @field_validator("host")
    @classmethod
    def _host(cls, v: str) -> str:
        if not _HOST.fullmatch(v):
            raise ValueError(f"{v[:60]!r}: a host name or address (letters, digits, '.', '-', '_', ':')")
        return v

    @field_validator("user")
    @classmethod
    def _user(cls, v: str | None) -> str | None:
        if v is not None and not _USER.fullmatch(v):
            raise ValueError(f"{v[:40]!r}: a user name (letters, digits, '.', '-', '_')")
        return v

    @field_validator("proxy_jump")
    @classmethod
    def _jump(cls, v: str | None) -> str | None:
        if v is not None and not all(_JUMP.fullmatch(p) for p in v.split(",")):
            raise ValueError(f"{v[:80]!r}: jump hosts as [user@]host[:port], comma-separated")
        return v

    @field_validator("python")
    @classmethod
    def _python(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_./+-]{1,255}", v) or v.startswith("-"):
            raise ValueError(f"{v[:60]!r}: a program name or an absolute path")
        return v

    @field_validator("site")
    @classmethod
    def _site(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", v):
            raise ValueError(f"{v[:60]!r}: use letters, digits, '.', '_' and '-'")
        return v

    @field_validator("connect_timeout_s", mode="before")
    @classmethod
    def _seconds(cls, v: object) -> object:
        return float(v) if isinstance(v, int) and not isinstance(v, bool) else v
