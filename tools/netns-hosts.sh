#!/bin/sh
# Separate "hosts" on one machine for multi-host tests: network namespaces,
# each with its own network stack, joined through a bridge, so that MPI
# runs over real TCP between separate addresses instead of shared memory.
#
#   tools/netns-hosts.sh check            exit 0 where namespaces can be made; else 77 and why
#   tools/netns-hosts.sh up N [RATE]      hosts 1..N (N <= 8); RATE (e.g. 1gbit, 100mbit) limits
#                                         each host's sending (tbf); DELAY=1ms in the environment
#                                         adds latency each way where the kernel has netem
#   tools/netns-hosts.sh down             removes everything up made (also after a crash)
#   tools/netns-hosts.sh agent ADDR CMD   runs CMD in the namespace of ADDR: the launch agent
#                                         mpirun calls instead of ssh (plm_rsh_agent)
#   tools/netns-hosts.sh link I up|down   host I's link to the bridge
#   tools/netns-hosts.sh mpirun N ARGS    mpirun over hosts 1..N, one rank each, TCP only
#   tools/netns-hosts.sh bytes I          bytes host I has sent and received: "tx rx"
#
# Names and addresses come from the environment, so that concurrent tests
# do not meet: AR_NETNS (default "ar": namespaces arh1.., and arh0 where
# mpirun runs; bridge arbr, veths arh1v/arh1p; the "h" keeps one prefix's
# hosts apart from a longer prefix's) and AR_NETNS_NET (default 10.87.0:
# host i is NET.(10+i), mpirun's namespace NET.10).  Root (CAP_NET_ADMIN)
# is needed.
#
# Each host, and mpirun's namespace, gets a temporary directory of its own
# (TMPDIR, where Open MPI makes its session directory), as separate hosts
# would: the namespaces share one /tmp and one host name, and every
# daemon of a job creating and removing its part of one session tree at
# once has failed a launch ("mkdir ... File exists", in about one launch
# of 30).
set -eu
P=${AR_NETNS:-ar}
NET=${AR_NETNS_NET:-10.87.0}
BR=${P}br
self=$(readlink -f "$0")
# the temporary directories' parent: the caller's, also for the agent,
# whose TMPDIR mpirun's namespace set
TMPBASE=${AR_NETNS_TMP:-${TMPDIR:-/tmp}}

die() {
    echo "netns-hosts.sh: $*" >&2
    exit 1
}

hosts() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${P}h[0-9]+\$" || true; }

down() {
    for ns in $(hosts); do
        # processes left in a namespace (an orted cut off from its mpirun
        # waits forever) go with it
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
        ip link del "${ns}p" 2>/dev/null || true
        rm -rf "$TMPBASE/$ns.tmp"
    done
    ip link del "$BR" 2>/dev/null || true
}

case "${1:-}" in
check)
    if [ "$(id -u)" != 0 ]; then
        echo "not root: network namespaces need CAP_NET_ADMIN"
        exit 77
    fi
    t=${P}c # interface names have at most 15 characters
    if ! ip netns add "$t" 2>/dev/null; then
        echo "cannot make a network namespace here"
        exit 77
    fi
    ok=1
    ip link add "${t}b" type bridge 2>/dev/null || ok=0
    ip link del "${t}b" 2>/dev/null || true
    ip link add "${t}v" type veth peer name "${t}p" 2>/dev/null || ok=0
    ip link del "${t}v" 2>/dev/null || true
    ip netns del "$t"
    [ $ok = 1 ] || { echo "the kernel makes no bridges or veth pairs"; exit 77; }
    ;;
up)
    n=${2:?usage: up N [RATE]}
    rate=${3:-}
    [ "$n" -ge 1 ] && [ "$n" -le 8 ] || die "up: between 1 and 8 hosts, not '$n'"
    down
    trap 'down' EXIT
    ip link add "$BR" type bridge
    ip link set "$BR" up
    i=0
    while [ "$i" -le "$n" ]; do
        ns=${P}h$i
        ip netns add "$ns"
        ip link add "${ns}p" type veth peer name "${ns}v"
        ip link set "${ns}p" master "$BR" up
        ip link set "${ns}v" netns "$ns"
        ip -n "$ns" addr add "$NET.$((10 + i))/24" dev "${ns}v"
        ip -n "$ns" link set "${ns}v" up
        ip -n "$ns" link set lo up
        # where mpirun runs, TCP gives up on a silent host after seconds
        # instead of about 15 minutes (tcp_retries2 15), so mpirun learns
        # that a host is lost; the hosts keep the default, and ride out a
        # short partition
        [ "$i" -gt 0 ] || ip netns exec "$ns" sysctl -q -w net.ipv4.tcp_retries2=4
        if [ -n "$rate" ] && [ "$i" -gt 0 ]; then
            # tbf shapes what the host sends; the bridge side shapes what it receives
            ip netns exec "$ns" tc qdisc add dev "${ns}v" root tbf rate "$rate" burst 256kb latency 500ms
            tc qdisc add dev "${ns}p" root tbf rate "$rate" burst 256kb latency 500ms
        fi
        if [ -n "${DELAY:-}" ] && [ "$i" -gt 0 ]; then
            ip netns exec "$ns" tc qdisc add dev "${ns}v" root netem delay "$DELAY" 2>/dev/null ||
                die "up: DELAY needs netem, which this kernel does not have (sch_netem)"
        fi
        i=$((i + 1))
    done
    # links come up asynchronously: wait (up to 5 s) until every one carries
    i=0
    while [ "$i" -le "$n" ]; do
        k=0
        while [ "$(ip netns exec "${P}h$i" cat "/sys/class/net/${P}h${i}v/operstate")" != up ] ||
            [ "$(cat "/sys/class/net/${P}h${i}p/operstate")" != up ]; do
            k=$((k + 1))
            [ "$k" -le 50 ] || die "up: host $i's link did not come up"
            sleep 0.1
        done
        i=$((i + 1))
    done
    trap - EXIT
    ;;
down)
    down
    ;;
agent)
    addr=${2:?usage: agent ADDR CMD...}
    shift 2
    i=$(echo "$addr" | sed -n "s/^$(echo "$NET" | sed 's/\./\\./g')\.\([0-9]*\)\$/\1/p")
    [ -n "$i" ] && [ "$i" -ge 11 ] || die "agent: '$addr' is not a host of $NET.0/24"
    ns=${P}h$((i - 10))
    mkdir -p "$TMPBASE/$ns.tmp"
    TMPDIR=$TMPBASE/$ns.tmp exec ip netns exec "$ns" sh -c "$*"
    ;;
link)
    ip -n "${P}h${2:?usage: link I up|down}" link set "${P}h${2}v" "${3:?usage: link I up|down}"
    ;;
bytes)
    ns=${P}h${2:?usage: bytes I}
    tx=$(ip netns exec "$ns" cat "/sys/class/net/${ns}v/statistics/tx_bytes")
    rx=$(ip netns exec "$ns" cat "/sys/class/net/${ns}v/statistics/rx_bytes")
    echo "$tx $rx"
    ;;
mpirun)
    n=${2:?usage: mpirun N ARGS...}
    shift 2
    hl=
    i=1
    while [ "$i" -le "$n" ]; do
        hl="$hl${hl:+,}$NET.$((10 + i)):1"
        i=$((i + 1))
    done
    # the agent, started by mpirun, finds the namespaces by these
    export AR_NETNS="$P" AR_NETNS_NET="$NET" AR_NETNS_TMP="$TMPBASE"
    mkdir -p "$TMPBASE/${P}h0.tmp"
    # rtc_hwloc_vmhole none: every host's orted shares this machine's
    # /dev/shm, and Open MPI 4.1's shared-memory topology
    # (hwloc_shmem_topology_write) then segfaulted in about one launch of 20
    TMPDIR=$TMPBASE/${P}h0.tmp exec ip netns exec "${P}h0" mpirun -np "$n" --host "$hl" --mca plm_rsh_agent "$self agent" \
        --mca rtc_hwloc_vmhole none \
        --mca oob_tcp_if_include "$NET.0/24" --mca btl tcp,self --mca btl_tcp_if_include "$NET.0/24" "$@"
    ;;
*)
    sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
