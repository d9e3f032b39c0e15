"""Per-task GPU binding for ``--launcher srun`` (``--set gpu_bind=task``, the site's ``nodes.gpu_bind``):
each task of the launch step sees one GPU, its own, so a training script that uses ``cuda:0`` puts
every rank on a GPU of its own (pure; docs/jobs.md, "Launchers").

How: the task's body keeps the ``SLURM_LOCALID``-th entry of the GPUs Slurm gave the step on its
node (the vendor's variable: ``CUDA_VISIBLE_DEVICES``, ``ROCR_VISIBLE_DEVICES``,
``ZE_AFFINITY_MASK``), or the GPU of that number where Slurm set none (a site without GPU GRES).
Not ``srun --gpu-bind=single:1``: that binds by the CPU affinity gres.conf declares (``Cores=``)
and the step's CPU binding, so on a node whose gres.conf names no cores, or whose tasks are not
bound to CPUs, tasks may share a GPU or the step is refused, and on a site whose GPUs are no GRES
it binds nothing.  A task Slurm bound to one GPU already (``--srun-arg=--gpu-bind=...``) keeps it.
"""

from __future__ import annotations

from typing import Literal

VISIBLE = {"nvidia": "CUDA_VISIBLE_DEVICES", "amd": "ROCR_VISIBLE_DEVICES", "intel": "ZE_AFFINITY_MASK"}


def task_binding(vendor: Literal["nvidia", "amd", "intel"]) -> str:
    """The body's words that leave the task its own GPU (each task expands them for itself)."""
    var = VISIBLE[vendor]
    return (f'ck_node_gpus=${{{var}-}}; IFS=, read -ra ck_gpu_list <<< "$ck_node_gpus"; '
            f'if [ -z "$ck_node_gpus" ]; then {var}=$SLURM_LOCALID; '
            f'elif [ "${{#ck_gpu_list[@]}}" = 1 ]; then {var}=${{ck_gpu_list[0]}}; '
            f'else {var}=${{ck_gpu_list[$SLURM_LOCALID]:-}}; fi; '
            f'[ -n "${var}" ] || {{ echo "clusterkit: task $SLURM_PROCID: no GPU $SLURM_LOCALID among '
            f'{var}=$ck_node_gpus on $(hostname)" >&2; exit 1; }}; export {var}; ')
