"""The choices made for a job and where each came from (flag, plan, stage, site, default): the
line render and submit print, and what job.sbatch records (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from clusterkit.job import settings as settings_mod

if TYPE_CHECKING:
    from clusterkit.job.plan import Plan


@dataclass(frozen=True)
class Choice:
    """One choice made for a job, and where it came from (``flag``, ``plan``, ``stage``, ``site``, ``default``)."""

    name: str       # the setting's name (``zero_stage``, ``time``, ``launcher``)
    label: str      # how it is shown
    value: str
    source: str

    def worded(self) -> str:
        return f"{self.label} {self.value} ({self.source})"


# The choices render and submit show, by setting name, in order; a setting only some launchers
# act on is shown for those.  A new setting joins with its name and label here; where it came
# from is worked out by name (job.request.Resolved.sources).
SHOWN: tuple[tuple[str, str], ...] = (
    ("launcher", "launcher"), ("nodes", "nodes"), ("gpus_per_node", "GPUs per node"),
    ("strategy", "strategy"), ("zero_stage", "ZeRO stage"), ("offload", "offload"), ("precision", "precision"),
    ("micro_batch", "micro batch"), ("grad_accum", "grad accum"), ("time", "time limit"),
    ("max_restarts", "restarts"), ("container", "container"), ("preflight_in_job", "preflight in job"),
    ("spares", "spare nodes"), ("gpu_bind", "GPU binding"),
)
_SLURM_CHOICES = frozenset({"time", "max_restarts", "container", "preflight_in_job", "spares"})


def choices(plan: Plan) -> list[Choice]:
    """What was chosen for ``plan`` and where from: what render and submit print, and job.sbatch records."""
    sources = plan.basis.resolved.sources
    values: dict[str, Any] = {
        "launcher": plan.launcher, "nodes": plan.nnodes, "gpus_per_node": plan.gpus_per_node, "time": plan.time,
        "max_restarts": plan.max_restarts if plan.requeue else f"none ({plan.launcher} runs outside Slurm's steps)",
        "container": plan.container.image if plan.container else "none",
        "preflight_in_job": "perf" if plan.preflight_in_job == "perf" else "yes" if plan.preflight_in_job else "no",
        "spares": plan.spares,
        "gpu_bind": "one GPU per task" if plan.basis.resolved.gpu_bind == "task" else "none",
    }
    out = []
    for name, label in SHOWN:
        if (name in _SLURM_CHOICES and not plan.slurm) or (name == "spares" and not plan.spares):
            continue
        if name in settings_mod.Settings.model_fields and not settings_mod.acts_on(name, plan.launcher):
            continue
        source = sources.get(name, "default")
        if name == "max_restarts" and not plan.requeue:
            source = "default"   # the stage's: no requeue whatever the budget
        value = values.get(name, getattr(plan.settings, name, None))
        if settings_mod.script_variable(name, plan.launcher) is not None and source == "default":
            value = "the training script's"
        out.append(Choice(name, label, *plan.launch.given.get(name, (str(value), source))))
    return out
