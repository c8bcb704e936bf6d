#!/usr/bin/env bash
# Two hosts on one machine: two network namespaces joined by a veth pair, `myri serve` in
# one and `myri pingpong` / `myri stream` in the other over udp://, with the references
# (bare UDP socket, TCP) measured in the same runs. Needs root and iproute2.
#
# The veth link has Ethernet's 1500-byte MTU, so a default udp:// endpoint sends datagrams
# of the path's 1472 bytes, up to 64 per system call (UDP segmentation offload), and
# takes them back coalesced (UDP_GRO). A second stream with `?gso=0` runs the old way for
# comparison: 64 KiB datagrams that IP fragments, one system call per datagram.
#
# Usage: integration/netns/two_hosts.sh [PATH-TO-MYRI]   (default: $MYRI, else `myri`)
# Exit codes: 0 every run passed; 1 a run failed; 2 the namespaces could not be made.
#
# The addresses are in 198.18.0.0/15 (RFC 2544's benchmarking range), on a link between
# the two namespaces only: nothing leaves them. Everything made here is removed on exit.
set -euo pipefail

MYRI=${1:-${MYRI:-myri}}
ID=$$
NS_SERVER="myri-srv-$ID"
NS_CLIENT="myri-cli-$ID"
# Interface names are at most 15 bytes.
VETH_SERVER="mys$ID"
VETH_CLIENT="myc$ID"
SERVER_IP=198.18.0.1
CLIENT_IP=198.18.0.2
PORT=7000
WORK=$(mktemp -d)
SERVER_PID=

cleanup() {
    local rc=$?
    if [[ -n $SERVER_PID ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    ip netns del "$NS_SERVER" 2>/dev/null || true
    ip netns del "$NS_CLIENT" 2>/dev/null || true
    ip link del "$VETH_SERVER" 2>/dev/null || true
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT INT TERM

say() { printf 'two_hosts: %s\n' "$*"; }
fail() { say "FAILED: $*"; exit 1; }

command -v ip >/dev/null || { say "iproute2 (ip) is not installed"; exit 2; }
command -v "$MYRI" >/dev/null || [[ -x $MYRI ]] || { say "no myri binary at $MYRI"; exit 2; }

setup() {
    ip netns add "$NS_SERVER"
    ip netns add "$NS_CLIENT"
    ip link add "$VETH_SERVER" type veth peer name "$VETH_CLIENT"
    ip link set "$VETH_SERVER" netns "$NS_SERVER"
    ip link set "$VETH_CLIENT" netns "$NS_CLIENT"
    ip -n "$NS_SERVER" addr add "$SERVER_IP/30" dev "$VETH_SERVER"
    ip -n "$NS_CLIENT" addr add "$CLIENT_IP/30" dev "$VETH_CLIENT"
    ip -n "$NS_SERVER" link set lo up
    ip -n "$NS_CLIENT" link set lo up
    ip -n "$NS_SERVER" link set "$VETH_SERVER" up
    ip -n "$NS_CLIENT" link set "$VETH_CLIENT" up
}
setup || { say "could not make the namespaces and the veth pair (root? ip netns?)"; exit 2; }
say "namespaces $NS_SERVER ($SERVER_IP) and $NS_CLIENT ($CLIENT_IP) joined by $VETH_SERVER/$VETH_CLIENT"

# The server, in its namespace; its first line says it listens.
ip netns exec "$NS_SERVER" "$MYRI" serve "udp://$SERVER_IP:$PORT" --json >"$WORK/serve.out" 2>"$WORK/serve.err" &
SERVER_PID=$!
for _ in $(seq 1 600); do
    grep -q '"event":"listening"' "$WORK/serve.out" 2>/dev/null && break
    kill -0 "$SERVER_PID" 2>/dev/null || fail "the server exited: $(cat "$WORK/serve.err")"
    sleep 0.05
done
grep -q '"event":"listening"' "$WORK/serve.out" || fail "the server did not start within 30 s"
say "server: $(head -n 1 "$WORK/serve.out")"

# client OUT ARGS...: runs `myri ARGS` in the client's namespace against the server (the
# transport URL's parameters in $QUERY, none by default).
client() {
    local out=$1
    shift
    if ! ip netns exec "$NS_CLIENT" "$MYRI" "$@" --transport "udp://$SERVER_IP:$PORT${QUERY:-}" --json >"$WORK/$out" 2>"$WORK/$out.err"; then
        cat "$WORK/$out" "$WORK/$out.err"
        fail "myri $* exited with $?"
    fi
    cat "$WORK/$out"
}

# The client's namespace can reach only the server's: a ping-pong proves the link.
client pingpong.out pingpong --sizes 8,8192 --iters 1000 --interleave 4 --baseline
grep -q '"test":"pingpong"' "$WORK/pingpong.out" || fail "no ping-pong figures"
grep -q '"ratio":[0-9]' "$WORK/pingpong.out" || fail "no ping-pong ratio"
grep -q "\"local\":\"udp://0.0.0.0:" "$WORK/pingpong.out" || fail "no connected line"

client stream.out stream --size 65536 --count 200 --rounds 2 --baseline --verify
grep -q '"errors":0' "$WORK/stream.out" || fail "stream errors"
grep -q '"delivered":400' "$WORK/stream.out" || fail "the stream lost messages"
grep -q '"ratio_tcp":[0-9]' "$WORK/stream.out" || fail "no tcp ratio"

QUERY='?gso=0' client fragmented.out stream --size 65536 --count 200 --rounds 2 --baseline --verify
grep -q '"errors":0' "$WORK/fragmented.out" || fail "stream errors without offload"
grep -q '"delivered":400' "$WORK/fragmented.out" || fail "the stream without offload lost messages"

client random.out stream --random-sizes 1048576 --count 300 --rounds 1 --verify
grep -q '"delivered":300' "$WORK/random.out" || fail "the random-size stream lost messages"

kill -TERM "$SERVER_PID"
wait "$SERVER_PID" || fail "the server exited with $?"
SERVER_PID=
cat "$WORK/serve.out"
grep -q '"event":"final"' "$WORK/serve.out" || fail "no final counters from the server"
grep -q '"sessions_ended":4' "$WORK/serve.out" || fail "the server did not see four sessions end"
grep -q "\"addr\":\"udp://$CLIENT_IP:" "$WORK/serve.out" || fail "the sessions did not come from the other namespace"
say "passed"
