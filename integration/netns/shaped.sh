#!/usr/bin/env bash
# RPP on a shared bottleneck: a client and a server namespace joined through a router
# namespace whose link toward the server is shaped with a token bucket (`tc ... tbf`:
# 200 Mbit/s with a 10 ms queue, then 1 Gbit/s), `myri serve` in the server's namespace
# and the flows in the client's. Each line it prints is a benchmark with its ratios from
# the same run:
#
#   one RPP flow       goodput against TCP's over the same bottleneck (interleaved rounds,
#                      `myri stream --baseline`) and the share of RPP's data packets sent
#                      again (target: >= 0.95x TCP, <= 1% retransmitted)
#   two RPP flows      at once: each one's goodput against the other's and their
#                      retransmissions (target: within 20% of each other, <= 2%), and
#                      each one's persistent congestions and how many were undone;
#                      then two kernel TCP CUBIC flows for as long, the peer's split
#   RPP and TCP        started together, each measured over the RPP flow's time: each
#                      one's share of the link (target: >= 1/3 each), once with the TCP
#                      congestion control of the namespace and once with CUBIC when that
#                      is another; then the two TCPs together, the control
#
# Where the queue is matters. With ROUTER=0 the tbf is on the client's own device, as a
# bottleneck at the sending host: there TCP keeps at most about a millisecond of its rate
# in the local queue (TCP Small Queues) while a UDP sender has no such bound, so RPP
# holds most of that queue and TCP's share falls short of a third however fair the
# controllers; a queue in the network (the router) is where flows meet on equal terms.
#
# Usage: integration/netns/shaped.sh [PATH-TO-MYRI]   (default: $MYRI, else `myri`)
# Environment: CC=cubic|newreno|bbr|off (RPP's controller, default cubic), RATES="200mbit 1gbit",
# ROUTER=1|0 (the bottleneck at the router, the default, or at the sender's device),
# URL_EXTRA (more URL parameters for the RPP flows, e.g. "&pacing=0"), SERVER_ARGS (more `myri
# serve` options, e.g. "--spin 0"), KEEP=DIR (copy the runs' JSON there), TESTS (the
# benchmarks to run, default "one two tcp control"), TCP_CCS (the TCP controllers to put
# beside RPP, default the namespace's and cubic), TCP_MAX_RATE (MB/s: caps the TCP flows'
# rate with SO_MAX_PACING_RATE, to see whether RPP takes the room TCP leaves),
# SPLIT_CPUS=1 (the senders on CPU 0; the router's forwarding and the receivers on CPU 1,
# by RPS on their devices and taskset: on a two-core host at 1 Gbit/s the three
# namespaces' network work otherwise lands on the senders' cores, see RESULTS),
# LINK_MTU=9000 (jumbo frames on every link: a sixth of the packets for the same bytes),
# TCP_SECONDS (default 10: the seconds of the whole link the RPP flow beside TCP carries,
# so about twice that long at half the link; CUBIC at a 10 ms round trip takes seconds per
# loss epoch, and in four-second runs (TCP_SECONDS=2) two kernel TCP CUBIC flows split the
# link unevenly too: TCP_CCS="cubic cubic" runs that control), TWO_SECONDS (default 60:
# the seconds of the whole link each of the two RPP flows carries, so they run together
# about twice that long. At an overflow of the drop-tail queue the few packets dropped
# belong to one flow, and it alone reduces: the split is a random walk that overflows
# once a second or two even out slowly. The flow hit is the larger one in 54% of
# overflows here, between coin flips and a draw by window (60%). `lottery.py` models
# it: with that draw two such flows come within a fifth of each other in about three
# runs of five over 20 s and 29 of 30 over two minutes, however they start; measured,
# 28 of 30 two-minute runs at 1 Gbit/s, see RESULTS).
# Exit codes: 0 it ran (the targets are reported, not enforced: this is a benchmark);
# 1 a run failed; 2 the namespaces could not be made. Needs root, iproute2 and python3.
set -euo pipefail

MYRI=${1:-${MYRI:-myri}}
NAME=shaped
ROUTER=${ROUTER:-1}
if [[ $ROUTER == 1 ]]; then WHERE="the router"; else WHERE="the sender's own device"; fi
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || { say "python3 is not installed"; exit 2; }
CC=${CC:-cubic}
RATES=${RATES:-"200mbit 1gbit"}
TCP_PORT=7100
# The TCP references' congestion control: the namespace's default, and CUBIC beside it
# when that is another (RPP beside each, and the two TCPs beside each other).
TCP_DEFAULT=$(ip netns exec "$NS_CLIENT" sysctl -n net.ipv4.tcp_congestion_control)
TESTS=${TESTS:-"one two tcp control"}
TCP_MAX_RATE=${TCP_MAX_RATE:-0}
TCP_SECONDS=${TCP_SECONDS:-10}
TWO_SECONDS=${TWO_SECONDS:-60}
has() { [[ " $TESTS " == *" $1 "* ]]; }
if [[ -n ${TCP_CCS:-} ]]; then
    read -r -a TCP_CCS <<<"$TCP_CCS"
else
    TCP_CCS=("$TCP_DEFAULT")
    [[ $TCP_DEFAULT == cubic ]] || TCP_CCS+=(cubic)
fi
URL="udp://$SERVER_IP:$PORT?cc=$CC${URL_EXTRA:-}"
# Where the processes run: anywhere, or (SPLIT_CPUS=1) senders on CPU 0 and everything on
# the far side of the bottleneck on CPU 1.
PIN_SENDER=()
PIN_RECEIVER=()
if [[ ${SPLIT_CPUS:-0} == 1 ]]; then
    PIN_SENDER=(taskset -c 0)
    PIN_RECEIVER=(taskset -c 1)
    for ns in "$NS_ROUTER" "$NS_SERVER"; do
        for dev in $(ip -n "$ns" -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -vx lo); do
            ip netns exec "$ns" sh -c "echo 2 > /sys/class/net/$dev/queues/rx-0/rps_cpus" \
                || { say "RPS is not available on $dev"; exit 2; }
        done
    done
    SERVER_MYRI="$WORK/myri-on-cpu1"
    printf '#!/bin/sh\nexec taskset -c 1 %q "$@"\n' "$MYRI" >"$SERVER_MYRI"
    chmod +x "$SERVER_MYRI"
    CLIENT_MYRI=$MYRI
    MYRI=$SERVER_MYRI
fi
# shellcheck disable=SC2086
start_server ${SERVER_ARGS:-}
if [[ ${SPLIT_CPUS:-0} == 1 ]]; then MYRI=$CLIENT_MYRI; fi

# json FILE EXPR: evaluates a Python expression over the last JSON line with "test" (t)
# and the last "session" line (s) of FILE.
json() {
    python3 - "$1" "$2" <<'PY'
import json, sys
t = s = {}
for line in open(sys.argv[1]):
    try:
        v = json.loads(line)
    except ValueError:
        continue
    if "test" in v: t = v
    if v.get("event") == "session": s = v
r = (s.get("rpp") or {})
retrans = r.get("retransmitted", 0) / max(1, r.get("data_sent", 0))
print(eval(sys.argv[2]))
PY
}

# stream OUT COUNT ROUNDS [ARGS...]: an RPP stream of 64 KiB messages from the client's
# namespace to the server.
# sched_sample PID: "NOW RUN_NS WAIT_NS SLICES" for a process, from its
# /proc/PID/schedstat (zeros once it cannot be read): for `host_report`.
sched_sample() {
    echo "$(date +%s.%N) $(cat "/proc/$1/schedstat" 2>/dev/null || echo 0 0 0)"
}

stream() {
    local out=$1 count=$2 rounds=$3
    shift 3
    local rc=0 pid t0 sample
    ip netns exec "$NS_CLIENT" "${PIN_SENDER[@]}" "$MYRI" stream --transport "$URL" --size 65536 \
        --count "$count" --rounds "$rounds" --json "$@" >"$WORK/$out" 2>"$WORK/$out.err" &
    pid=$!
    t0=$(date +%s.%N)
    # The client's scheduling, for `host_report`: "START" and its `sched_sample` (the
    # process is the client itself: `ip netns exec` and `taskset` exec it), last read at
    # most 0.2 s before it exits.
    while kill -0 "$pid" 2>/dev/null; do
        sample=$(sched_sample "$pid")
        if [[ ${sample#* } != "0 0 0" ]]; then
            echo "$t0 $sample" >"$WORK/$out.sched"
        fi
        sleep 0.2
    done
    wait "$pid" || rc=$?
    if [[ $rc != 0 ]]; then
        cat "$WORK/$out" "$WORK/$out.err"
        fail "myri stream exited with $rc"
    fi
}

# A TCP flow with congestion control CC to PORT until it is stopped (SIGTERM): a sink in
# the server's namespace, a source in the client's that appends "TIME BYTES-SO-FAR" to
# LOG every 50 ms (TIME in seconds, the clock `date +%s.%N` reads). Runs in the
# background; its source's process id is in TCP_PID.
tcp_flow_start() {
    local cc=$1 port=$2 log=$3
    ip netns exec "$NS_SERVER" "${PIN_RECEIVER[@]}" python3 -c "
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('$SERVER_IP', $port)); s.listen(1); c, _ = s.accept()
while c.recv(1 << 20): pass
" &
    EXTRA_PIDS+=("$!")
    for _ in $(seq 100); do
        ip netns exec "$NS_SERVER" ss -ltn "sport = :$port" | grep -q LISTEN && break
        sleep 0.02
    done
    ip netns exec "$NS_CLIENT" "${PIN_SENDER[@]}" python3 -c "
import signal, socket, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
c = socket.socket()
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b'$cc')
c.connect(('$SERVER_IP', $port))
if $TCP_MAX_RATE: c.setsockopt(socket.SOL_SOCKET, 47, int($TCP_MAX_RATE * 1e6))  # SO_MAX_PACING_RATE
buf = bytes(1 << 16); sent = 0; last = 0.0
with open('$log', 'w', buffering=1) as log:
    log.write(f'{time.time():.6f} 0\\n')
    while True:
        c.sendall(buf); sent += len(buf)
        now = time.time()
        if now - last >= 0.05:
            log.write(f'{now:.6f} {sent}\\n'); last = now
" &
    TCP_PID=$!
    EXTRA_PIDS+=("$TCP_PID")
}

# What the host and the bottleneck did over a benchmark: `host_mark` before it, then
# `host_report` prints the share of CPU time left idle (two vCPUs running three
# namespaces' network stacks can be the bottleneck before the link is) and taken by the
# hypervisor (a virtual machine's stolen time stalls the flows: the losses then declared
# are mostly late packets, for TCP as for RPP), the tbf's drops, RPP's congestion events
# (from the JSON in OUT), the TCP segments sent again and TCP's reductions of its window
# (recoveries and timeouts, to compare with RPP's events), and how long `myri serve` and each
# client (OUT's `stream`) ran and waited for a CPU, so a reader can tell a flow held back
# by its controller from one that did not get the CPU to send or to acknowledge.
host_mark() {
    HOST_CPU0=$(head -n 1 /proc/stat)
    HOST_SERVER0=$(sched_sample "$SERVER_PID")
    HOST_DROPS0=$(tbf_drops)
    HOST_ELSEWHERE0=$(drops_elsewhere)
    HOST_TCP0=$(tcp_counters)
}
# tcp_counters: what the client's namespace's TCP did, as "RESENT RECOVERIES UNDONE
# TIMEOUTS": segments sent again, entries into fast recovery (each one reduction of the
# window, as RPP counts a congestion event), reductions undone, and retransmission
# timeouts. Read by name from /proc/net/snmp and /proc/net/netstat.
tcp_counters() {
    ip netns exec "$NS_CLIENT" python3 - <<'PY'
c = {}
for path in ("/proc/net/snmp", "/proc/net/netstat"):
    lines = [l.split() for l in open(path)]
    for head, vals in zip(lines[::2], lines[1::2]):
        c.update({f"{head[0]}{k}": int(v) for k, v in zip(head[1:], vals[1:])})
undone = sum(c.get(f"TcpExt:TCP{k}Undo", 0) for k in ("Full", "Partial", "DSACK", "Loss"))
recoveries = c.get("TcpExt:TCPSackRecovery", 0) + c.get("TcpExt:TCPRenoRecovery", 0)
print(c.get("Tcp:RetransSegs", 0), recoveries, undone, c.get("TcpExt:TCPTimeouts", 0))
PY
}
tbf_drops() {
    ip netns exec "$SHAPED_NS" tc -s qdisc show dev "$SHAPED_DEV" | grep -o 'dropped [0-9]*' | head -n 1 | awk '{print $2}'
}
# drops_elsewhere: packets lost on the host rather than at the bottleneck, as "BACKLOG
# RCVBUF SNDBUF": the per-CPU input backlogs every veth hands its packets to (all CPUs,
# /proc/net/softnet_stat), the server's UDP receive buffers and the client's send buffers.
drops_elsewhere() {
    local backlog udp_server udp_client
    backlog=$(python3 -c "print(sum(int(l.split()[1], 16) for l in open('/proc/net/softnet_stat')))")
    udp_server=$(ip netns exec "$NS_SERVER" awk '/^Udp:/ { if (h) print $6; h = 1 }' /proc/net/snmp)
    udp_client=$(ip netns exec "$NS_CLIENT" awk '/^Udp:/ { if (h) print $7; h = 1 }' /proc/net/snmp)
    echo "$backlog $udp_server $udp_client"
}
host_report() { # OUT...
    local cpu1 drops1 elsewhere1
    cpu1=$(head -n 1 /proc/stat)
    drops1=$(tbf_drops)
    elsewhere1=$(drops_elsewhere)
    local tcp
    tcp=$(python3 -c "
a = '$HOST_TCP0'.split(); b = '$(tcp_counters)'.split()
d = [int(y) - int(x) for x, y in zip(a, b)]
print(f'TCP sent {d[0]} segments again, {d[1]} recoveries ({d[2]} undone), {d[3]} timeouts')")
    local events="" lost=0 f sched
    for f in "$@"; do
        events+="${events:+; }$(json "$WORK/$f" "f\"{r.get('congestion_events', 0)} congestion events ({r.get('congestion_undos', 0)} undone)\"")"
        lost=$((lost + $(json "$WORK/$f" "r.get('lost', 0)")))
    done
    # How much of the time the server and each client ran, and how much they were ready
    # to run but waited for a CPU (/proc/PID/schedstat): TCP acknowledges from the
    # kernel's softirq as segments land, RPP when its processes get a core, so on a
    # loaded host their wait is in RPP's round trip (RESULTS: "RPP beside TCP: where the
    # longer round trip goes").
    sched=$(python3 - "$HOST_SERVER0 $(sched_sample "$SERVER_PID")" "$@" <<PY
import sys
def share(t0, t1, run, wait):
    dt = max(1e-9, t1 - t0)
    return f"ran {100 * run / 1e9 / dt:.0f}%, waited for a CPU {100 * wait / 1e9 / dt:.0f}%"
a = sys.argv[1].split()
parts = [f"myri serve {share(float(a[0]), float(a[4]), int(a[5]) - int(a[1]), int(a[6]) - int(a[2]))}"]
for f in sys.argv[2:]:
    try:
        c = open(f"$WORK/{f}.sched").read().split()
        parts.append(f"{f.removesuffix('.out')} {share(float(c[0]), float(c[1]), int(c[2]), int(c[3]))}")
    except (OSError, IndexError, ValueError):
        pass
print("; ".join(parts))
PY
)
    python3 -c "
a = list(map(int, '$HOST_CPU0'.split()[1:])); b = list(map(int, '$cpu1'.split()[1:]))
d = [y - x for x, y in zip(a, b)]
e = [y - x for x, y in zip(map(int, '$HOST_ELSEWHERE0'.split()), map(int, '$elsewhere1'.split()))]
print(f'host idle {100 * d[3] / max(1, sum(d)):.0f}%, softirq {100 * d[6] / max(1, sum(d)):.0f}%, stolen by the hypervisor {100 * d[7] / max(1, sum(d)):.0f}%; bottleneck dropped $((drops1 - HOST_DROPS0)), '
      f'host dropped {e[0]} at input backlogs, {e[1]} at UDP receive and {e[2]} at send buffers; RPP declared $lost lost: $events; $tcp; $sched')"
}

# tcp_rate LOG FROM TO: a logged TCP flow's goodput in MB/s between two times.
tcp_rate() {
    python3 - "$1" "$2" "$3" <<'PY'
import sys
log, t0, t1 = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
pts = [tuple(map(float, l.split())) for l in open(log) if len(l.split()) == 2]
def at(t):
    # Bytes sent by time t, interpolated between the logged points.
    if not pts or t <= pts[0][0]:
        return pts[0][1] if pts else 0.0
    for a, b in zip(pts, pts[1:]):
        if b[0] >= t:
            return a[1] + (t - a[0]) / max(1e-9, b[0] - a[0]) * (b[1] - a[1])
    return pts[-1][1]
print(f"{(at(t1) - at(t0)) / max(1e-9, t1 - t0) / 1e6:.2f}")
PY
}

# tcp_pair CC_A CC_B SECONDS NAME: two TCP flows started together, for SECONDS; each
# one's goodput from their start in MB/s, in `first` and `second` (logs NAME-a.log and
# NAME-b.log).
tcp_pair() {
    local ta tb t0 t1
    tcp_flow_start "$1" "$TCP_PORT" "$WORK/$4-a.log"; ta=$TCP_PID
    tcp_flow_start "$2" $((TCP_PORT + 1)) "$WORK/$4-b.log"; tb=$TCP_PID
    t0=$(date +%s.%N)
    sleep "$3"
    t1=$(date +%s.%N)
    kill -TERM "$ta" "$tb"; wait "$ta" "$tb" || true
    first=$(tcp_rate "$WORK/$4-a.log" "$t0" "$t1")
    second=$(tcp_rate "$WORK/$4-b.log" "$t0" "$t1")
}

for rate in $RATES; do
    ip netns exec "$SHAPED_NS" tc qdisc replace dev "$SHAPED_DEV" root tbf rate "$rate" burst 32kb latency 10ms \
        || { say "tc tbf is not available"; exit 2; }
    link_mb=$(python3 -c "r='$rate'; print({'mbit':1e6,'gbit':1e9}[r[-4:]] * float(r[:-4]) / 8e6)")
    # Messages for about four seconds of the whole link.
    count=$(python3 -c "print(max(200, int($link_mb * 4 / 0.065536)))")
    # The RPP flow beside TCP carries TCP_SECONDS of the whole link (at half of it, twice
    # that long); the control runs as long.
    half=$(python3 -c "print(max(100, int($link_mb * $TCP_SECONDS / 0.065536)))")
    say "link $rate (${link_mb} MB/s), queue 10 ms at $WHERE, rpp cc=$CC, $count x 64 KiB per flow"

    # Interleaved with TCP and bare-UDP reference rounds of about a second each (the
    # endpoint is not progressed while a reference runs: longer rounds could outlast
    # RPP's patience with a silent peer).
    if has one; then
        stream one.out "$(python3 -c "print(max(100, int($link_mb / 0.065536)))")" 5 --baseline
        say "  one RPP flow: $(json "$WORK/one.out" "f\"{t['mb_per_s']:.1f} MB/s, TCP {t['tcp_mb_per_s']:.1f} MB/s: {t['ratio_tcp']:.2f}x TCP (target >= 0.95); {100*retrans:.2f}% of data packets retransmitted (target <= 1%)\"")"
    fi

    if has two; then
        two=$(python3 -c "print(max(200, int($link_mb * $TWO_SECONDS / 0.065536)))")
        host_mark
        stream two-a.out "$two" 1 & a=$!
        stream two-b.out "$two" 1 & b=$!
        wait "$a" || fail "the first of two flows failed"
        wait "$b" || fail "the second of two flows failed"
        ra=$(json "$WORK/two-a.out" "t['mb_per_s']"); rb=$(json "$WORK/two-b.out" "t['mb_per_s']")
        xa=$(json "$WORK/two-a.out" "100*retrans"); xb=$(json "$WORK/two-b.out" "100*retrans")
        # Each flow's average is over its own time, and the one that ends last runs alone
        # at the end (its average is always about half the link). The two carry the same
        # bytes N and keep the link full, so while both ran the slower one carried
        # G*T1 - N of them with G = 2N/T2: its rate there over the faster's is
        # 2*T1/T2 - 1, that is twice the ratio of the averages less one.
        say "  two RPP flows at once: $(python3 -c "a,b=$ra,$rb; r=min(a,b)/max(a,b); print(f'{a:.1f} and {b:.1f} MB/s: the slower {r:.2f}x the faster over each one\'s time, {2*r-1:.2f}x while both ran (target >= 0.8)')"); retransmitted $(printf '%.2f' "$xa")% and $(printf '%.2f' "$xb")% (target <= 2%)"
        # Timeouts in a row declare persistent congestion; found spurious, it is undone.
        # One that stands at a flow's start leaves it to grow from a 10 KB threshold.
        pc="'%d (%d undone)' % (r.get('persistent_congestion', 0), r.get('spurious_timeouts', 0))"
        say "    persistent congestion: $(json "$WORK/two-a.out" "$pc") and $(json "$WORK/two-b.out" "$pc")"
        say "    $(host_report two-a.out two-b.out)"
        # The peer in the same run: two kernel TCP CUBIC flows, started together and
        # measured from their start for as long as both RPP flows ran (the faster one's
        # time), the same measure.
        both=$(python3 -c "print($two * 0.065536 / max($ra, $rb))")
        tcp_pair cubic cubic "$both" two-tcp
        say "    two TCP CUBIC flows as long ($(printf '%.1f' "$both") s, control): $first and $second MB/s: $(python3 -c "a,b=$first,$second; print(f'the slower {min(a,b)/max(a,b):.2f}x the faster')")"
    fi

    # RPP beside TCP, the two started together and each measured over the RPP flow's
    # time, with each TCP controller to compare: the namespace's default (the "TCP" of
    # the lines above) and CUBIC, Linux's own default. Then the control: the two TCPs
    # beside each other, measured alike (over the first one's time).
    for tcc in "${TCP_CCS[@]}"; do
        has tcp || break
        tcp_flow_start "$tcc" "$TCP_PORT" "$WORK/tcp-$tcc.log"
        t0=$(date +%s.%N)
        host_mark
        stream "with-$tcc.out" "$half" 1
        t1=$(date +%s.%N)
        kill -TERM "$TCP_PID"; wait "$TCP_PID" || true
        rr=$(json "$WORK/with-$tcc.out" "t['mb_per_s']")
        tcp=$(tcp_rate "$WORK/tcp-$tcc.log" "$t0" "$t1")
        say "  RPP and TCP ($tcc) at once: RPP $(printf '%.1f' "$rr") MB/s, TCP $tcp MB/s: $(python3 -c "l=$link_mb; print(f'{$rr/l:.2f} and {$tcp/l:.2f} of the link (target >= 0.33 each)')")"
        say "    $(host_report "with-$tcc.out")"
    done
    if has control && [[ ${#TCP_CCS[@]} -gt 1 ]]; then
        tcp_pair "${TCP_CCS[0]}" "${TCP_CCS[1]}" "$(python3 -c "print($half * 0.065536 / $link_mb * 2)")" tcp
        say "  TCP (${TCP_CCS[0]}) and TCP (${TCP_CCS[1]}) at once (control): $first and $second MB/s: $(python3 -c "l=$link_mb; print(f'{$first/l:.2f} and {$second/l:.2f} of the link')")"
    fi
done
if [[ -n ${KEEP:-} ]]; then
    # The JSON, the clients' stderr and the TCP sources' progress logs (of the tests run).
    for f in "$WORK"/*.out "$WORK"/*.err "$WORK"/*.log; do
        if [[ -e $f ]]; then cp "$f" "$KEEP"/; fi
    done
fi
stop_server
say "done"
