#!/usr/bin/env bash
# RPP on a shared bottleneck: two network namespaces joined by a veth pair whose client
# side is shaped with a token bucket (`tc ... tbf`: 200 Mbit/s with a 10 ms queue, then
# 1 Gbit/s), `myri serve` in one namespace and the flows in the other. Each line it prints
# is a benchmark with its ratios from the same run:
#
#   one RPP flow       goodput against TCP's over the same bottleneck (interleaved rounds,
#                      `myri stream --baseline`) and the share of RPP's data packets sent
#                      again (target: >= 0.95x TCP, <= 1% retransmitted)
#   two RPP flows      at once: each one's goodput against the other's and their
#                      retransmissions (target: within 20% of each other, <= 2%)
#   RPP and TCP        at once: each one's share of the link (target: >= 1/3 each)
#
# Usage: integration/netns/shaped.sh [PATH-TO-MYRI]   (default: $MYRI, else `myri`)
# Environment: CC=cubic|newreno|off (RPP's controller, default cubic), RATES="200mbit 1gbit".
# Exit codes: 0 it ran (the targets are reported, not enforced: this is a benchmark);
# 1 a run failed; 2 the namespaces could not be made. Needs root, iproute2 and python3.
set -euo pipefail

MYRI=${1:-${MYRI:-myri}}
NAME=shaped
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || { say "python3 is not installed"; exit 2; }
CC=${CC:-cubic}
RATES=${RATES:-"200mbit 1gbit"}
TCP_PORT=7100
URL="udp://$SERVER_IP:$PORT?cc=$CC"
start_server

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
stream() {
    local out=$1 count=$2 rounds=$3
    shift 3
    local rc=0
    ip netns exec "$NS_CLIENT" "$MYRI" stream --transport "$URL" --size 65536 \
        --count "$count" --rounds "$rounds" --json "$@" >"$WORK/$out" 2>"$WORK/$out.err" || rc=$?
    if [[ $rc != 0 ]]; then
        cat "$WORK/$out" "$WORK/$out.err"
        fail "myri stream exited with $rc"
    fi
}

# A TCP flow for SECONDS: a sink in the server's namespace, a source in the client's;
# prints the source's goodput in MB/s.
tcp_flow() {
    local seconds=$1
    ip netns exec "$NS_SERVER" python3 -c "
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('$SERVER_IP', $TCP_PORT)); s.listen(1); c, _ = s.accept()
while c.recv(1 << 20): pass
" &
    local sink=$!
    EXTRA_PIDS+=("$sink")
    sleep 0.3
    ip netns exec "$NS_CLIENT" python3 -c "
import socket, time
c = socket.create_connection(('$SERVER_IP', $TCP_PORT))
buf = bytes(1 << 16); sent = 0; t0 = time.monotonic()
while time.monotonic() - t0 < $seconds:
    c.sendall(buf); sent += len(buf)
el = time.monotonic() - t0; c.close()
print(f'{sent / el / 1e6:.2f}')
"
    wait "$sink" || true
}

for rate in $RATES; do
    ip -n "$NS_CLIENT" link set "$VETH_CLIENT" up
    ip netns exec "$NS_CLIENT" tc qdisc replace dev "$VETH_CLIENT" root tbf rate "$rate" burst 32kb latency 10ms \
        || { say "tc tbf is not available"; exit 2; }
    link_mb=$(python3 -c "r='$rate'; print({'mbit':1e6,'gbit':1e9}[r[-4:]] * float(r[:-4]) / 8e6)")
    # Messages for about four seconds of the whole link.
    count=$(python3 -c "print(max(200, int($link_mb * 4 / 0.065536)))")
    say "link $rate (${link_mb} MB/s), queue 10 ms, rpp cc=$CC, $count x 64 KiB per flow"

    # Interleaved with TCP and bare-UDP reference rounds of about a second each (the
    # endpoint is not progressed while a reference runs: longer rounds could outlast
    # RPP's patience with a silent peer).
    stream one.out "$(python3 -c "print(max(100, int($link_mb / 0.065536)))")" 5 --baseline
    say "  one RPP flow: $(json "$WORK/one.out" "f\"{t['mb_per_s']:.1f} MB/s, TCP {t['tcp_mb_per_s']:.1f} MB/s: {t['ratio_tcp']:.2f}x TCP (target >= 0.95); {100*retrans:.2f}% of data packets retransmitted (target <= 1%)\"")"

    stream two-a.out "$count" 1 & a=$!
    stream two-b.out "$count" 1 & b=$!
    wait "$a" || fail "the first of two flows failed"
    wait "$b" || fail "the second of two flows failed"
    ra=$(json "$WORK/two-a.out" "t['mb_per_s']"); rb=$(json "$WORK/two-b.out" "t['mb_per_s']")
    xa=$(json "$WORK/two-a.out" "100*retrans"); xb=$(json "$WORK/two-b.out" "100*retrans")
    say "  two RPP flows at once: $(python3 -c "a,b=$ra,$rb; print(f'{a:.1f} and {b:.1f} MB/s: the slower {min(a,b)/max(a,b):.2f}x the faster (target >= 0.8)')"); retransmitted $(printf '%.2f' "$xa")% and $(printf '%.2f' "$xb")% (target <= 2%)"

    stream with-tcp.out "$count" 1 & r=$!
    tcp=$(tcp_flow 4)
    wait "$r" || fail "the RPP flow beside TCP failed"
    rr=$(json "$WORK/with-tcp.out" "t['mb_per_s']")
    say "  RPP and TCP at once: RPP $(printf '%.1f' "$rr") MB/s, TCP $tcp MB/s: $(python3 -c "l=$link_mb; print(f'{$rr/l:.2f} and {$tcp/l:.2f} of the link (target >= 0.33 each)')")"
done
stop_server
say "done"
