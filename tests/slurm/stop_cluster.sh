#!/usr/bin/env bash
# Stop the test cluster started by start_cluster.sh STATE_DIR.
#
#   tests/slurm/stop_cluster.sh STATE_DIR
#
# Cancels the jobs still known to that cluster (so no slurmstepd outlives it),
# then stops exactly the daemons whose PIDs start_cluster.sh recorded in
# STATE_DIR/pids (TERM, then KILL after 10 s), slurmd first and munged last, and
# removes the configuration links it made in /run/slurm/conf.
# Other SLURM or munge daemons on the machine are never touched.
set -uo pipefail

[[ $# -eq 1 ]] || { echo "usage: $0 STATE_DIR" >&2; exit 1; }
state=$(cd "$1" 2> /dev/null && pwd) || { echo "stop_cluster.sh: no such folder $1" >&2; exit 1; }
export SLURM_CONF=$state/slurm.conf

alive() { [[ -s $state/pids/$1 ]] && kill -0 "$(cat "$state/pids/$1")" 2> /dev/null; }

if alive slurmctld; then
    # Every job on this private cluster belongs to the test run.
    scancel --quiet --user="$(id -un)" 2> /dev/null || true
    for _ in $(seq 50); do
        [[ -z $(squeue -h -t RUNNING,COMPLETING -o %i 2> /dev/null) ]] && break
        sleep 0.2
    done
fi

for pidfile in "$state"/pids/slurmd* "$state/pids/slurmctld" "$state/pids/munged"; do
    daemon=$(basename "$pidfile")
    [[ -s $pidfile ]] || continue
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2> /dev/null; then
        kill -TERM "$pid" 2> /dev/null || true
        for _ in $(seq 100); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
        if kill -0 "$pid" 2> /dev/null; then
            echo "stop_cluster.sh: $daemon ($pid) ignored TERM; sending KILL" >&2
            kill -KILL "$pid" 2> /dev/null || true
        fi
    fi
    rm -f "$pidfile"
done

# The configuration links start_cluster.sh made in /run/slurm/conf (only if they point here).
if [[ -s $state/run_conf ]]; then
    run_conf=$(cat "$state/run_conf")
    if [[ $(readlink "$run_conf/slurm.conf" 2> /dev/null) == "$state/slurm.conf" ]]; then
        rm -f "$run_conf/slurm.conf" "$run_conf/gres.conf"
        rmdir "$run_conf" 2> /dev/null || true
        rmdir "$(dirname "$run_conf")" 2> /dev/null || true
    fi
    rm -f "$state/run_conf"
fi
