# Shared by the scripts in this folder (sourced, not run): two network namespaces joined by
# a veth pair, `myri serve` in one, cleaned up on exit. The caller sets MYRI and NAME
# (the prefix of what `say` prints) before sourcing.
#
# The addresses are in 198.18.0.0/15 (RFC 2544's benchmarking range), on a link between
# the two namespaces only: nothing leaves them. Everything made here is removed on exit.

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
    ip link del "$VETH_SERVER" 2>/dev/null || true
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT INT TERM

say() { printf '%s: %s\n' "$NAME" "$*"; }
fail() { say "FAILED: $*"; exit 1; }

command -v ip >/dev/null || { say "iproute2 (ip) is not installed"; exit 2; }
command -v "$MYRI" >/dev/null || [[ -x $MYRI ]] || { say "no myri binary at $MYRI"; exit 2; }

make_namespaces() {
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
make_namespaces || { say "could not make the namespaces and the veth pair (root? ip netns?)"; exit 2; }
say "namespaces $NS_SERVER ($SERVER_IP) and $NS_CLIENT ($CLIENT_IP) joined by $VETH_SERVER/$VETH_CLIENT"

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
