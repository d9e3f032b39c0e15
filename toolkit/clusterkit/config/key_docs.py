"""What each site key means, for the keys whose model field carries no description of its own:
``clusterkit sites schema`` (:func:`clusterkit.config.load.json_schema`) puts these into the JSON
Schema, so an editor shows every key's meaning.  Keyed by ``Model.field`` as pydantic names them."""

from __future__ import annotations

from typing import Any

from clusterkit.config.job_options import SITE_JOB, STAGE

KEY_DOCS: dict[str, str] = {
    "Site.name": "the site's name (what --site and `sites list` use)",
    "Site.description": "one line shown by `sites list`",
    "Site.scheduler": "how jobs reach the machines: Slurm (partition, account, time, restarts) or this machine",
    "Site.nodes": "the compute nodes: host list, GPUs, CPUs and memory per node",
    "Site.ssh": "how preflight reaches nodes over SSH (user, port, jump host, host keys, timeouts)",
    "Site.software": "driver and CUDA the nodes must have, modules to load, the job's container",
    "Site.network": "the fabric between nodes (infiniband, roce, efa, ethernet), its HCAs and interfaces",
    "Site.storage": "file systems the nodes mount; shared ones (nfs, lustre, gpfs, beegfs) hold runs and checkpoints",
    "Site.nccl": "NCCL settings every job of this site gets (communication settings only)",
    "Site.job": "what every job of this site adds: environment, setup steps, srun and launcher arguments",
    "Site.launchers": "the site's own launchers, declared as data: argv with {ck:NAME} values, per node, task or "
                      "job, the flags each owns (--launcher NAME)",
    "DeclaredLauncher.description": "one line saying what the launcher is",
    "Site.stages": "per-stage settings (single-node, multi-node, large-cluster): launcher, nodes, time, ...",
    "Site.preflight": "when nodes are checked (in the job, before submit) and what is done with bad ones",
    "Site.perf": "what `preflight --perf` measures and what a node must reach",
    "Site.node_history": "when the nodes that keep failing in your jobs (`clusterkit nodes`) are kept out of new jobs",
    "Site.watch": "when the job's supervisor calls a run stalled, and the process-group timeouts the job exports",
    "Site.logs": "where a large job's per-process files go: --debug's node limit, the node-local directory",
    "Site.code": "the snapshot of the code each job runs in (taken at submit time): on or off, and its limits",
    "Site.login": "the cluster's login node, for submitting from a laptop over SSH (host, user, port, jump host)",
    "Site.cost": "price per GPU hour, for `clusterkit plan`'s cost figures",
    "Site.templates": "a folder of job script templates replacing the built-in ones of the same name",
    "Container.runtime": "pyxis (srun --container-image), apptainer, or singularity (apptainer's flags, the "
                         "singularity command)",
    "Container.image": "the image every rank runs in (pyxis: registry#image or a .sqsh file)",
    "Container.mounts": "SRC:DST mounts into the container",
    "Site.reliability": "how often GPUs fail and what a save and a restart cost: the checkpoint cadence jobs are told",
    "Reliability.gpu_failures_per_hour": "failures per GPU-hour; unset: 1.97e-5, the Llama 3 report's rate",
    "Reliability.checkpoint_save_s": "seconds one checkpoint save takes (measure yours; default 60)",
    "Reliability.restart_s": "seconds from a failure to training again (default 300)",
    "Cost.gpu_hour": "price of one GPU for one hour",
    "Cost.currency": "currency of gpu_hour",
    **{f"JobSection.{o.name}": o.site.help for o in SITE_JOB if o.site is not None},
    "NCCL.env": "NCCL_* variables (they win over clusterkit's policy)",
    "Network.fabric": "infiniband, roce, efa or ethernet: picks the NCCL policy and the preflight checks",
    "Network.hcas": "the HCAs NCCL may use (mlx5_0, ...), also checked by preflight",
    "Network.port_rate_gbps": "the rate every HCA port must run at, Gbit/s",
    "Network.socket_ifname": "the interface NCCL's bootstrap and socket transport use (NCCL_SOCKET_IFNAME)",
    "Network.rendezvous_host": "how launchers reach the head: {suffix: i} (gpu001i) or {interface: ib0} (its "
                               "address there, read on the head when the job runs); unset: the head's name",
    "Network.topology": "Slurm's topology plugin and the placement jobs ask for: {plugin: tree, max_switches: 1, "
                        "max_wait: \"00:10:00\"} or {plugin: block, segment: 4}; hosts ordered by switch or block",
    "Network.rail_optimized": "one HCA per GPU on separate rails: NCCL crosses rails through NVLink",
    "Network.roce": "RoCE settings (gid_index, traffic_class, service_level); fabric roce only",
    "Nodes.nodelist": "the nodes, Slurm host list syntax (gpu[001-064])",
    "Nodes.gpus_per_node": "GPUs per node (processes per node for the launchers)",
    "Nodes.gpu_model": "the GPU model, as nvidia-smi names it (checked by preflight)",
    "Nodes.gpu_mem_gb": "memory of one GPU, GB (clusterkit plan sizes jobs with it)",
    "Nodes.cpus_per_node": "CPU cores per node (a partial-node job asks for its share)",
    "Nodes.mem_gb": "memory per node, GB",
    "Nodes.gpu_bind": "--launcher srun: task (each task its own GPU, for cuda:0 scripts) or none (the default)",
    "Perf.gemm_iters": "matmul repetitions per measurement",
    "Preflight.max_excluded_fraction": "the most of the candidate nodes preflight may exclude before it refuses",
    "RoCE.gid_index": "the GID index NCCL uses (NCCL_IB_GID_INDEX; RoCE v2 is often 3)",
    "RoCE.traffic_class": "the traffic class of NCCL's RDMA traffic (NCCL_IB_TC)",
    "RoCE.service_level": "the service level of NCCL's RDMA traffic (NCCL_IB_SL)",
    "SSH.user": "the user name on the nodes (default: ~/.ssh/config's, else yours)",
    "SSH.port": "the SSH port on the nodes",
    "SSH.jump_host": "a host to reach the nodes through (ProxyJump)",
    "SSH.known_hosts": "the known_hosts file host keys are checked against",
    "SSH.identity_file": "the private key to log in with",
    "SSH.connect_timeout_s": "seconds to wait for a node's connection",
    "SSH.command_timeout_s": "seconds a node's checks may take",
    "SSH.fanout": "nodes worked on at once",
    **{f"{section}.{key}": text for section in ("SlurmSection", "LocalSection") for key, text in (
        ("kind", "slurm (the default), or local (this machine, no scheduler: Slurm's keys are not set here)"),
        ("time", "the time limit of a job, Slurm's syntax (HH:MM:SS, D-HH:MM)"),
        ("max_restarts", "how often a job is requeued after preemption or a time-limit stop"),
        ("preempt_signal_s", "seconds before the time limit the job is warned (#SBATCH --signal)"))},
    "SlurmSection.partition": "the partition jobs go to (#SBATCH --partition)",
    "SlurmSection.account": "the account jobs are charged to (#SBATCH --account)",
    "SlurmSection.qos": "the quality of service (#SBATCH --qos)",
    "SlurmSection.sbatch": "further #SBATCH options, name: value (those clusterkit writes itself are refused)",
    "Software.driver_min": "the lowest NVIDIA driver version preflight accepts",
    "Software.cuda": "the CUDA version the nodes provide",
    "Software.modules": "environment modules every job loads",
    "Software.container": "the container every job runs in (pyxis, apptainer or singularity)",
    **{f"StageOverride.{o.name}": o.stage.help for o in STAGE if o.stage is not None},
    "StageOverride.time": "the time limit of this stage's jobs",
    "StageOverride.gpu_bind": "--launcher srun's GPU binding for this stage (task or none)",
    "StageOverride.partition": "the partition of this stage's jobs",
    "StageOverride.max_restarts": "how often this stage's jobs are requeued",
    "StageOverride.container": "the container of this stage's jobs",
    "StageOverride.job": "what this stage's jobs add (env, setup, args), after the site's job:",
    "Storage.path": "the mount point (absolute)",
    "Storage.type": "lustre, nfs, gpfs, beegfs or local",
    "Storage.min_free_gb": "the least free space preflight accepts, GB",
    "Storage.use": "what it holds: data, checkpoints, scratch, home, software",
    "Storage.timeout_s": "seconds preflight waits for the mount to answer",
}


def describe(schema: dict[str, Any]) -> dict[str, Any]:
    """Give every property of ``schema`` (the Site model's and its ``$defs``') without a
    description the one in :data:`KEY_DOCS`; returns ``schema``."""
    for model, body in [("Site", schema), *schema.get("$defs", {}).items()]:
        for key, prop in body.get("properties", {}).items():
            text = KEY_DOCS.get(f"{model}.{key}")
            if text is not None and "description" not in prop:
                prop["description"] = text
    return schema
