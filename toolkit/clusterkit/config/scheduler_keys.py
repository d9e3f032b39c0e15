"""The site config's ``scheduler:`` section: one model per scheduler kind, chosen by its ``kind``.

``kind: slurm`` (the default) takes Slurm's keys (partition, account, qos, ``sbatch:``, ...);
``kind: local`` (this machine, no scheduler) takes only the keys every kind has, so a local site
that sets a Slurm key gets a ``file:line`` error instead of a setting nothing reads.  What a kind
asks of the rest of the site is a class attribute (:attr:`SlurmSection.hosts`), not a comparison
of its name.  :data:`SchedulerSection` is the union :class:`~clusterkit.config.schema.Site` holds.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Discriminator, Field, Tag, ValidationInfo, field_validator
from pydantic.json_schema import SkipJsonSchema

from clusterkit.config.model import _Model
from clusterkit.config.sbatch_owned import OWNED_SBATCH, owned_sbatch
from clusterkit.vocab import SCHEDULER_KINDS, SchedulerKind, check_slurm_time

__all__ = ["DEFAULT_KIND", "LocalSection", "SchedulerSection", "SlurmSection"]

#: the kind of a ``scheduler:`` section that names none
DEFAULT_KIND = "slurm"


class _Common(_Model):
    """The keys every scheduler kind has."""

    #: how many hosts ``nodes.nodelist`` may name under this kind (None: any number), and why
    hosts: ClassVar[int | None] = None
    hosts_why: ClassVar[str] = ""
    #: the keys of ``stages.<stage>`` this kind has no use for (a site that sets one is refused)
    stage_keys_unused: ClassVar[tuple[str, ...]] = ()
    stage_keys_why: ClassVar[str] = ""

    time: str = "01:00:00"
    max_restarts: int = Field(3, ge=0, le=100)
    preempt_signal_s: int = Field(120, ge=10, le=3600)
    grace_s: int = Field(60, ge=1, le=3600, validate_default=True,
                         description="seconds the ranks get to save after SIGTERM (time-limit warning, cancel)")

    @field_validator("grace_s")
    @classmethod
    def _grace(cls, v: int, info: ValidationInfo) -> int:
        signal_s = info.data.get("preempt_signal_s")
        # the ranks save after the USR2 warning and the job requeues itself before the limit
        if isinstance(signal_s, int) and v >= signal_s:
            raise ValueError(f"grace_s {v} must be less than preempt_signal_s {signal_s}: the ranks save "
                             "between the time-limit warning and the requeue, before the limit")
        return v

    @field_validator("time")
    @classmethod
    def _time(cls, v: str) -> str:
        return check_slurm_time(v)


class _SlurmKeys(_Model):
    """Slurm's own keys."""

    cluster: str | None = Field(
        None, description="Slurm's ClusterName (scontrol show config): which cluster this site describes")
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    sbatch: dict[str, str | int | bool] = Field(default_factory=dict)
    max_array_size: int | None = Field(
        None, ge=1, le=4_000_001,
        description="Slurm's MaxArraySize (scontrol show config): array indices must stay below it; "
                    "unset: submit asks Slurm")

    @field_validator("sbatch")
    @classmethod
    def _sbatch(cls, v: dict[str, Any]) -> dict[str, Any]:
        for key in v:
            if not re.fullmatch(r"[a-z][a-z0-9-]*", key):
                raise ValueError(f"sbatch option {key!r} must be a long option name like 'exclusive' or 'mem'")
            owned = owned_sbatch(key)
            if owned:
                raise ValueError(f"sbatch option {key!r} sets --{owned}, which clusterkit writes itself; "
                                 f"use {OWNED_SBATCH[owned]}")
        return v


class SlurmSection(_Common, _SlurmKeys):
    """``scheduler:`` with ``kind: slurm``: jobs go through sbatch."""

    kind: Literal["slurm"] = "slurm"


class LocalSection(_Common):
    """``scheduler:`` with ``kind: local``: this machine, no scheduler.  Slurm's keys are not keys
    here (the file may not set them); read, they are unset, as on a Slurm site that sets none."""

    hosts: ClassVar[int | None] = 1
    hosts_why: ClassVar[str] = "a local site runs on this machine"
    stage_keys_unused: ClassVar[tuple[str, ...]] = ("partition", "gpu_bind", "spares")
    stage_keys_why: ClassVar[str] = "a key of kind slurm, not of kind local"

    kind: Literal["local"]

    # Slurm's keys, read as unset (class attributes, not fields: the file cannot set them)
    cluster: ClassVar[None] = None
    partition: ClassVar[None] = None
    account: ClassVar[None] = None
    qos: ClassVar[None] = None
    sbatch: ClassVar[dict[str, str | int | bool]] = {}
    max_array_size: ClassVar[None] = None


class _NoKind(_Common, _SlurmKeys):
    """``scheduler:`` naming a kind there is not: validated with every kind's keys, so its ``kind``
    error (the kinds there are) comes with the section's other problems, not instead of them.  It
    never validates (its ``kind`` is only chosen when it is none of these), and is no part of the
    JSON schema."""

    kind: SchedulerKind


def _kind(value: Any) -> str:
    """Which model validates ``value``: its ``kind`` (the default where it names none).  Anything but
    a mapping goes to the default's model, whose error says what a section must be."""
    kind = value.get("kind", DEFAULT_KIND) if isinstance(value, dict) else getattr(value, "kind", DEFAULT_KIND)
    return kind if kind in SCHEDULER_KINDS else "none of them"


SchedulerSection = Annotated[Annotated[SlurmSection, Tag("slurm")] | Annotated[LocalSection, Tag("local")]
                             | Annotated[_NoKind, Tag("none of them"), SkipJsonSchema()],
                             Discriminator(_kind)]
