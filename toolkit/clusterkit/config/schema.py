"""The site config schema: one pydantic model per section, and the rules each key follows.

A site config describes one cluster (docs/architecture.md §5).  :class:`Site` is the whole file;
its sections' models live by concern (``machine``: nodes, SSH, network, storage; ``software``:
modules, container, NCCL env; ``jobs``: scheduler, ``job:``, stages; ``checks``: preflight,
perf) and are all importable from here.  The models are frozen and strict;
:mod:`clusterkit.config.load` reads the YAML and turns validation errors into ``file:line``
messages.  Closed vocabularies (stages, launchers, transports, scheduler kinds, Slurm time) come
from :mod:`clusterkit.vocab`.
"""

from __future__ import annotations

import os
import re

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from clusterkit.config.checks import Perf, Preflight
from clusterkit.config.code_keys import CodeKeys
from clusterkit.config.history_keys import NodeHistoryKeys
from clusterkit.config.jobs import JobSection, StageOverride
from clusterkit.config.launcher_keys import DeclaredLauncher, check_launchers
from clusterkit.config.log_keys import LogKeys
from clusterkit.config.login_keys import LoginKeys
from clusterkit.config.machine import SSH, Network, Nodes, RoCE, Storage
from clusterkit.config.model import _Model
from clusterkit.config.sbatch_owned import OWNED_SBATCH, owned_sbatch
from clusterkit.config.scheduler_keys import LocalSection, SchedulerSection, SlurmSection
from clusterkit.config.software import NCCL, Container, Software
from clusterkit.config.watch_keys import WatchKeys
from clusterkit.vocab import LAUNCHERS, Stage

__all__ = ["NCCL", "OWNED_SBATCH", "SSH", "Container", "Cost", "JobSection", "LocalSection", "LoginKeys", "Network",
           "Nodes", "Perf", "Preflight", "Reliability", "RoCE", "SchedulerSection", "Site", "SlurmSection", "Software",
           "StageOverride", "Storage", "owned_sbatch"]


class Cost(_Model):
    gpu_hour: float = Field(gt=0)
    currency: str = "USD"


class Reliability(_Model):
    """What the checkpoint cadence rests on (job/goodput.py); the defaults are assumptions."""

    gpu_failures_per_hour: float | None = Field(default=None, gt=0, lt=1)   # None: the Llama 3 rate
    checkpoint_save_s: float = Field(default=60, gt=0, le=86400)
    restart_s: float = Field(default=300, ge=0, le=86400)


class Site(_Model):
    """One cluster, validated.  Frozen: build a new one rather than mutate."""

    name: str
    description: str = ""
    scheduler: SchedulerSection = Field(default_factory=SlurmSection)
    nodes: Nodes
    ssh: SSH = Field(default_factory=SSH)
    software: Software = Field(default_factory=Software)
    network: Network = Field(default_factory=Network)
    storage: list[Storage] = Field(default_factory=list)
    nccl: NCCL = Field(default_factory=NCCL)
    job: JobSection = Field(default_factory=JobSection)
    launchers: dict[str, DeclaredLauncher] = Field(default_factory=dict)   # the site's own (config/launcher_keys.py)
    stages: dict[Stage, StageOverride] = Field(default_factory=dict)
    preflight: Preflight = Field(default_factory=Preflight)
    perf: Perf = Field(default_factory=Perf)
    node_history: NodeHistoryKeys = Field(default_factory=NodeHistoryKeys)
    watch: WatchKeys = Field(default_factory=WatchKeys)
    logs: LogKeys = Field(default_factory=LogKeys)
    code: CodeKeys = Field(default_factory=CodeKeys)
    login: LoginKeys | None = None
    cost: Cost | None = None
    reliability: Reliability = Field(default_factory=Reliability)
    templates: str | None = None

    _source: str = PrivateAttr(default="")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", v):
            raise ValueError(f"{v!r}: use letters, digits, '.', '_' and '-'")
        return v

    @field_validator("launchers")
    @classmethod
    def _launchers(cls, v: dict[str, DeclaredLauncher]) -> dict[str, DeclaredLauncher]:
        return check_launchers(v)

    @field_validator("stages")
    @classmethod
    def _stage_launchers(cls, v: dict[str, StageOverride], info: ValidationInfo) -> dict[str, StageOverride]:
        declared = info.data.get("launchers") or {}
        scheduler = info.data.get("scheduler")   # None where it failed to validate: its own error says so
        if not isinstance(scheduler, LocalSection | SlurmSection):
            scheduler = SlurmSection()
        unused = scheduler.stage_keys_unused
        for stage, override in v.items():
            if override.launcher is not None and override.launcher not in (*LAUNCHERS, *declared):
                raise ValueError(f"stages.{stage}.launcher {override.launcher!r}: choose one of "
                                 + ", ".join((*LAUNCHERS, *declared)) + " (the site's own under launchers:)")
            for key in (k for k in unused if getattr(override, k) is not None):
                # "at": the key below the field the error is about (load.py gives its line)
                raise PydanticCustomError("unused_key", "a {kind} site does not use it ({why})",
                                          {"kind": scheduler.kind, "why": scheduler.stage_keys_why,
                                           "at": [stage, key]})
        return v

    @model_validator(mode="after")
    def _hosts_the_scheduler_takes(self) -> Site:
        want = self.scheduler.hosts
        if want is not None and len(self.nodes.hosts) != want:
            raise ValueError(f"{self.scheduler.hosts_why}: nodes.nodelist must name exactly "
                             + ("one host" if want == 1 else f"{want} hosts"))
        return self

    @property
    def source(self) -> str:
        """The file this site was loaded from (empty for sites built in code)."""
        return self._source

    @property
    def shared_storage(self) -> list[Storage]:
        return [s for s in self.storage if s.is_shared]

    def on_shared_storage(self, path: str) -> bool:
        """Whether the absolute ``path`` lies under one of the site's shared storage paths (by name:
        nothing is looked up on this machine)."""
        path = os.path.normpath(path)
        roots = (os.path.normpath(st.path) for st in self.shared_storage)
        return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)

    def stage_override(self, stage: str) -> StageOverride | None:
        """The site's settings for ``stage`` (any stage name; None when the site sets none)."""
        return next((o for name, o in self.stages.items() if name == stage), None)
