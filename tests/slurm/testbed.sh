#!/usr/bin/env bash
# testbed.sh - a throwaway Slurm "cluster" of network namespaces on one machine, for clusterkit's tests.
#
#   munged + MariaDB (a private mysqld) + slurmdbd + slurmctld + N slurmd, one per fake node,
#   each node advertising CPUs/RealMemory/gpu:G it does not really have.  All config, state,
#   logs and sockets live under $SLURMLAB_DIR; nothing is written to /etc.  Needs root
#   (SlurmUser=root) and the Debian packages slurmctld slurmd slurmdbd slurm-client munge
#   mariadb-server iproute2.
#
#   tests/slurm/testbed.sh                  (re)start from scratch (stops a previous instance first)
#   tests/slurm/testbed.sh --stop           stop everything started from $SLURMLAB_DIR (by pid), remove
#                                           its namespaces and cgroups
#   tests/slurm/testbed.sh --stop --purge   ... and delete its state/logs/config
#   tests/slurm/testbed.sh --ctld           start slurmctld alone again (after a test stopped it)
#   tests/slurm/testbed.sh --build          build the Slurm SLURMLAB_SLURM names if not cached, nothing else
#
# Layout (H = 8 hex digits of sha1($SLURMLAB_DIR), so two testbeds never share a name):
#   network namespace ck$H-ctl  the controller and login node: bridge br0 with 10.77.0.254/24,
#                               mysqld on 127.0.0.1:3306, slurmdbd on :PORT+1, slurmctld on :PORT
#   network namespace ck$H-nI   node I: eth0 with 10.77.0.I/24 (its veth peer vnI is a port of
#                               br0), slurmd on :6818, in a UTS+mount namespace of its own with
#                               hostname nodeI and an /etc/hosts naming every node's address
#   cgroup (v1 cpu or v2) slurmlab-$H/nodeI: node I's slurmd and every process it starts
#   Nothing is assigned an address in the namespace the script runs in.  There, a forwarder
#   (netns_forward.py) listens on 127.0.0.1:PORT and 127.0.0.1:PORT+1 and connects from inside
#   ck$H-ctl, so Slurm clients on this machine (sbatch, squeue, scontrol, scancel, sacct,
#   sacctmgr, submitit) reach slurmctld and slurmdbd.  $SLURMLAB_DIR/etc/slurm.conf names the
#   controller 127.0.0.1 (right here and inside ck$H-ctl); inside each node's mount namespace the
#   same path shows slurm-nodes.conf, naming it 10.77.0.254.  srun and salloc need the nodes to
#   reach them back: run them inside ck$H-ctl (ip netns exec), the login node.
#
# On success the last lines on stdout are shell exports (also saved in $SLURMLAB_DIR/testbed.env):
#   export SLURM_CONF=...              every Slurm client (and submitit) needs it
#   export SLURMLAB_NETNS_CTL=ck$H-ctl  the controller's (login node's) network namespace
#   export SLURMLAB_NETNS_nodeI=...    node I's network namespace        (one line per node)
#   export SLURMLAB_IF_nodeI=eth0      its interface inside that namespace
#   export SLURMLAB_ADDR_nodeI=10.77.0.I
#   export SLURMLAB_CGROUP_nodeI=...   the cgroup directory holding node I's processes
#
# Env knobs: SLURMLAB_DIR (/tmp/slurmlab) SLURMLAB_NODES (4, at most 250) SLURMLAB_CPUS (8)
#   SLURMLAB_MEM_MB (64000) SLURMLAB_GPUS (8, 0 = no GRES) SLURMLAB_GPU_TYPE ("" or e.g. h100)
#   SLURMLAB_PORT (6817: slurmctld; slurmdbd listens on SLURMLAB_PORT+1; both on this machine's
#     127.0.0.1 through the forwarder)
#   SLURMLAB_FIRST_JOB_ID (1: job ids start here)
#   SLURMLAB_TIMEOUT (60 s to wait for all nodes idle)
#   SLURMLAB_GRACE_S (10: GraceTime of the low partition `debug`; `high` preempts it, see below)
#   SLURMLAB_MIN_JOB_AGE (3600: seconds slurmctld keeps a finished job)
#   SLURMLAB_SLURM ("" = 22.05: the system's Slurm; 24.11: built from Debian 13's slurm-wlm source
#     into SLURMLAB_SLURM_CACHE (build/slurm-24.11) when that is empty, first on PATH; the build
#     needs libmunge-dev libjson-c-dev libyaml-dev libmariadb-dev libhwloc-dev liblz4-dev
#     libcurl4-openssl-dev pkg-config).  tests/slurm/testbed.sh --build only builds it.
set -euo pipefail

LAB=${SLURMLAB_DIR:-/tmp/slurmlab}
NODES=${SLURMLAB_NODES:-4}
CPUS=${SLURMLAB_CPUS:-8}
MEM=${SLURMLAB_MEM_MB:-64000}
GPUS=${SLURMLAB_GPUS:-8}
GPU_TYPE=${SLURMLAB_GPU_TYPE:-}
PORT=${SLURMLAB_PORT:-6817}
DBD_PORT=$((PORT + 1))
FIRST_JOB_ID=${SLURMLAB_FIRST_JOB_ID:-1}
TIMEOUT=${SLURMLAB_TIMEOUT:-60}
GRACE=${SLURMLAB_GRACE_S:-10}
MIN_JOB_AGE=${SLURMLAB_MIN_JOB_AGE:-3600}
SLURM_VER=${SLURMLAB_SLURM:-}                     # "" or 22.05: the system's Slurm; 24.11: built (below)
CONF=$LAB/etc/slurm.conf
NODE_CONF=$LAB/etc/slurm-nodes.conf
MSOCK=$LAB/munge/munge.socket
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
H=$(printf '%s' "$LAB" | sha1sum | cut -c1-8)
CTL_NS=ck$H-ctl
NET=10.77.0                                       # nodeI = $NET.I, the controller $NET.254
CTL_ADDR=$NET.254
DB_SOCK=$LAB/db/mysqld.sock

log() { local ms=$(( ($(date +%s%N) - T0) / 1000000 )); printf '[testbed %d.%03ds] %s\n' $((ms / 1000)) $((ms % 1000)) "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
T0=$(date +%s%N)
node_ns() { echo "ck$H-n$1"; }
# cgroup of node I's processes: cgroup v2 where its cpu controller is, else v1's cpu hierarchy
cg_root() {
  if grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then echo "/sys/fs/cgroup/slurmlab-$H"
  elif [ -d /sys/fs/cgroup/cpu ]; then echo "/sys/fs/cgroup/cpu/slurmlab-$H"
  fi
}
CG_ROOT=$(cg_root)

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
our_netns() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^ck$H-(ctl|n[0-9]+)$" || true; }
stop_testbed() {
  local p pids=()
  kill_wait bash "$(pid_from "$LAB/run/supervise.pid")"   # first: it would restart what is stopped below
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
  kill_wait slurmdbd "$(pid_from "$LAB/run/slurmdbd.pid")"
  # leftovers of ours (orphaned slurmstepd / slurmscriptd), found via the env marker
  pids=()
  local d c
  for d in /proc/[0-9]*; do
    read -r c 2>/dev/null < "$d/comm" || continue
    case "$c" in slurmstepd|slurmscriptd) ours "${d#/proc/}" "$c" && pids+=("$c:${d#/proc/}");; esac
  done
  for p in "${pids[@]}"; do kill_wait "${p%%:*}" "${p#*:}"; done
  kill_wait mariadbd "$(pid_from "$LAB/run/mariadbd.pid")"
  kill_wait slurmlab-fwd "$(pid_from "$LAB/run/forward.pid")"
  kill_wait munged "$(pid_from "$LAB/munge/munged.pid")"
  rm -f "$LAB"/run/*.pid "$LAB"/run/*.held "$LAB"/run/*.dead "$LAB/munge/munged.pid"
  # the namespaces go last; a process still inside one (a job's task that outlived its
  # slurmstepd) carries our marker too and is stopped first
  local ns
  for ns in $(our_netns); do
    for p in $(ip netns pids "$ns" 2>/dev/null); do
      kill_wait "$(cat "/proc/$p/comm" 2>/dev/null || echo '?')" "$p"
    done
    ip netns del "$ns" 2>/dev/null || log "could not remove network namespace $ns"
  done
  if [ -n "$CG_ROOT" ] && [ -d "$CG_ROOT" ]; then
    for d in "$CG_ROOT"/node*; do if [ -d "$d" ]; then rmdir "$d" 2>/dev/null || log "cgroup $d still busy"; fi; done
    rmdir "$CG_ROOT" 2>/dev/null || true
  fi
  log "stopped (slurmd, slurmctld, slurmdbd, mariadbd, forwarder, munged; namespaces, cgroups)"
}
start_ctld() {
  ip netns exec "$CTL_NS" slurmctld
  for _ in $(seq 100); do scontrol ping 2>/dev/null | grep -q 'is UP' && break; sleep 0.1; done
  scontrol ping 2>/dev/null | grep -q 'is UP' || { tail -20 "$LAB/log/slurmctld.log" >&2; die "slurmctld not up"; }
}

# ---------------------------------------------------------------- which Slurm
# SLURMLAB_SLURM=24.11: Slurm 24.11 built from the upstream source Debian 13 (trixie) ships
# (source package slurm-wlm), once, into $SLURMLAB_SLURM_CACHE (default build/slurm-24.11 in this
# checkout, git-ignored); its bin/ and sbin/ go first on PATH for the daemons, the clients here and
# testbed.env.  The tarball comes through apt from a deb-src entry of its own (the system's
# sources are not touched): apt checks the Release file's signature against Debian's archive
# keyring and the tarball's hash against the signed Sources index; the hash is checked again here.
SLURM_PREFIX=""
build_slurm() { # version -> $SLURM_PREFIX built (a no-op when the cache holds it)
  local ver=$1 cache=${SLURMLAB_SLURM_CACHE:-$(cd "$HERE/../.." && pwd)/build/slurm-$1}
  SLURM_PREFIX=$cache/prefix
  if [ "$(cat "$SLURM_PREFIX/.built" 2>/dev/null)" = "$ver" ] && [ -x "$SLURM_PREFIX/sbin/slurmctld" ]; then return 0; fi
  mkdir -p "$cache"
  exec 9>"$cache/.lock"; flock 9                 # two testbeds starting at once build it once
  if [ "$(cat "$SLURM_PREFIX/.built" 2>/dev/null)" = "$ver" ] && [ -x "$SLURM_PREFIX/sbin/slurmctld" ]; then exec 9>&-; return 0; fi
  local t0; t0=$(date +%s)
  local pc; for pc in munge json-c yaml-0.1 hwloc liblz4 libcurl mariadb; do
    pkg-config --exists "$pc" 2>/dev/null \
      || die "building Slurm $ver needs pkg-config module $pc (apt-get install libmunge-dev libjson-c-dev libyaml-dev libmariadb-dev libhwloc-dev liblz4-dev libcurl4-openssl-dev pkg-config)"
  done
  local apt=$cache/apt dl=$cache/dl keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  [ -r "$keyring" ] || die "no Debian archive keyring at $keyring (apt-get install debian-archive-keyring)"
  mkdir -p "$apt/sources.d" "$apt/lists/partial" "$dl"
  printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: trixie\nComponents: main\nSigned-By: %s\n' \
    "$keyring" > "$apt/sources.d/trixie-src.sources"
  local aptopts=(-o Dir::Etc::sourcelist=/dev/null -o "Dir::Etc::sourceparts=$apt/sources.d"
                 -o "Dir::State::Lists=$apt/lists" -o Debug::NoLocking=1)
  apt-get "${aptopts[@]}" -qq update >"$cache/apt.log" 2>&1 || { tail -5 "$cache/apt.log" >&2; die "apt-get update (trixie deb-src) failed"; }
  # the .dsc may be missing from the archive (a 404): the orig tarball still comes, and is all a build needs
  (cd "$dl" && apt-get "${aptopts[@]}" -qq source --download-only slurm-wlm >>"$cache/apt.log" 2>&1) || true
  local tarball; tarball=$(find "$dl" -maxdepth 1 -name "slurm-wlm_$ver.*.orig.tar.gz" | sort | tail -1)
  [ -n "$tarball" ] || { tail -5 "$cache/apt.log" >&2; die "no slurm-wlm $ver orig tarball from trixie's deb-src"; }
  local base want="" got; base=$(basename "$tarball")
  local f; for f in "$apt"/lists/*_source_Sources*; do          # lists may be kept compressed
    want=$( { /usr/lib/apt/apt-helper cat-file "$f" 2>/dev/null || true; } | awk -v f="$base" '
      /^Checksums-Sha256:/ {c=1; next} /^[^ ]/ {c=0} c && $3 == f {print $1; exit}')
    [ -n "$want" ] && break
  done
  got=$(sha256sum "$tarball" | cut -d' ' -f1)
  if [ -z "$want" ] || [ "$want" != "$got" ]; then
    rm -f "$tarball"; die "$base: sha256 $got is not the signed Sources index's (${want:-none})"
  fi
  log "$base: sha256 matches trixie's signed Sources index; building Slurm into $SLURM_PREFIX"
  rm -rf "$cache/src" "$SLURM_PREFIX"; mkdir -p "$cache/src"
  tar -xzf "$tarball" -C "$cache/src" --strip-components=1
  # a test build, no optimisation and no debug information (CFLAGS -O0 -g0): the same daemons and
  # commands in 3 minutes on two idle cores (configure's default -O2 -g took 8 on two shared ones)
  (cd "$cache/src" \
     && CFLAGS="-O0 -g0 -pipe" ./configure --prefix="$SLURM_PREFIX" --sysconfdir="$SLURM_PREFIX/etc" --disable-debug --without-rpath \
          --enable-multiple-slurmd >"$cache/build.log" 2>&1 \
     && make -j"$(nproc)" >>"$cache/build.log" 2>&1 && make install >>"$cache/build.log" 2>&1) \
    || { tail -30 "$cache/build.log" >&2; die "building Slurm $ver failed (log: $cache/build.log)"; }
  rm -rf "$cache/src"
  echo "$ver" > "$SLURM_PREFIX/.built"
  log "Slurm $ver built in $(( $(date +%s) - t0 )) s"
  exec 9>&-
}
case "$SLURM_VER" in
  ""|22.05) ;;
  24.11) build_slurm "$SLURM_VER"; export PATH=$SLURM_PREFIX/bin:$SLURM_PREFIX/sbin:$PATH ;;
  *) die "SLURMLAB_SLURM=$SLURM_VER: only 22.05 (the system's) or 24.11" ;;
esac
if [ "${1:-}" = "--build" ]; then exit 0; fi

start_slurmd() { # I
  # the subshell joins node I's cgroup: slurmd and everything it starts inherit it.  nsenter, not
  # `ip netns exec`, which remounts /sys and so hides the cgroup tree slurmd wants to see
  local i=$1
  (
    if [ -n "$CG_ROOT" ]; then echo "$BASHPID" > "$CG_ROOT/node$i/cgroup.procs"; fi
    exec nsenter --net="/run/netns/$(node_ns "$i")" unshare --uts --mount sh -c "
      mount --bind '$LAB/etc/hosts' /etc/hosts && mount --bind '$NODE_CONF' '$CONF' &&
      hostname node$i && exec slurmd -N node$i"
  )
}

# ---------------------------------------------------------------- supervisor
# A daemon that dies under a test (the 22.05 slurmd once aborted on a double free in libmunge
# when two job launches overlapped) is noticed within a second, logged to $LAB/log/supervise.log
# (one line: when, which daemon, its pid, the last lines of its own log) and started again;
# tests/slurm/conftest.py names such a death in the report of a test that failed meanwhile.
# A daemon stopped on purpose is not restarted: $LAB/run/NAME.held (written by whoever stops it,
# removed by --ctld) holds it.  slurmctld, slurmdbd and every slurmd are restarted; munged and
# mariadbd are only logged.
sv_log() { printf '%s %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >> "$LAB/log/supervise.log"; }
sv_tail() { # log file: its last 3 lines, on one line
  tail -n 3 "$1" 2>/dev/null | tr -d '\000-\010\013-\037' | tr '\n' '|' | cut -c1-600 || true
}
sv_dead() { # pid file: true when the pid it names is gone or a zombie (sets SVP); builtins only
  SVP=""; read -r SVP 2>/dev/null < "$1" || true
  [[ $SVP =~ ^[0-9]+$ ]] || return 1
  local st=""; read -r st 2>/dev/null < "/proc/$SVP/stat" || return 0
  st=${st##*) }; [ "${st%% *}" = Z ]
}
supervise() {
  local n i gone
  # --stop's SIGTERM ends the `sleep` too (a TERM that killed this shell outright would leave that
  # sleep behind, a process of the testbed still running after --stop); `wait`, unlike a sleep in
  # the foreground, lets the trap run at once instead of up to a second later
  local nap=""
  trap 'if [ -n "$nap" ]; then kill "$nap" 2>/dev/null || true; fi; exit 0' TERM
  sv_log "supervisor up (pid $$): slurmctld slurmdbd slurmd node1..node$NODES munged mariadbd"
  while :; do
    sleep 1 & nap=$!
    wait "$nap" || true
    nap=""
    for n in slurmctld slurmdbd; do
      [ -e "$LAB/run/$n.held" ] && continue
      if sv_dead "$LAB/run/$n.pid"; then
        gone="$n (pid $SVP) died; its log ends: $(sv_tail "$LAB/log/$n.log")"
        rm -f "$LAB/run/$n.pid"
        ip netns exec "$CTL_NS" "$n" 2>/dev/null || true
        sleep 1; sv_log "$gone; restarted as pid $(pid_from "$LAB/run/$n.pid")"
      fi
    done
    for ((i = 1; i <= NODES; i++)); do
      [ -e "$LAB/run/slurmd-node$i.held" ] && continue
      if sv_dead "$LAB/run/slurmd-node$i.pid"; then
        gone="slurmd on node$i (pid $SVP) died; its log ends: $(sv_tail "$LAB/log/slurmd-node$i.log")"
        rm -f "$LAB/run/slurmd-node$i.pid"
        start_slurmd "$i" 2>/dev/null || true
        sleep 1; sv_log "$gone; restarted as pid $(pid_from "$LAB/run/slurmd-node$i.pid")"
      fi
    done
    for n in munged:munge/munged.pid mariadbd:run/mariadbd.pid; do
      if [ ! -e "$LAB/run/${n%%:*}.dead" ] && sv_dead "$LAB/${n#*:}"; then
        touch "$LAB/run/${n%%:*}.dead"; sv_log "${n%%:*} (pid $SVP) died; not restarted"
      fi
    done
  done
}

if [ "${1:-}" = "--supervise" ]; then
  export SLURMLAB_DIR=$LAB SLURM_CONF=$CONF
  echo $$ > "$LAB/run/supervise.pid"
  supervise
fi
if [ "${1:-}" = "--stop" ]; then
  stop_testbed
  if [ "${2:-}" = "--purge" ]; then rm -rf "${LAB:?}"/{etc,state,log,run,munge,dev,bin,db,testbed.env}; fi
  exit 0
fi
if [ "${1:-}" = "--ctld" ]; then
  export SLURMLAB_DIR=$LAB SLURM_CONF=$CONF
  start_ctld
  rm -f "$LAB/run/slurmctld.held"
  exit 0
fi

[ "$(id -u)" = 0 ] || die "must run as root (SlurmUser=root)"
for b in munged munge unmunge slurmctld slurmd slurmdbd sbatch srun squeue sinfo scontrol scancel sacctmgr \
         mariadbd mariadb-install-db mariadb unshare nsenter ip ss python3; do
  command -v "$b" >/dev/null || die "missing binary: $b (apt-get install slurmctld slurmd slurmdbd slurm-client munge mariadb-server iproute2)"
done
if [ "$NODES" -lt 1 ] || [ "$NODES" -gt 250 ] || [ "$DBD_PORT" -gt 65535 ]; then die "bad SLURMLAB_NODES/PORT"; fi
unshare --uts --mount true 2>/dev/null || die "unshare --uts --mount not permitted"

# ---------------------------------------------------------------- fresh start
stop_testbed
# on any failure from here on: keep logs, but stop whatever was started
# shellcheck disable=SC2154  # rc is assigned inside the trap string
trap 'rc=$?; if [ $rc -ne 0 ]; then log "start failed (rc=$rc); stopping, logs kept in $LAB/log"; stop_testbed; fi' EXIT
rm -rf "${LAB:?}"/{state,run,log,dev,db}
mkdir -p "$LAB"/{etc,log,run,state/ctld,dev,bin,munge,db}
for i in $(seq 1 "$NODES"); do mkdir -p "$LAB/state/spool/node$i"; done
export SLURMLAB_DIR=$LAB SLURM_CONF=$CONF        # marker inherited by every daemon we start

for p in "$PORT" "$DBD_PORT"; do
  ss -Hltn "sport = :$p" | grep -q . && die "TCP port $p already in use"
done

# ---------------------------------------------------------------- network: namespaces, bridge, veths
ip netns add "$CTL_NS"
ip -n "$CTL_NS" link set lo up
ip -n "$CTL_NS" link add br0 type bridge
ip -n "$CTL_NS" addr add "$CTL_ADDR/24" dev br0
ip -n "$CTL_NS" link set br0 up
for i in $(seq 1 "$NODES"); do
  ns=$(node_ns "$i")
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip -n "$CTL_NS" link add "vn$i" type veth peer name eth0 netns "$ns"   # both ends born inside namespaces
  ip -n "$CTL_NS" link set "vn$i" master br0 up
  ip -n "$ns" addr add "$NET.$i/24" dev eth0
  ip -n "$ns" link set eth0 up
done
if [ -n "$CG_ROOT" ]; then
  mkdir -p "$CG_ROOT"
  if [ "${CG_ROOT#/sys/fs/cgroup/cpu/}" = "$CG_ROOT" ]; then echo +cpu > "$CG_ROOT/cgroup.subtree_control"; fi
  for i in $(seq 1 "$NODES"); do mkdir -p "$CG_ROOT/node$i"; done
fi
log "network namespaces $CTL_NS (bridge br0, $CTL_ADDR) + $(node_ns 1)..$(node_ns "$NODES") ($NET.1-$NODES)"

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

# ---------------------------------------------------------------- forwarder: 127.0.0.1 here -> the controller's namespace
setsid python3 "$HERE/netns_forward.py" "/run/netns/$CTL_NS" "$LAB/run/forward.pid" "$PORT" "$DBD_PORT" \
  </dev/null >>"$LAB/log/forward.log" 2>&1 &
for _ in $(seq 50); do [ -s "$LAB/run/forward.pid" ] && break; sleep 0.1; done
[ -s "$LAB/run/forward.pid" ] || { cat "$LAB/log/forward.log" >&2; die "forwarder did not start"; }

# ---------------------------------------------------------------- MariaDB: a private mysqld inside the controller's namespace
chmod 700 "$LAB/db"
mariadb-install-db --no-defaults --datadir="$LAB/db/data" --user=root --auth-root-authentication-method=socket \
  --skip-test-db --skip-name-resolve >"$LAB/log/mariadb-install.log" 2>&1 \
  || { tail -20 "$LAB/log/mariadb-install.log" >&2; die "mariadb-install-db failed"; }
# innodb_* as slurmdbd asks for them; no binary log; no fsync per commit (throwaway data)
setsid ip netns exec "$CTL_NS" mariadbd --no-defaults --user=root --datadir="$LAB/db/data" --socket="$DB_SOCK" \
  --bind-address=127.0.0.1 --port=3306 --pid-file="$LAB/run/mariadbd.pid" --log-error="$LAB/log/mariadbd.log" \
  --skip-name-resolve --skip-log-bin --innodb-buffer-pool-size=64M --innodb-log-file-size=64M \
  --innodb-lock-wait-timeout=900 --innodb-flush-log-at-trx-commit=0 --innodb-doublewrite=0 \
  </dev/null >/dev/null 2>&1 &
for _ in $(seq 300); do
  [ -S "$DB_SOCK" ] && mariadb --no-defaults --socket="$DB_SOCK" -e 'select 1' >/dev/null 2>&1 && break; sleep 0.1
done
DB_PASS=$(head -c 18 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')
mariadb --no-defaults --socket="$DB_SOCK" \
  -e "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASS'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" \
  || { tail -20 "$LAB/log/mariadbd.log" >&2; die "MariaDB not up"; }
log "mariadbd up (127.0.0.1:3306 inside $CTL_NS)"

# ---------------------------------------------------------------- config
HOST=$(hostname -s)
GRES_NODE=""; GRES_TYPES=""
if [ "$GPUS" -gt 0 ]; then
  # gres/gpu drops File-less GPUs ("Removing file-less GPU"), and File= must be a char/block
  # device: symlinks to /dev/null pass that check without mknod or real GPUs.
  for g in $(seq 0 $((GPUS - 1))); do ln -sfn /dev/null "$LAB/dev/nvidia$g"; done
  # AccountingStorageTRES: Slurm's accounting records GPUs (sacct's AllocTRES gres/gpu=N) only
  # when told to, as a GPU cluster's slurm.conf does; `status --run` reads GPU-hours from it
  GRES_TYPES="GresTypes=gpu
AccountingStorageTRES=gres/gpu"
  GRES_NODE="Gres=gpu:${GPU_TYPE:+$GPU_TYPE:}$GPUS"
  cat > "$LAB/etc/gres.conf" <<EOF
AutoDetect=off
NodeName=node[1-$NODES] Name=gpu ${GPU_TYPE:+Type=$GPU_TYPE }File=$LAB/dev/nvidia[0-$((GPUS - 1))]
EOF
else
  rm -f "$LAB/etc/gres.conf"
fi
: > "$LAB/etc/plugstack.conf"                   # keep /etc/slurm/plugstack.conf out of the picture
(umask 077; cat > "$LAB/etc/slurmdbd.conf" <<EOF
# generated by tests/slurm/testbed.sh
AuthType=auth/munge
AuthInfo=socket=$MSOCK
DbdHost=$HOST
DbdPort=$DBD_PORT
SlurmUser=root
PidFile=$LAB/run/slurmdbd.pid
LogFile=$LAB/log/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3306
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
EOF
)
SOCKETS=1; [ $((CPUS % 2)) -eq 0 ] && [ "$CPUS" -ge 2 ] && SOCKETS=2
# Why each non-default line is here:
#   SlurmctldHost/AccountingStorageHost 127.0.0.1: the forwarder on this machine, the daemons
#     themselves inside the controller's namespace; the nodes' copy (slurm-nodes.conf) says $CTL_ADDR
#   SlurmdParameters=config_overrides + Sockets/CoresPerSocket: fake CPUs/memory, else DRAIN+INVALID_REG
#   EnforcePartLimits=ALL: an impossible -N5 on 4 nodes is refused at submit instead of pending forever
#   batch_sched_delay=0: batch jobs start at once (the default 3 s delay dominates test time)
#   MinJobAge=3600: finished jobs stay visible to squeue/scontrol too (what a site without sacct reads);
#     SLURMLAB_MIN_JOB_AGE=2 makes slurmctld forget them soon (then only sacct knows them)
#   KillWait=5: cancelled/preempted jobs get SIGKILL 5 s after SIGTERM
#   UnkillableStepTimeout=180: a step whose processes outlive their SIGKILL this long drains the node
#     ("Kill task failed"); Slurm's default, 60 s, can pass on a loaded test machine while a node that
#     was cut off ends the steps it still ran, and the drain then stops the next test's jobs
#   jobacct_gather/linux + OverMemoryKill, sampled every 1 s: a job past its --mem is killed by
#     slurmstepd (no cgroups here), never by the machine's global OOM killer.  Slurm enforces
#     --mem only with memory a consumable resource (CR_Core_Memory); DefMemPerCPU = node memory
#     per CPU keeps a job without --mem from holding more than its CPUs' share
#   accounting_storage/slurmdbd, no AccountingStorageEnforce: jobs need no user association;
#     AccountingStoragePass names the munge socket for connections to slurmdbd (AuthInfo is not
#     used for those: without it sacct/sacctmgr look for munged's default socket)
#   AccountingStoreFlags=job_comment: sacct shows a job's --comment, the run tag clusterkit groups a
#     run's jobs by (`status --run`), as a site that wants it does
#   Preempt*: a job in partition `high` (PriorityTier=2) preempts `debug` jobs (PriorityTier=1) on
#     the same nodes: their running steps get SIGTERM at once, the batch shell nothing; after
#     GraceTime the job is cancelled "DUE TO PREEMPTION" (now the batch shell gets TERM) and
#     requeued.  GraceTime is short so preemption tests do not wait a minute.
{
cat <<EOF
# generated by tests/slurm/testbed.sh
ClusterName=testbed
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=6818
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
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
AccountingStoragePass=$MSOCK
AccountingStoreFlags=job_comment
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
UnkillableStepTimeout=180
MinJobAge=$MIN_JOB_AGE
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
SlurmctldDebug=info
SlurmdDebug=info
$GRES_TYPES
EOF
for i in $(seq 1 "$NODES"); do
  echo "NodeName=node$i NodeHostname=node$i NodeAddr=$NET.$i CPUs=$CPUS Sockets=$SOCKETS" \
       "CoresPerSocket=$((CPUS / SOCKETS)) ThreadsPerCore=1 RealMemory=$MEM $GRES_NODE State=UNKNOWN"
done
cat <<EOF
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=$GRACE
PartitionName=high Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF
EOF
} > "$CONF"
sed -e "s/^SlurmctldHost=.*/SlurmctldHost=$HOST($CTL_ADDR)/" -e "s/^AccountingStorageHost=.*/AccountingStorageHost=$CTL_ADDR/" \
  "$CONF" > "$NODE_CONF"
# /etc/hosts copy with the node names, bind-mounted only inside the nodes' mount namespaces
{ grep -v ' node[0-9]' /etc/hosts || true
  for i in $(seq 1 "$NODES"); do echo "$NET.$i node$i"; done; } > "$LAB/etc/hosts"

# ---------------------------------------------------------------- slurmdbd, the cluster's registration, slurmctld
ip netns exec "$CTL_NS" slurmdbd
# the forwarder listens here only once slurmdbd listens there
for _ in $(seq 100); do ss -Hltn "sport = :$DBD_PORT" | grep -q . && break; sleep 0.1; done
sacctmgr -i add cluster testbed >/dev/null || { tail -20 "$LAB/log/slurmdbd.log" >&2; die "slurmdbd: cannot register the cluster"; }
log "slurmdbd up on port $DBD_PORT, cluster registered"
start_ctld
log "slurmctld up on port $PORT"

# ---------------------------------------------------------------- slurmd per fake node
for i in $(seq 1 "$NODES"); do start_slurmd "$i"; done

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
# Each step prints its node's hostname and the address that name has there.
# shellcheck disable=SC2016  # expanded by the job's shell, on the node
wj=$(sbatch --parsable -N "$NODES" --ntasks-per-node=1 -J warmup -o "$LAB/run/warmup-%j.out" \
       --wrap 'srun sh -c "echo \$(hostname)=\$(getent hosts \$(hostname) | cut -d\" \" -f1)"') \
  || die "sbatch of warm-up job failed"
while squeue -h -j "$wj" -t PD,R,CG,CF 2>/dev/null | grep -q .; do
  [ "$(date +%s)" -ge "$deadline" ] && die "warm-up job $wj did not finish"; sleep 0.1
done
scontrol show job "$wj" | grep -q 'JobState=COMPLETED' || { cat "$LAB/run/warmup-$wj.out" >&2; die "warm-up job $wj failed"; }
log "warm-up job $wj ran on: $(sort "$LAB/run/warmup-$wj.out" | tr '\n' ' ')"

setsid bash "$HERE/testbed.sh" --supervise </dev/null >>"$LAB/log/supervise.log" 2>&1 &
for _ in $(seq 50); do [ -s "$LAB/run/supervise.pid" ] && break; sleep 0.1; done
[ -s "$LAB/run/supervise.pid" ] || die "supervisor did not start"
log "supervisor up: a dead slurmctld/slurmdbd/slurmd is restarted and logged in $LAB/log/supervise.log"

trap - EXIT
{
  echo "export SLURM_CONF=$CONF"
  # shellcheck disable=SC2016  # $PATH: expanded by whoever sources the file
  if [ -n "$SLURM_PREFIX" ]; then echo "export PATH=$SLURM_PREFIX/bin:$SLURM_PREFIX/sbin:"'$PATH'; fi
  echo "export SLURMLAB_NETNS_CTL=$CTL_NS"
  for i in $(seq 1 "$NODES"); do
    echo "export SLURMLAB_NETNS_node$i=$(node_ns "$i") SLURMLAB_IF_node$i=eth0 SLURMLAB_ADDR_node$i=$NET.$i${CG_ROOT:+ SLURMLAB_CGROUP_node$i=$CG_ROOT/node$i}"
  done
} > "$LAB/testbed.env"
sinfo -N -o '%N %T %c %m %G' >&2
cat "$LAB/testbed.env"
