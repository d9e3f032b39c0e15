"""The site config's sections about jobs: what each one gets (``job:``) and what a stage changes
(``stages:``) (:mod:`clusterkit.config.schema`); how they are queued (``scheduler:``):
:mod:`clusterkit.config.scheduler_keys`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, create_model, field_validator

from clusterkit.config import job_options
from clusterkit.config.envrules import job_env_problem
from clusterkit.config.model import _Model
from clusterkit.vocab import check_slurm_time, check_spares

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


class _StageRules(_Model):
    """The rules of ``stages.<stage>`` beyond its fields' types (the fields: :data:`STAGE_OWN` and
    :data:`job_options.STAGE`)."""

    @field_validator("time", check_fields=False)
    @classmethod
    def _time(cls, v: str | None) -> str | None:
        return None if v is None else check_slurm_time(v)

    @field_validator("spares", check_fields=False)
    @classmethod
    def _spares(cls, v: int | str | None) -> int | str | None:
        return check_spares(v)


#: the types of the ``--set`` settings a stage sets as well, declared once: here for the stage's keys
#: and by ``clusterkit.job.settings.Settings`` for ``--set`` (a layer above, so it imports them)
MaxRestarts = Annotated[int | None, Field(ge=0, le=100)]
GpuBind = Literal["task", "none"] | None

#: a stage's keys that are not job options (:data:`job_options.STAGE`), each with its place among
#: the stage's keys, its type and default: ``--set`` settings (typed as ``Settings`` types them,
#: but ``spares``, a count or a share of the nodes) and the stage's ``job:``; their meaning:
#: :data:`clusterkit.config.key_docs.KEY_DOCS`
STAGE_OWN: dict[str, tuple[int, Any, Any]] = {
    "time": (2, str | None, None),
    "partition": (3, str | None, None),
    "max_restarts": (4, MaxRestarts, None),
    "container": (5, bool | None, None),
    "gpu_bind": (6, GpuBind, None),
    "job": (8, JobSection | None, None),
    "spares": (9, int | str | None, Field(None, description="spare nodes the stage's jobs allocate: a count or "
                                          "a share of the nodes (3%: at least one); default 3% at large-cluster, "
                                          "else 0")),
}


def _stage_fields() -> dict[str, tuple[Any, Any]]:
    """The fields of ``stages.<stage>``, in their order: :data:`STAGE_OWN` and the job options a stage sets."""
    ranked = {name: (rank, (kind, default)) for name, (rank, kind, default) in STAGE_OWN.items()}
    ranked.update((o.name, (o.stage.rank, job_options.stage_field(o)))
                  for o in job_options.STAGE if o.stage is not None)
    ranks = sorted(rank for rank, _ in ranked.values())
    if ranks != list(range(len(ranked))):
        raise ValueError(f"the stage keys' places {ranks} are not 0 to {len(ranked) - 1}, each once")
    return {name: field for name, (_, field) in sorted(ranked.items(), key=lambda item: item[1][0])}


if TYPE_CHECKING:
    class StageOverride(_StageRules):
        """``stages.<stage>``: its keys are read by name (:func:`_stage_fields`)."""

        def __getattr__(self, name: str) -> Any: ...
else:
    # the job options a stage sets (clusterkit.config.job_options.STAGE) and its own keys (STAGE_OWN)
    StageOverride = create_model("StageOverride", __base__=_StageRules, __module__=__name__, **_stage_fields())
