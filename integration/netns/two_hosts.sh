#!/usr/bin/env bash
# Two hosts on one machine: two network namespaces joined by a veth pair, `myri serve` in
# one and `myri pingpong` / `myri stream` in the other over udp://, with the references
# (bare UDP socket, TCP) measured in the same runs. Needs root and iproute2.
#
# The veth link has Ethernet's 1500-byte MTU, so a default udp:// endpoint sends datagrams
# of the path's 1472 bytes, up to 64 per system call (UDP segmentation offload), and
# takes them back coalesced (UDP_GRO). A stream with `?gso=0` sends datagrams of the same
# size one system call each, and one with `?mtu=65507` runs the old way for comparison:
# 64 KiB datagrams that IP fragments (on this lossless link only: under loss the
# receiver's reassembly memory fills with incomplete datagrams, see `crate::url`).
#
# Usage: integration/netns/two_hosts.sh [PATH-TO-MYRI]   (default: $MYRI, else `myri`)
# Exit codes: 0 every run passed; 1 a run failed; 2 the namespaces could not be made.
#
# The namespaces, addresses and clean-up are lib.sh's.
set -euo pipefail

MYRI=${1:-${MYRI:-myri}}
NAME=two_hosts
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
start_server

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

QUERY='?gso=0' client no-offload.out stream --size 65536 --count 200 --rounds 2 --baseline --verify
grep -q '"errors":0' "$WORK/no-offload.out" || fail "stream errors without offload"
grep -q '"delivered":400' "$WORK/no-offload.out" || fail "the stream without offload lost messages"
grep -q '"gso_sends":0' "$WORK/no-offload.out" || fail "gso=0 sent with segmentation offload"
# packet_payload: the message bytes one datagram carries (its size less RPP's headers).
payload() { grep -Eo '"packet_payload":[0-9]+' "$WORK/$1" | tail -n 1 | cut -d: -f2; }
# path_sized OUT WHAT: OUT's datagrams were ones the link carries whole (1,472 bytes).
path_sized() {
    local p
    p=$(payload "$1")
    [[ ${p:-0} -gt 1000 && ${p:-0} -lt 1472 ]] || fail "$2's packets carry ${p:-no} bytes, not the path's"
}
# Offload or not; and so 400 messages of 64 KiB went as more than 17,000 datagrams.
path_sized stream.out "the default stream"
path_sized no-offload.out "gso=0"
sent=$(grep -Eo '"data_sent":[0-9]+' "$WORK/no-offload.out" | tail -n 1 | cut -d: -f2)
[[ ${sent:-0} -gt 17000 ]] || fail "gso=0 sent ${sent:-no} data packets: not datagrams of the path's size"

QUERY='?mtu=65507' client fragmented.out stream --size 65536 --count 200 --rounds 2 --baseline --verify
grep -q '"errors":0' "$WORK/fragmented.out" || fail "stream errors with fragmented datagrams"
grep -q '"delivered":400' "$WORK/fragmented.out" || fail "the stream of fragmented datagrams lost messages"
p=$(payload fragmented.out)
[[ ${p:-0} -gt 60000 ]] || fail "mtu=65507's packets carry ${p:-no} bytes: the datagrams were not that large"

client random.out stream --random-sizes 1048576 --count 300 --rounds 1 --verify
grep -q '"delivered":300' "$WORK/random.out" || fail "the random-size stream lost messages"

# A bottleneck on the client's own device with a short queue: datagrams it drops fail
# their sends (ENOBUFS), which the endpoint counts and RPP takes as congestion at once.
ip netns exec "$NS_CLIENT" tc qdisc replace dev "$VETH_CLIENT" root tbf rate 100mbit burst 8kb latency 2ms
client shaped.out stream --size 65536 --count 300 --rounds 1 --verify
ip netns exec "$NS_CLIENT" tc qdisc del dev "$VETH_CLIENT" root
grep -q '"delivered":300' "$WORK/shaped.out" || fail "the shaped stream lost messages"
grep -Eq '"local_drops":[1-9]' "$WORK/shaped.out" || fail "no local drops counted behind a full queue"
grep -Eq '"local_congestion":[1-9]' "$WORK/shaped.out" || fail "RPP was not told of the local drops"

stop_server
cat "$WORK/serve.out"
grep -q '"event":"final"' "$WORK/serve.out" || fail "no final counters from the server"
grep -q '"sessions_ended":6' "$WORK/serve.out" || fail "the server did not see six sessions end"
grep -q "\"addr\":\"udp://$CLIENT_IP:" "$WORK/serve.out" || fail "the sessions did not come from the other namespace"
say "passed"
