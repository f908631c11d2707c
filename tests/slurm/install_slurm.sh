#!/usr/bin/env bash
# Install Debian's SLURM (slurm-wlm: slurmctld, slurmd, client commands) and
# munge when any of their commands is missing. Root only; uses apt-get.
# Does not start or enable any system service (start_cluster.sh starts private
# daemons).
set -euo pipefail
missing=0
for cmd in munged slurmctld slurmd sbatch squeue sinfo scontrol; do
    command -v "$cmd" > /dev/null || missing=1
done
[[ $missing -eq 0 ]] && exit 0
[[ $(id -u) -eq 0 ]] || { echo "install_slurm.sh: needs root to apt-get install slurm-wlm munge" >&2; exit 1; }
command -v apt-get > /dev/null || { echo "install_slurm.sh: apt-get not found (not a Debian/Ubuntu machine)" >&2; exit 1; }
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d 101: packages must not try to start their services here.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 755 "$policy" && created_policy=1
fi
trap '[[ $created_policy -eq 1 ]] && rm -f "$policy"' EXIT
apt-get update -qq
apt-get install -y -qq --no-install-recommends slurm-wlm munge > /dev/null
