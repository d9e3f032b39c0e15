#!/usr/bin/env bash
# testbed.sh - a throwaway single-host Slurm "cluster" for clusterkit's tests.
#
#   munged + slurmctld + N slurmd (one per fake node; Debian's slurmd is built with
#   --enable-multiple-slurmd), each node advertising CPUs/RealMemory/gpu:G it does not
#   really have.  All config/state/logs/sockets live under $SLURMLAB_DIR; nothing is
#   written to /etc.  Needs root (SlurmUser=root) and the Debian packages
#   slurmctld slurmd slurm-client munge.
#
#   tests/slurm/testbed.sh                  (re)start from scratch (stops a previous instance first)
#   tests/slurm/testbed.sh --stop           stop everything started from $SLURMLAB_DIR (by pid)
#   tests/slurm/testbed.sh --stop --purge   ... and delete its state/logs/config
#
# On success the last lines on stdout are shell exports (also saved in $SLURMLAB_DIR/testbed.env):
#   export SLURM_CONF=...      every Slurm client (and submitit) needs it
#   export SLURMLAB_SACCT=...  directory holding a `sacct` stand-in (there is no slurmdbd)
#
# Env knobs: SLURMLAB_DIR (/tmp/slurmlab) SLURMLAB_NODES (4) SLURMLAB_CPUS (8)
#   SLURMLAB_MEM_MB (64000) SLURMLAB_GPUS (8, 0 = no GRES) SLURMLAB_GPU_TYPE ("" or e.g. h100)
#   SLURMLAB_PORT (6817: slurmctld; slurmd nodeI listens on SLURMLAB_PORT+I)
#   SLURMLAB_FIRST_JOB_ID (1: job ids start here; pick distinct values when several testbeds
#     run at once, because rendezvous ports derive from job ids and all nodes share 127.0.0.1)
#   SLURMLAB_UTS (1: each slurmd in its own UTS+mount namespace so `hostname` = nodeI)
#   SLURMLAB_TIMEOUT (60 s to wait for all nodes idle)
#   SLURMLAB_GRACE_S (10: GraceTime of the low partition `debug`; `high` preempts it, see below)
set -euo pipefail

LAB=${SLURMLAB_DIR:-/tmp/slurmlab}
NODES=${SLURMLAB_NODES:-4}
CPUS=${SLURMLAB_CPUS:-8}
MEM=${SLURMLAB_MEM_MB:-64000}
GPUS=${SLURMLAB_GPUS:-8}
GPU_TYPE=${SLURMLAB_GPU_TYPE:-}
PORT=${SLURMLAB_PORT:-6817}
FIRST_JOB_ID=${SLURMLAB_FIRST_JOB_ID:-1}
USE_UTS=${SLURMLAB_UTS:-1}
TIMEOUT=${SLURMLAB_TIMEOUT:-60}
GRACE=${SLURMLAB_GRACE_S:-10}
CONF=$LAB/etc/slurm.conf
MSOCK=$LAB/munge/munge.socket

log() { local ms=$(( ($(date +%s%N) - T0) / 1000000 )); printf '[testbed %d.%03ds] %s\n' $((ms / 1000)) $((ms % 1000)) "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
T0=$(date +%s%N)

# ---------------------------------------------------------------- stop logic
# A process is "ours" only if its comm matches AND its environment carries our marker
# (SLURMLAB_DIR=$LAB, exported before every daemon is started).  Never kill by name.
ours() { # pid comm
  local pid=${1:-} comm=$2
  [[ $pid =~ ^[0-9]+$ ]] && [ -r "/proc/$pid/comm" ] || return 1
  local c; read -r c 2>/dev/null < "/proc/$pid/comm" && [ "$c" = "$comm" ] || return 1
  { tr '\0' '\n' < "/proc/$pid/environ"; } 2>/dev/null | grep -qxF "SLURMLAB_DIR=$LAB"
}
pid_from() { if [ -r "$1" ]; then tr -dc '0-9' < "$1"; fi; }
alive() { # pid: exists and is not a zombie
  local st; st=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
  [ -n "$st" ] && [ "$st" != Z ]
}
kill_wait() { # comm pid... : SIGTERM the ones that are ours, wait up to 10 s, then SIGKILL
  local comm=$1; shift; local p live=() any
  for p in "$@"; do ours "$p" "$comm" && { kill -TERM "$p" 2>/dev/null || true; live+=("$p"); }; done
  [ ${#live[@]} -eq 0 ] && return 0
  for _ in $(seq 100); do
    any=0; for p in "${live[@]}"; do alive "$p" && any=1; done
    [ $any = 0 ] && return 0; sleep 0.1
  done
  for p in "${live[@]}"; do
    if alive "$p" && [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$comm" ]; then
      log "SIGKILL $comm $p"; kill -KILL "$p" 2>/dev/null || true
    fi
  done
  sleep 0.2
}
stop_testbed() {
  local p pids=()
  if [ -f "$CONF" ] && ours "$(pid_from "$LAB/run/slurmctld.pid")" slurmctld; then
    # cancel every job so slurmstepd and the job's tasks exit cleanly (KillWait=5 below)
    local joblist; joblist=$(SLURM_CONF=$CONF timeout 10 squeue -h -o %A 2>/dev/null | tr '\n' ' ' || true)
    if [ -n "${joblist// }" ]; then
      # shellcheck disable=SC2086  # a list of numeric job ids
      SLURM_CONF=$CONF timeout 10 scancel $joblist 2>/dev/null || true
      for _ in $(seq 80); do
        [ -z "$(SLURM_CONF=$CONF timeout 5 squeue -h -t PD,R,CG,S,CF -o %A 2>/dev/null)" ] && break; sleep 0.25
      done
      log "cancelled jobs: $joblist"
    fi
  fi
  for f in "$LAB"/run/slurmd-*.pid; do [ -e "$f" ] && pids+=("$(pid_from "$f")"); done
  [ ${#pids[@]} -gt 0 ] && kill_wait slurmd "${pids[@]}"
  kill_wait slurmctld "$(pid_from "$LAB/run/slurmctld.pid")"
  # leftovers of ours (orphaned slurmstepd / slurmscriptd), found via the env marker
  pids=()
  local d c
  for d in /proc/[0-9]*; do
    read -r c 2>/dev/null < "$d/comm" || continue
    case "$c" in slurmstepd|slurmscriptd) ours "${d#/proc/}" "$c" && pids+=("$c:${d#/proc/}");; esac
  done
  for p in "${pids[@]}"; do kill_wait "${p%%:*}" "${p#*:}"; done
  kill_wait munged "$(pid_from "$LAB/munge/munged.pid")"
  rm -f "$LAB"/run/*.pid "$LAB/munge/munged.pid"
  log "munged/slurmctld/slurmd stopped"
}

if [ "${1:-}" = "--stop" ]; then
  stop_testbed
  if [ "${2:-}" = "--purge" ]; then rm -rf "${LAB:?}"/{etc,state,log,run,munge,dev,bin,testbed.env}; fi
  exit 0
fi

[ "$(id -u)" = 0 ] || die "must run as root (SlurmUser=root)"
for b in munged munge unmunge slurmctld slurmd sbatch srun squeue sinfo scontrol scancel unshare ss; do
  command -v "$b" >/dev/null || die "missing binary: $b (apt-get install slurmctld slurmd slurm-client munge)"
done
if [ "$NODES" -lt 1 ] || [ $((PORT + NODES)) -gt 65535 ]; then die "bad SLURMLAB_NODES/PORT"; fi

# ---------------------------------------------------------------- fresh start
stop_testbed
# on any failure from here on: keep logs, but stop whatever was started
# shellcheck disable=SC2154  # rc is assigned inside the trap string
trap 'rc=$?; if [ $rc -ne 0 ]; then log "start failed (rc=$rc); stopping, logs kept in $LAB/log"; stop_testbed; fi' EXIT
rm -rf "${LAB:?}"/{state,run,log,dev}
mkdir -p "$LAB"/{etc,log,run,state/ctld,dev,bin,munge}
for i in $(seq 1 "$NODES"); do mkdir -p "$LAB/state/spool/node$i"; done
export SLURMLAB_DIR=$LAB SLURM_CONF=$CONF        # marker inherited by every daemon we start

for p in $(seq "$PORT" $((PORT + NODES))); do
  ss -Hltn "sport = :$p" | grep -q . && die "TCP port $p already in use"
done

# ---------------------------------------------------------------- munge (own key + socket)
chmod 755 "$LAB/munge"                            # munged refuses a socket dir that is not a+x
if [ ! -s "$LAB/munge/munge.key" ]; then
  dd if=/dev/urandom of="$LAB/munge/munge.key" bs=1024 count=1 status=none
fi
chmod 400 "$LAB/munge/munge.key"
munged --socket="$MSOCK" --key-file="$LAB/munge/munge.key" --pid-file="$LAB/munge/munged.pid" \
       --log-file="$LAB/munge/munged.log" --seed-file="$LAB/munge/munged.seed"
munge -S "$MSOCK" -n | unmunge -S "$MSOCK" >/dev/null || die "munge self-test failed"
log "munged up"

# ---------------------------------------------------------------- config
HOST=$(hostname -s)
GRES_NODE=""; GRES_TYPES=""
if [ "$GPUS" -gt 0 ]; then
  # gres/gpu drops File-less GPUs ("Removing file-less GPU"), and File= must be a char/block
  # device: symlinks to /dev/null pass that check without mknod or real GPUs.
  for g in $(seq 0 $((GPUS - 1))); do ln -sfn /dev/null "$LAB/dev/nvidia$g"; done
  GRES_TYPES="GresTypes=gpu"
  GRES_NODE="Gres=gpu:${GPU_TYPE:+$GPU_TYPE:}$GPUS"
  cat > "$LAB/etc/gres.conf" <<EOF
AutoDetect=off
NodeName=node[1-$NODES] Name=gpu ${GPU_TYPE:+Type=$GPU_TYPE }File=$LAB/dev/nvidia[0-$((GPUS - 1))]
EOF
else
  rm -f "$LAB/etc/gres.conf"
fi
: > "$LAB/etc/plugstack.conf"                   # keep /etc/slurm/plugstack.conf out of the picture
SOCKETS=1; [ $((CPUS % 2)) -eq 0 ] && [ "$CPUS" -ge 2 ] && SOCKETS=2
# Why each non-default line is here:
#   SlurmdParameters=config_overrides + Sockets/CoresPerSocket: fake CPUs/memory, else DRAIN+INVALID_REG
#   EnforcePartLimits=ALL: an impossible -N5 on 4 nodes is refused at submit instead of pending forever
#   batch_sched_delay=0: batch jobs start at once (the default 3 s delay dominates test time)
#   MinJobAge=3600: finished jobs stay visible to squeue/scontrol (no slurmdbd, so no sacct)
#   KillWait=5: cancelled/preempted jobs get SIGKILL 5 s after SIGTERM
#   jobacct_gather/linux + OverMemoryKill, sampled every 1 s: a job past its --mem is killed by
#     slurmstepd (no cgroups here), never by the machine's global OOM killer.  Slurm enforces
#     --mem only with memory a consumable resource (CR_Core_Memory); DefMemPerCPU = node memory
#     per CPU keeps a job without --mem from holding more than its CPUs' share
#   Preempt*: a job in partition `high` (PriorityTier=2) preempts `debug` jobs (PriorityTier=1) on
#     the same nodes: their running steps get SIGTERM at once, the batch shell nothing; after
#     GraceTime the job is cancelled "DUE TO PREEMPTION" (now the batch shell gets TERM) and
#     requeued.  GraceTime is short so preemption tests do not wait a minute.
cat > "$CONF" <<EOF
# generated by tests/slurm/testbed.sh
ClusterName=testbed
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MSOCK
StateSaveLocation=$LAB/state/ctld
SlurmdSpoolDir=$LAB/state/spool/%n
SlurmctldPidFile=$LAB/run/slurmctld.pid
SlurmdPidFile=$LAB/run/slurmd-%n.pid
SlurmctldLogFile=$LAB/log/slurmctld.log
SlurmdLogFile=$LAB/log/slurmd-%n.log
PlugStackConfig=$LAB/etc/plugstack.conf
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=$((MEM / CPUS))
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherParams=OverMemoryKill
JobAcctGatherFrequency=task=1
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
ReturnToService=2
EnforcePartLimits=ALL
FirstJobId=$FIRST_JOB_ID
KillWait=5
MinJobAge=3600
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
SlurmctldDebug=info
SlurmdDebug=info
$GRES_TYPES
NodeName=node[1-$NODES] NodeHostname=$HOST NodeAddr=127.0.0.1 Port=[$((PORT + 1))-$((PORT + NODES))] CPUs=$CPUS Sockets=$SOCKETS CoresPerSocket=$((CPUS / SOCKETS)) ThreadsPerCore=1 RealMemory=$MEM $GRES_NODE State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=$GRACE
PartitionName=high Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF
EOF
# /etc/hosts copy with the node names, bind-mounted only inside the slurmd namespaces
{ grep -v ' node[0-9]' /etc/hosts || true; echo "127.0.0.1 $(seq -f 'node%g' -s ' ' 1 "$NODES")"; } > "$LAB/etc/hosts"

# sacct stand-in (there is no slurmdbd): answers `sacct ... -o FIELDS -j ID[,ID] ...` from
# slurmctld's in-memory job table (`scontrol -o show job`; finished jobs kept MinJobAge s).
# Output is always '|'-separated with a header line unless -n/--noheader is given.
cat > "$LAB/bin/sacct" <<'EOF'
#!/usr/bin/env python3
"""Testbed-only sacct stand-in built on `scontrol -o show job`."""
import re, subprocess, sys
FIELDS = {"jobid": "JobId", "jobidraw": "JobId", "state": "JobState", "exitcode": "ExitCode",
          "nodelist": "NodeList", "jobname": "JobName", "partition": "Partition",
          "nnodes": "NumNodes", "elapsed": "RunTime", "reason": "Reason", "user": "UserId"}
fields, jobs, header, args = "JobID,JobName,Partition,State,NodeList", [], True, sys.argv[1:]
while args:
    a = args.pop(0)
    if a in ("-o", "--format"): fields = args.pop(0)
    elif a.startswith("--format="): fields = a.split("=", 1)[1]
    elif a in ("-j", "--jobs"): jobs += args.pop(0).split(",")
    elif a.startswith("--jobs="): jobs += a.split("=", 1)[1].split(",")
    elif a in ("-n", "--noheader"): header = False
names = [f.split("%")[0] for f in fields.split(",")]
out = subprocess.run(["scontrol", "-o", "show", "job"], capture_output=True, text=True).stdout
if header: print("|".join(names))
for line in out.splitlines():
    kv = dict(re.findall(r"(\S+?)=(\S*)", line))
    if jobs and kv.get("JobId") not in jobs: continue
    row = [kv.get(FIELDS.get(n.lower(), ""), "") for n in names]
    print("|".join(r.split("(")[0] if n.lower() == "user" else r for n, r in zip(names, row)))
EOF
chmod +x "$LAB/bin/sacct"

# ---------------------------------------------------------------- slurmctld
slurmctld
for _ in $(seq 100); do scontrol ping 2>/dev/null | grep -q 'is UP' && break; sleep 0.1; done
scontrol ping 2>/dev/null | grep -q 'is UP' || { tail -20 "$LAB/log/slurmctld.log" >&2; die "slurmctld not up"; }
log "slurmctld up on port $PORT"

# ---------------------------------------------------------------- slurmd per fake node
if [ "$USE_UTS" = 1 ] && ! unshare --uts --mount true 2>/dev/null; then
  log "unshare --uts --mount not permitted: nodes will share the host's hostname"; USE_UTS=0
fi
for i in $(seq 1 "$NODES"); do
  if [ "$USE_UTS" = 1 ]; then
    unshare --uts --mount sh -c "mount --bind '$LAB/etc/hosts' /etc/hosts && hostname node$i && exec slurmd -N node$i"
  else
    slurmd -N "node$i"
  fi
done

# ---------------------------------------------------------------- wait for all nodes idle
deadline=$(( $(date +%s) + TIMEOUT ))
while :; do
  idle=$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)
  [ "$idle" -eq "$NODES" ] && break
  if [ "$(date +%s)" -ge "$deadline" ]; then
    sinfo -N -o '%N %T %E' >&2 || true; tail -20 "$LAB/log/slurmctld.log" >&2
    die "only $idle/$NODES nodes idle after ${TIMEOUT}s"
  fi
  sleep 0.1
done
log "all $NODES nodes idle"

# ---------------------------------------------------------------- end-to-end warm-up job
# Also forces slurmctld's first scheduling pass: until it has run, the built-in
# batch_sched_delay=3 s applies, so batch jobs submitted in the first ~3 s would wait.
wj=$(sbatch --parsable -N "$NODES" --ntasks-per-node=1 -J warmup -o "$LAB/run/warmup-%j.out" --wrap 'srun hostname') \
  || die "sbatch of warm-up job failed"
while squeue -h -j "$wj" -t PD,R,CG,CF 2>/dev/null | grep -q .; do
  [ "$(date +%s)" -ge "$deadline" ] && die "warm-up job $wj did not finish"; sleep 0.1
done
scontrol show job "$wj" | grep -q 'JobState=COMPLETED' || { cat "$LAB/run/warmup-$wj.out" >&2; die "warm-up job $wj failed"; }
log "warm-up job $wj ran on: $(sort "$LAB/run/warmup-$wj.out" | tr '\n' ' ')"

trap - EXIT
cat > "$LAB/testbed.env" <<EOF
export SLURM_CONF=$CONF
export SLURMLAB_SACCT=$LAB/bin
EOF
sinfo -N -o '%N %T %c %m %G' >&2
cat "$LAB/testbed.env"
