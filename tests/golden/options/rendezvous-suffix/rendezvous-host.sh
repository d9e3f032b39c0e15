#!/bin/bash
# clusterkit: the rendezvous host of the head node named in $1, on stdout, by the site's
# network.rendezvous_host (suffix: i).  The job script runs it once the
# hosts are known; the job's supervisor again when a relaunch has another head.
set -uo pipefail
ck_node=${1:?usage: rendezvous-host.sh HEAD_NODE}
# the head's name on the site's other network: the node's name and i
printf '%s\n' "$ck_node"i
