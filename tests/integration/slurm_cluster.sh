#!/usr/bin/env bash
# A single-node Slurm (slurm-wlm + munge) for testing the sweep's Slurm executor.
#
#   slurm_cluster.sh start    install the packages when missing (apt-get, as root), write
#                             /etc/slurm/slurm.conf, start munged, slurmctld and slurmd, and
#                             wait until the node is idle
#   slurm_cluster.sh stop     stop the daemons this script started, by their PIDs
#   slurm_cluster.sh status   exit 0 when the cluster answers (sinfo), else 1
#
# The configuration is ../shared/reference/slurm/slurm.conf.template relative to the
# repository (its README tells how it was made), else the copy beside this script; @HOST@ is
# replaced with `hostname -s` and @CPUS@ with the CPUs this process may use (`nproc`, without
# the OpenMP variables that it would otherwise report instead).  Exit status: 0 done, 1 a daemon did not
# start (its log is named), 3 cannot start here (not root, or apt-get failed); the reason is
# the last line of standard error.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
state=${SLURM_CLUSTER_STATE:-/run/fairseq-entropy-slurm}   # PIDs of the daemons started here
conf=/etc/slurm/slurm.conf

die() { echo "slurm_cluster: $2" >&2; exit "$1"; }

install_packages() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null \
        && command -v munged >/dev/null && return 0
    [ "$(id -u)" = 0 ] || die 3 "slurm-wlm or munge is missing and this is not root: cannot install them"
    command -v apt-get >/dev/null || die 3 "slurm-wlm or munge is missing and there is no apt-get"
    # keep the packages' scripts from starting the services (started by hand below)
    local policy=/usr/sbin/policy-rc.d made=0
    if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod +x "$policy"; made=1; fi
    local rc=0
    { DEBIAN_FRONTEND=noninteractive apt-get update -q \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
           slurm-wlm munge; } >&2 || rc=$?
    [ "$made" = 1 ] && rm -f "$policy"
    [ "$rc" = 0 ] || die 3 "apt-get install slurm-wlm munge failed (exit $rc)"
}

write_conf() {
    local template="$repo/../shared/reference/slurm/slurm.conf.template"
    [ -f "$template" ] || template="$here/slurm.conf.template"
    mkdir -p /etc/slurm
    local cpus
    cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
    sed -e "s/@HOST@/$(hostname -s)/g" -e "s/@CPUS@/$cpus/g" "$template" > "$conf.tmp"
    mv "$conf.tmp" "$conf"
}

alive() { [ -f "$state/$1.pid" ] && kill -0 "$(cat "$state/$1.pid")" 2>/dev/null; }

# start NAME PIDFILE COMMAND...: run a daemon that forks, and record its PID
start_daemon() {
    local name=$1 pidfile=$2; shift 2
    alive "$name" && return 0
    rm -f "$pidfile"
    "$@" || die 1 "$name did not start (exit $?); see its log"
    for _ in $(seq 50); do [ -s "$pidfile" ] && break; sleep 0.1; done
    [ -s "$pidfile" ] || die 1 "$name wrote no PID file $pidfile; see its log"
    cp "$pidfile" "$state/$name.pid"
}

start() {
    install_packages
    [ "$(id -u)" = 0 ] || die 3 "starting the Slurm daemons needs root"
    if sinfo -h >/dev/null 2>&1 && ! alive slurmctld; then
        echo "slurm_cluster: a Slurm controller not started by this script answers; using it" >&2
        return 0
    fi
    write_conf
    mkdir -p "$state" /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/slurm /run/munge
    chown slurm: /var/spool/slurmctld /var/log/slurm /run/slurm
    chown munge: /run/munge
    [ -s /etc/munge/munge.key ] || { runuser -u munge -- /usr/sbin/mungekey -c 2>/dev/null \
        || die 3 "no /etc/munge/munge.key and mungekey failed"; }
    # a munged already running (the system's) is used as it is
    if alive munged || ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
        start_daemon munged /run/munge/munged.pid runuser -u munge -- /usr/sbin/munged
    fi
    # -c: an empty queue, not the jobs an earlier controller left in its saved state (a test
    # run killed mid-way leaves its job array there, and it would hold the node's CPUs)
    start_daemon slurmctld /run/slurm/slurmctld.pid /usr/sbin/slurmctld -c
    start_daemon slurmd /run/slurm/slurmd.pid /usr/sbin/slurmd
    # the node is idle once slurmd registered with the controller
    for _ in $(seq 60); do
        if sinfo -h -o %t 2>/dev/null | grep -q idle; then
            echo "slurm_cluster: up: $(sinfo -h -o '%P %a %D %t %N')"; return 0
        fi
        # a node left DOWN by an earlier run of the controller
        scontrol update nodename="$(hostname -s)" state=resume >/dev/null 2>&1 || true
        sleep 0.5
    done
    die 1 "the node did not become idle: $(sinfo -h 2>&1 | head -1); see /var/log/slurm/"
}

stop() {
    local name pid
    for name in slurmd slurmctld munged; do
        alive "$name" || { rm -f "$state/$name.pid"; continue; }
        pid=$(cat "$state/$name.pid")
        kill "$pid"
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
        rm -f "$state/$name.pid"
    done
    echo "slurm_cluster: stopped"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) sinfo -h >/dev/null 2>&1 ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
