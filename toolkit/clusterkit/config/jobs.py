"""The site config's sections about jobs: how they are queued (``scheduler:``), what each one gets
(``job:``) and what a stage changes (``stages:``) (:mod:`clusterkit.config.schema`)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, ValidationInfo, create_model, field_validator

from clusterkit.config import job_options
from clusterkit.config.envrules import job_env_problem
from clusterkit.config.model import _Model
from clusterkit.config.sbatch_owned import OWNED_SBATCH, owned_sbatch
from clusterkit.vocab import LAUNCHER_NAME, SchedulerKind, check_slurm_time, check_spares


class Scheduler(_Model):
    """How jobs reach the machines: Slurm, or this machine with no scheduler."""

    kind: SchedulerKind = "slurm"
    cluster: str | None = Field(
        None, description="Slurm's ClusterName (scontrol show config): which cluster this site describes")
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str = "01:00:00"
    sbatch: dict[str, str | int | bool] = Field(default_factory=dict)
    max_restarts: int = Field(3, ge=0, le=100)
    preempt_signal_s: int = Field(120, ge=10, le=3600)
    grace_s: int = Field(60, ge=1, le=3600, validate_default=True,
                         description="seconds the ranks get to save after SIGTERM (time-limit warning, cancel)")
    max_array_size: int | None = Field(
        None, ge=1, le=4_000_001,
        description="Slurm's MaxArraySize (scontrol show config): array indices must stay below it; "
                    "unset: submit asks Slurm")

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


_JOB_DOC = """``job:`` (and ``stages.<stage>.job``): what every job on the site gets before its own
    ``--env``/``--setup``/... flags, which are added after these (docs/architecture.md §3)."""


class _JobSectionRules(_Model):
    """The rules of ``job:`` beyond its fields' types (the fields: :data:`job_options.SITE_JOB`)."""

    @field_validator("env", check_fields=False)
    @classmethod
    def _env_names(cls, v: dict[str, Any]) -> dict[str, str]:
        for k, val in v.items():
            problem = job_env_problem(k, str(val), site=True)
            if problem:
                raise ValueError(problem)
        return {k: str(val) for k, val in v.items()}


if TYPE_CHECKING:
    class JobSection(_JobSectionRules):
        """``job:``: its keys are read by name (:data:`clusterkit.config.job_options.SITE_JOB`)."""

        def __getattr__(self, name: str) -> Any: ...
else:
    # one field per option of clusterkit.config.job_options.OPTIONS that a site sets
    JobSection = create_model("JobSection", __base__=_JobSectionRules, __module__=__name__, __doc__=_JOB_DOC,
                              **{o.name: job_options.site_field(o) for o in job_options.SITE_JOB})


class StageOverride(_Model):
    launcher: str | None = Field(None, pattern=f"^{LAUNCHER_NAME}$", description="a built-in launcher or one of the "
                                 "site's launchers:")
    nodes: int | None = Field(None, ge=1)
    time: str | None = None
    partition: str | None = None
    max_restarts: int | None = Field(None, ge=0, le=100)
    container: bool | None = None
    gpu_bind: Literal["task", "none"] | None = None
    snapshot: bool | None = Field(None, description="run the stage's jobs in a snapshot of the code (default: "
                                  "the site's code.snapshot)")
    job: JobSection | None = None
    spares: int | str | None = Field(None, description="spare nodes the stage's jobs allocate: a count or a share "
                                     "of the nodes (3%: at least one); default 3% at large-cluster, else 0")

    @field_validator("time")
    @classmethod
    def _time(cls, v: str | None) -> str | None:
        return None if v is None else check_slurm_time(v)

    @field_validator("spares")
    @classmethod
    def _spares(cls, v: int | str | None) -> int | str | None:
        return check_spares(v)
