#!/usr/bin/env bash
# Two configurations of one MPI message size, interleaved round by round on this host
# (the only way a difference of a few percent shows on a noisy machine), medians and
# their ratio. A configuration is a provider and its environment:
#   transport/fabric/ab.sh ROUNDS 'myri FI_MYRI_PEER_SOCKET=0' 'myri FI_MYRI_PEER_SOCKET=1'
#   transport/fabric/ab.sh 4 'myri FI_PROVIDER_PATH=/tmp/old' 'myri FI_PROVIDER_PATH=/tmp/new'
#   transport/fabric/ab.sh 4 'myri' 'udp;ofi_rxd'
# `myri` runs with FI_MYRI_SHM=0 (the two ranks of this host talk UDP) unless the
# configuration says otherwise; FI_PROVIDER_PATH defaults to this checkout's release build
# (transport/fabric/install.sh release). ITERS and LEN (default 20000 and 8) go to
# tests/mpi/latency.c.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:?rounds}
shift
[ $# -eq 2 ] || { echo "usage: ab.sh ROUNDS 'PROVIDER [VAR=VALUE ...]' 'PROVIDER [VAR=VALUE ...]'" >&2; exit 2; }
out=${CARGO_TARGET_DIR:-target}/fabric-ab
mkdir -p "$out"
mpicc -O2 -o "$out/latency" transport/fabric/tests/mpi/latency.c
export FI_PROVIDER_PATH=${FI_PROVIDER_PATH:-$PWD/${CARGO_TARGET_DIR:-target}/release/fi}
export FI_MYRI_ADDR=${FI_MYRI_ADDR:-127.0.0.1}
run() { # "PROVIDER VAR=VALUE ..."
    local words=($1) vars=(FI_MYRI_SHM=0) xs=()
    vars+=("${words[@]:1}")
    for v in "${vars[@]}"; do xs+=(-x "$v"); done
    env "${vars[@]}" timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 \
        --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include "${words[0]}" --mca btl self \
        --mca oob_tcp_if_include lo -x FI_PROVIDER_PATH -x FI_MYRI_ADDR "${xs[@]}" \
        "$out/latency" "${ITERS:-20000}" "${LEN:-8}" | awk '/one-way median/ {print $5}'
}
: >"$out/rounds.txt"
for i in $(seq "$rounds"); do
    for c in A B; do
        if [ $c = A ]; then conf=$1; else conf=$2; fi
        echo "$c $(run "$conf")" | tee -a "$out/rounds.txt"
    done
done
python3 - "$out/rounds.txt" "$1" "$2" <<'PY'
import statistics, sys
d = {}
for line in open(sys.argv[1]):
    c, v = line.split()
    d.setdefault(c, []).append(float(v))
for c, name in (("A", sys.argv[2]), ("B", sys.argv[3])):
    print(f"{c} ({name}): median {statistics.median(d[c]):.3f} us of {d[c]}")
print(f"B/A {statistics.median(d['B']) / statistics.median(d['A']):.3f}")
PY
