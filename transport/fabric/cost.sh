#!/usr/bin/env bash
# Instructions (callgrind) of each part of the provider's 8 B message path, per message:
# the sender's fi_tinjectdata and the receiver's fi_cq_read that finds the message (the
# path), and the reads after it (deferred work, off the path). Repeatable where wall
# time is not: compare two builds with FI_PROVIDER_PATH.
#   transport/fabric/cost.sh            (this checkout's release build)
#   FI_PROVIDER_PATH=/tmp/old transport/fabric/cost.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${CARGO_TARGET_DIR:-target}/fabric-cost
mkdir -p "$out"
cc -O2 -o "$out/path" transport/fabric/cost/path.c -lfabric
export FI_PROVIDER_PATH=${FI_PROVIDER_PATH:-$PWD/${CARGO_TARGET_DIR:-target}/release/fi}
export FI_MYRI_SHM=0 FI_MYRI_ADDR=${FI_MYRI_ADDR:-127.0.0.1}
count() { # function iterations: instructions collected inside it
    valgrind --tool=callgrind --collect-atstart=no --toggle-collect="$1" \
        --callgrind-out-file="$out/cg.$1.$2" "$out/path" "$2" >/dev/null 2>&1
    awk '/^summary:/ {print $2}' "$out/cg.$1.$2"
}
for f in send_msg busy_read after_read; do
    a=$(count $f 2000)
    b=$(count $f 12000)
    echo "$f $(( (b - a) / 10000 )) instructions per message"
done
