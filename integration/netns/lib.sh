# Shared by the scripts in this folder (sourced, not run): two network namespaces joined by
# a veth pair, `myri serve` in one, cleaned up on exit. The caller sets MYRI and NAME
# (the prefix of what `say` prints) before sourcing, and ROUTER=1 for a third namespace
# between the two: client -- router -- server, each hop a veth pair, the router
# forwarding (SHAPED_DEV is then the router's device toward the server, where a
# bottleneck in the network would be; else the client's own device). LINK_MTU, when set,
# is every veth's MTU (9000: a cluster's jumbo frames; default the kernel's 1500).
#
# The addresses are in 198.18.0.0/15 (RFC 2544's benchmarking range), on a link between
# the two namespaces only: nothing leaves them. Everything made here is removed on exit.

ID=$$
NS_SERVER="myri-srv-$ID"
NS_CLIENT="myri-cli-$ID"
NS_ROUTER="myri-rtr-$ID"
# Interface names are at most 15 bytes.
VETH_SERVER="mys$ID"
VETH_CLIENT="myc$ID"
VETH_ROUTER_C="myrc$ID"
VETH_ROUTER_S="myrs$ID"
ROUTER=${ROUTER:-0}
if [[ $ROUTER == 1 ]]; then
    SERVER_IP=198.18.1.2
    SHAPED_DEV=$VETH_ROUTER_S
    SHAPED_NS=$NS_ROUTER
else
    SERVER_IP=198.18.0.1
    SHAPED_DEV=$VETH_CLIENT
    SHAPED_NS=$NS_CLIENT
fi
CLIENT_IP=198.18.0.2
PORT=7000
WORK=$(mktemp -d)
SERVER_PID=
# Further processes to stop on exit (background flows).
EXTRA_PIDS=()

cleanup() {
    local rc=$?
    for pid in "${EXTRA_PIDS[@]}" $SERVER_PID; do
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
        fi
    done
    ip netns del "$NS_SERVER" 2>/dev/null || true
    ip netns del "$NS_CLIENT" 2>/dev/null || true
    ip netns del "$NS_ROUTER" 2>/dev/null || true
    ip link del "$VETH_SERVER" 2>/dev/null || true
    ip link del "$VETH_CLIENT" 2>/dev/null || true
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT INT TERM

say() { printf '%s: %s\n' "$NAME" "$*"; }
fail() { say "FAILED: $*"; exit 1; }

command -v ip >/dev/null || { say "iproute2 (ip) is not installed"; exit 2; }
command -v "$MYRI" >/dev/null || [[ -x $MYRI ]] || { say "no myri binary at $MYRI"; exit 2; }

make_routed_namespaces() {
    ip netns add "$NS_SERVER"
    ip netns add "$NS_CLIENT"
    ip netns add "$NS_ROUTER"
    ip link add "$VETH_CLIENT" type veth peer name "$VETH_ROUTER_C"
    ip link add "$VETH_SERVER" type veth peer name "$VETH_ROUTER_S"
    ip link set "$VETH_CLIENT" netns "$NS_CLIENT"
    ip link set "$VETH_SERVER" netns "$NS_SERVER"
    ip link set "$VETH_ROUTER_C" netns "$NS_ROUTER"
    ip link set "$VETH_ROUTER_S" netns "$NS_ROUTER"
    ip -n "$NS_CLIENT" addr add "$CLIENT_IP/30" dev "$VETH_CLIENT"
    ip -n "$NS_ROUTER" addr add 198.18.0.1/30 dev "$VETH_ROUTER_C"
    ip -n "$NS_ROUTER" addr add 198.18.1.1/30 dev "$VETH_ROUTER_S"
    ip -n "$NS_SERVER" addr add "$SERVER_IP/30" dev "$VETH_SERVER"
    for ns in "$NS_SERVER" "$NS_CLIENT" "$NS_ROUTER"; do ip -n "$ns" link set lo up; done
    ip -n "$NS_CLIENT" link set "$VETH_CLIENT" up
    ip -n "$NS_SERVER" link set "$VETH_SERVER" up
    ip -n "$NS_ROUTER" link set "$VETH_ROUTER_C" up
    ip -n "$NS_ROUTER" link set "$VETH_ROUTER_S" up
    if [[ -n ${LINK_MTU:-} ]]; then
        ip -n "$NS_CLIENT" link set "$VETH_CLIENT" mtu "$LINK_MTU"
        ip -n "$NS_SERVER" link set "$VETH_SERVER" mtu "$LINK_MTU"
        ip -n "$NS_ROUTER" link set "$VETH_ROUTER_C" mtu "$LINK_MTU"
        ip -n "$NS_ROUTER" link set "$VETH_ROUTER_S" mtu "$LINK_MTU"
    fi
    ip -n "$NS_CLIENT" route add default via 198.18.0.1
    ip -n "$NS_SERVER" route add default via 198.18.1.1
    ip netns exec "$NS_ROUTER" sysctl -qw net.ipv4.ip_forward=1
}

make_namespaces() {
    if [[ $ROUTER == 1 ]]; then
        make_routed_namespaces
        return
    fi
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
    if [[ -n ${LINK_MTU:-} ]]; then
        ip -n "$NS_SERVER" link set "$VETH_SERVER" mtu "$LINK_MTU"
        ip -n "$NS_CLIENT" link set "$VETH_CLIENT" mtu "$LINK_MTU"
    fi
}
make_namespaces || { say "could not make the namespaces and the veth pair (root? ip netns?)"; exit 2; }
if [[ $ROUTER == 1 ]]; then
    say "namespaces $NS_SERVER ($SERVER_IP) and $NS_CLIENT ($CLIENT_IP) joined through $NS_ROUTER"
else
    say "namespaces $NS_SERVER ($SERVER_IP) and $NS_CLIENT ($CLIENT_IP) joined by $VETH_SERVER/$VETH_CLIENT"
fi

# Starts `myri serve` in the server's namespace (extra arguments appended) and waits for
# its first line, which says it listens.
start_server() {
    ip netns exec "$NS_SERVER" "$MYRI" serve "udp://$SERVER_IP:$PORT" --json "$@" >"$WORK/serve.out" 2>"$WORK/serve.err" &
    SERVER_PID=$!
    for _ in $(seq 1 600); do
        grep -q '"event":"listening"' "$WORK/serve.out" 2>/dev/null && break
        kill -0 "$SERVER_PID" 2>/dev/null || fail "the server exited: $(cat "$WORK/serve.err")"
        sleep 0.05
    done
    grep -q '"event":"listening"' "$WORK/serve.out" || fail "the server did not start within 30 s"
    say "server: $(head -n 1 "$WORK/serve.out")"
}

# Stops the server and waits for it.
stop_server() {
    kill -TERM "$SERVER_PID"
    wait "$SERVER_PID" || fail "the server exited with $?"
    SERVER_PID=
}
