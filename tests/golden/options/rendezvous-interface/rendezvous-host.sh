#!/bin/bash
# clusterkit: the rendezvous host of the head node named in $1, on stdout, by the site's
# network.rendezvous_host (interface: ib0).  The job script runs it once the
# hosts are known; the job's supervisor again when a relaunch has another head.
set -uo pipefail
ck_node=${1:?usage: rendezvous-host.sh HEAD_NODE}
# the head's IPv4 address on ib0, read on that node (never on the submit host): here when the
# head is this node, else in a one-task step on it
if [ "$ck_node" = "${SLURMD_NODENAME:-}" ]; then
  ck_out=$(ip -o -4 addr show dev ib0)
else
  ck_out=$(srun --nodes=1 --ntasks=1 --nodelist="$ck_node" --kill-on-bad-exit=1 ip -o -4 addr show dev ib0)
fi || { echo "clusterkit: cannot read the addresses of ib0 on $ck_node (ip -o -4 addr show dev ib0 failed)" >&2; exit 1; }
# one line per address, the first taken: "4: ib0    inet 10.2.0.17/16 brd 10.2.255.255 scope global ib0\ ..."
read -r _ _ ck_family ck_addr _ <<< "${ck_out%%$'\n'*}"
ck_addr=${ck_addr%%/*}
if [ "${ck_family:-}" != inet ] || ! [[ $ck_addr =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}$ ]]; then
  echo "clusterkit: $ck_node has no IPv4 address on ib0 (network.rendezvous_host.interface)" >&2
  exit 1
fi
printf '%s\n' "$ck_addr"
