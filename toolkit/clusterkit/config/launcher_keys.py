"""The site's ``launchers:`` key: launchers declared as data (a centre's wrapper of torchrun,
MosaicML's ``composer``, Intel MPI's ``mpirun``), checked as the built-in ones are.

A launcher is its argv, where it starts and which of its flags it owns::

    launchers:
      ctrun:                       # --launcher ctrun
        argv: [ctrun, --nnodes, "{ck:nnodes}", --nproc-per-node, "{ck:nproc_per_node}",
               --rdzv-endpoint, "{ck:rdzv_host}:{ck:rdzv_port}", --node-rank, "{ck:node_rank}"]
        per: node                  # node: once per node (srun); task: once per GPU (srun); job: once
        owns: [--max-restarts]     # besides the flags argv writes: --launcher-arg may not give them
        command: script            # as-is (default): the command after '--' follows argv; script:
                                   # `python train.py ...` follows as `train.py ...` (it runs python)

The argv is data: each ``{ck:NAME}`` is replaced by clusterkit (the counts when the job is planned,
the rendezvous host, port, node rank and hostfile where the launcher starts, as the training
command's run-time values are); nothing of it is evaluated by a shell.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from clusterkit.config.model import _Model
from clusterkit.vocab import LAUNCHER_NAME, LAUNCHER_VALUES, LAUNCHERS, RUN_VALUES

PLACEHOLDER = re.compile(r"\{ck:([^{}\s]{0,40})\}")
FLAG = re.compile(r"-{1,2}[A-Za-z][A-Za-z0-9_.-]*")
#: the run-time values that differ by node: one launcher started once for the job has no one value
PER_NODE = ("node_id", "node_rank", "node_name")


class DeclaredLauncher(_Model):
    """One ``launchers.<name>`` entry."""

    argv: list[str] = Field(min_length=1, max_length=200, description="the launcher's words before the command; "
                            "{ck:NAME} for the job's values")
    per: Literal["node", "task", "job"] = Field("node", description="node: once per node through srun; task: "
                                                "once per GPU through srun; job: once, on the batch host")
    owns: list[str] = Field(default_factory=list, max_length=200, description="flags --launcher-arg may not "
                            "give, besides those argv writes")
    command: Literal["as-is", "script"] = Field("as-is", description="as-is: the command follows argv; script: "
                                                "a python command follows as its script and arguments")
    module_flag: str | None = Field(None, description="with command: script, the launcher's flag for "
                                    "`python -m MODULE` (none: python -m is refused)")
    hostfile: Literal["none", "slots", "bare"] = Field("none", description="the hostfile it reads, "
                                                       "{ck:hostfile}: 'host slots=N' lines or bare host names")
    description: str = ""

    @field_validator("argv")
    @classmethod
    def _argv(cls, v: list[str]) -> list[str]:
        for word in v:
            if not word or "\0" in word or len(word) > 4096:
                raise ValueError(f"{word[:40]!r}: each word is 1 to 4096 characters, no NUL")
            for name in PLACEHOLDER.findall(word):
                if name not in RUN_VALUES + LAUNCHER_VALUES:
                    raise ValueError(f"{{ck:{name}}} in {word!r}: unknown value; use one of "
                                     + ", ".join(f"{{ck:{n}}}" for n in RUN_VALUES + LAUNCHER_VALUES))
            if word == "--":
                raise ValueError("'--' would end the launcher's options: the command follows argv by itself")
        if PLACEHOLDER.search(v[0]) or v[0].startswith("-"):
            raise ValueError(f"{v[0]!r}: the first word is the program, without {{ck:...}} and not a flag")
        return v

    @field_validator("owns")
    @classmethod
    def _owns(cls, v: list[str]) -> list[str]:
        for flag in v:
            if not FLAG.fullmatch(flag):
                raise ValueError(f"{flag!r}: a flag such as --nnodes or -np")
        return v

    @field_validator("module_flag")
    @classmethod
    def _module_flag(cls, v: str | None) -> str | None:
        if v is not None and not FLAG.fullmatch(v):
            raise ValueError(f"{v!r}: a flag such as -m or --module")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> DeclaredLauncher:
        used = self.values()
        if "hostfile" in used and self.hostfile == "none":
            raise ValueError("argv uses {ck:hostfile}: say which hostfile it reads (hostfile: slots or bare)")
        if self.per == "job" and (per_node := [n for n in used if n in PER_NODE]):
            raise ValueError(f"{{ck:{per_node[0]}}}: a launcher started once (per: job) has no one node's value; "
                             "use per: node")
        if self.module_flag and self.command != "script":
            raise ValueError("module_flag goes with command: script")
        return self

    def values(self) -> list[str]:
        """The ``{ck:NAME}`` names argv uses, in order."""
        return [n for w in self.argv for n in PLACEHOLDER.findall(w)]

    def owned(self, name: str) -> dict[str, str]:
        """Every flag ``--launcher-arg`` may not give: ``owns`` and those argv writes, each with what sets it."""
        out = {flag: f"the site's launchers.{name}.owns" for flag in self.owns}
        for word in self.argv[1:]:
            flag = word.split("=", 1)[0]
            if FLAG.fullmatch(flag):
                out.setdefault(flag, f"the site's launchers.{name}.argv")
        if self.module_flag:
            out.setdefault(self.module_flag, "the command after '--' (python -m)")
        return out


def check_launchers(v: dict[str, DeclaredLauncher]) -> dict[str, DeclaredLauncher]:
    """Names: a site's own launcher may not take a built-in one's name."""
    for name in v:
        if name in LAUNCHERS:
            raise ValueError(f"{name!r} is a built-in launcher; give the site's own another name")
        if not re.fullmatch(LAUNCHER_NAME, name):
            raise ValueError(f"{name!r}: a launcher's name is lower-case letters, digits, '_' and '-'")
    return v
