#!/usr/bin/env bash
# Start a SLURM cluster of one or more nodes on localhost for the workflow tests
# (several nodes: one slurmd per node, all on this host).
#
#   tests/slurm/start_cluster.sh STATE_DIR
#
# Writes STATE_DIR/slurm.conf and gres.conf from the templates beside this
# script, a private munge key and socket, and placeholder GPU device files;
# starts munged, slurmctld and slurmd in the foreground as background jobs of
# this script, records their PIDs in STATE_DIR/pids/{munged,slurmctld,slurmd-NODE}
# (stop_cluster.sh stops exactly those) and waits until the node is idle.
# Nothing under /etc is touched; the configuration is linked from
# /run/slurm/conf/ (where clients inside jobs look for it, see below), and
# clients outside jobs may also use
#
#   export SLURM_CONF=STATE_DIR/slurm.conf
#
# which the script prints last. Must run as root (slurmd starts jobs as any user).
# Exit status: 0 running, 1 failed (daemons started so far are stopped again),
# 2 this machine already has a SLURM configuration the test cluster would clash with.
# Settings (environment, all optional):
#   CLMDETOUR_TEST_PARTITION  partition name (default: gpu); it is not the
#                             default partition, so jobs must name it
#   CLMDETOUR_TEST_NODES      nodes (default: 1); the first is named after this host
#                             (`hostname -s`, which resolves, so it can be a rendezvous
#                             master), the others HOST-2, HOST-3 ...
#   CLMDETOUR_TEST_GPUS       placeholder GPUs per node (default: 4)
#   CLMDETOUR_TEST_GPU_TYPE   GRES type of those GPUs (default: h100)
#   CLMDETOUR_TEST_CPUS       CPUs declared per node (default: nproc)
#   CLMDETOUR_TEST_MEM_MB     memory declared per node, MB (default: 90 % of MemTotal)
#   CLMDETOUR_TEST_CTLD_PORT, CLMDETOUR_TEST_SLURMD_PORT  TCP ports (default: 6817, 6818);
#                             node k's slurmd listens on SLURMD_PORT + k - 1
set -euo pipefail

die() { echo "start_cluster.sh: $*" >&2; [[ -n ${state:-} && -d ${state:-}/pids ]] && "$here/stop_cluster.sh" "$state"; exit 1; }
# Exit status 2: this machine already has a SLURM set-up the test cluster would clash with.
conflict() { echo "start_cluster.sh: $*" >&2; exit 2; }

[[ $# -eq 1 ]] || die "usage: $0 STATE_DIR"
[[ $(id -u) -eq 0 ]] || die "must run as root (slurmd runs jobs as their owner)"
# Debian installs the daemons in /usr/sbin, which a non-login root shell (env -i, some CI runners)
# may not have on PATH.
export PATH="$PATH:/usr/sbin:/sbin"
for cmd in munged slurmctld slurmd sinfo scontrol; do
    command -v "$cmd" > /dev/null || die "$cmd not found; install Debian's slurm-wlm and munge (tests/slurm/install_slurm.sh)"
done

here=$(cd "$(dirname "$0")" && pwd)
state=$(mkdir -p "$1" && cd "$1" && pwd)
partition=${CLMDETOUR_TEST_PARTITION:-gpu}
gpus=${CLMDETOUR_TEST_GPUS:-4}
gpu_type=${CLMDETOUR_TEST_GPU_TYPE:-h100}
cpus=${CLMDETOUR_TEST_CPUS:-$(nproc)}
mem_mb=${CLMDETOUR_TEST_MEM_MB:-$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)}
ctld_port=${CLMDETOUR_TEST_CTLD_PORT:-6817}
slurmd_port=${CLMDETOUR_TEST_SLURMD_PORT:-6818}
nodes=${CLMDETOUR_TEST_NODES:-1}
host=$(hostname -s)
[[ $gpus -ge 1 ]] || die "CLMDETOUR_TEST_GPUS must be >= 1, got $gpus"
[[ $nodes -ge 1 ]] || die "CLMDETOUR_TEST_NODES must be >= 1, got $nodes"
node_names=("$host")
for ((k = 2; k <= nodes; k++)); do node_names+=("$host-$k"); done

# Client commands inside jobs must find the configuration at a default location, as on a
# real cluster: the plugin's job step removes SLURM_* variables (SLURM_CONF too) before
# its inner srun. The default locations are /etc/slurm/slurm.conf and, when that is
# absent, /run/slurm/conf/slurm.conf (where a "configless" slurmd keeps its copy). The
# test cluster links its files there (tmpfs; stop_cluster.sh removes them), so a machine
# that already has either belongs to another SLURM installation.
run_conf=/run/slurm/conf
# A test cluster cut off before stop_cluster.sh ran (a CI job killed, a machine restarted) leaves its links here,
# dangling once its state folder is gone: those are this script's own, and removed with a line; anything else
# belongs to another installation and is refused below.
if [[ -d $run_conf && ! -L $run_conf ]]; then
    stale=1
    for f in "$run_conf"/*; do
        [[ -L $f && ! -e $f && $(basename "$f") =~ ^(slurm|gres)\.conf$ ]] || { stale=0; break; }
    done
    if [[ $stale -eq 1 ]]; then
        echo "start_cluster.sh: $run_conf held only dangling links of a test cluster stopped without stop_cluster.sh ($(readlink "$run_conf/slurm.conf" || true)); removed" >&2
        rm -f "$run_conf/slurm.conf" "$run_conf/gres.conf"
        rmdir "$run_conf"
    fi
fi
[[ -e /etc/slurm/slurm.conf ]] && conflict "/etc/slurm/slurm.conf exists: jobs of the test cluster would read that cluster's configuration; run the test on a machine (or container) without a SLURM configuration"
[[ -e $run_conf || -L $run_conf ]] && conflict "$run_conf exists (a configless slurmd, or a test cluster still running); stop it first"

if [[ -d $state/pids ]] && compgen -G "$state/pids/*" > /dev/null; then
    die "$state/pids exists: a cluster may still run there; stop it first (tests/slurm/stop_cluster.sh $state)"
fi
mkdir -p "$state"/{munge,slurmctld,log,dev,pids}
for node in "${node_names[@]}"; do mkdir -p "$state/slurmd/$node"; done
# munged requires the socket's folders to be searchable by every user.
chmod 755 "$state" "$state/munge"
# From here on, a failure stops whatever this script already started.
trap 'echo "start_cluster.sh: failed; stopping the daemons started so far" >&2; "$here/stop_cluster.sh" "$state"' ERR

# Placeholder GPU "devices" (empty files) named by gres.conf.
for ((i = 0; i < gpus; i++)); do : > "$state/dev/fakegpu$i"; done

# A private munge key and socket: no system munged is needed or touched.
if [[ ! -s $state/munge/munge.key ]]; then
    head -c 1024 /dev/urandom > "$state/munge/munge.key"
fi
chmod 400 "$state/munge/munge.key"

fill() {  # template node
    sed -e "s|@HOST@|$host|g" -e "s|@NODE@|$2|g" -e "s|@STATE@|$state|g" \
        -e "s|@CTLD_PORT@|$ctld_port|g" \
        -e "s|@CPUS@|$cpus|g" -e "s|@MEM_MB@|$mem_mb|g" -e "s|@GPUS@|$gpus|g" \
        -e "s|@LAST_GPU@|$((gpus - 1))|g" -e "s|@GPU_TYPE@|$gpu_type|g" \
        -e "s|@PARTITION@|$partition|g" "$1"
}
{
    fill "$here/slurm.conf.in" "$host"
    for k in "${!node_names[@]}"; do
        echo "NodeName=${node_names[$k]} NodeAddr=127.0.0.1 NodeHostname=$host Port=$((slurmd_port + k))" \
             "CPUs=$cpus RealMemory=$mem_mb Gres=gpu:$gpu_type:$gpus State=UNKNOWN"
    done
    echo "PartitionName=$partition Nodes=$(IFS=,; echo "${node_names[*]}") Default=NO MaxTime=INFINITE State=UP"
} > "$state/slurm.conf"
: > "$state/gres.conf"
for node in "${node_names[@]}"; do fill "$here/gres.conf.in" "$node" >> "$state/gres.conf"; done
export SLURM_CONF=$state/slurm.conf
mkdir -p "$run_conf"
ln -s "$state/slurm.conf" "$run_conf/slurm.conf"
ln -s "$state/gres.conf" "$run_conf/gres.conf"
echo "$run_conf" > "$state/run_conf"

# Daemons run in the foreground (-F / -D) as children of this script, so $! is
# their real PID; their output goes to files so this script can return.
# --force: run although a folder above STATE_DIR is not searchable by all users
# (e.g. pytest's 0700 temporary folders); the jobs here run as root.
munged -F --force --key-file="$state/munge/munge.key" --socket="$state/munge/munge.socket" \
    --pid-file="$state/munge/munged.pid" --log-file="$state/log/munged.log" \
    --seed-file="$state/munge/munge.seed" > "$state/log/munged.out" 2>&1 &
echo $! > "$state/pids/munged"
for _ in $(seq 50); do [[ -S $state/munge/munge.socket ]] && break; sleep 0.1; done
[[ -S $state/munge/munge.socket ]] || die "munged did not start; see $state/log/munged.log"

slurmctld -D -c -f "$state/slurm.conf" > "$state/log/slurmctld.out" 2>&1 &
echo $! > "$state/pids/slurmctld"
for _ in $(seq 100); do scontrol ping 2> /dev/null | grep -q UP && break; sleep 0.2; done
scontrol ping | grep -q UP || die "slurmctld did not start; see $state/log/slurmctld.log"

for node in "${node_names[@]}"; do
    slurmd -D -f "$state/slurm.conf" -N "$node" > "$state/log/slurmd-$node.out" 2>&1 &
    echo $! > "$state/pids/slurmd-$node"
done

for node in "${node_names[@]}"; do
    node_state=unknown
    for _ in $(seq 150); do
        node_state=$(sinfo -h -N -n "$node" -o %T 2> /dev/null || true)
        [[ $node_state == idle ]] && break
        sleep 0.2
    done
    if [[ $node_state != idle ]]; then
        scontrol show node "$node" >&2 || true
        die "node $node is '$node_state', not idle; see $state/log/slurmd.$node.log and slurmctld.log"
    fi
done
echo "export SLURM_CONF=$state/slurm.conf"
