#!/usr/bin/env bash
# Latency and bandwidth of myri's libfabric provider against libfabric's own providers,
# interleaved in one run (hosts differ: only ratios from one run count).
#   transport/fabric/compare.sh [rounds]        (default 3; needs the Debian packages)
# Writes target/fabric-compare/{mpi.txt,fi_pingpong.txt,latency.svg,bandwidth.svg}:
# the MPI ping-pong (tests/mpi/pingpong.c, one-way median per size, median over the
# rounds) over Open MPI's mtl:ofi on myri (RDM over udp://, congestion control and pacing
# on, auto-shm off: FI_MYRI_SHM=0, so the two ranks of this host really talk UDP),
# myri-nocc (the same with FI_MYRI_CC=none FI_MYRI_PACING=0), udp;ofi_rxd,
# tcp;ofi_rxm, myri-shm (RDM over shm://) and myri-auto (the default: udp:// addresses,
# the two ranks of this host meeting over shared memory), and over Open MPI's own shared memory
# (vader: pml ob1, btl vader) for reference: libfabric's shm provider lacks
# FI_REMOTE_COMM, which Open MPI 4.1's mtl:ofi asks for, so it runs in fi_pingpong only.
# fi_pingpong: 8 B, 64 KiB and 1 MiB on myri rdm/dgram, myri-shm rdm, udp, udp;ofi_rxd,
# tcp;ofi_rxm and shm.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
eval "$(transport/fabric/install.sh release | tail -n 1 | sed 's/^/export /')"
export FI_MYRI_ADDR=127.0.0.1
out=${CARGO_TARGET_DIR:-target}/fabric-compare
rm -rf "$out/raw"
mkdir -p "$out/raw"
mpicc -O2 -o "$out/pingpong" transport/fabric/tests/mpi/pingpong.c

configs=("myri" "myri-nocc" "udp;ofi_rxd" "tcp;ofi_rxm" "myri-shm" "myri-auto" "vader")
run_mpi() { # config round
    local prov=$1 pml=(--mca pml cm --mca mtl ofi) extra=()
    case $1 in
    myri) extra=(-x FI_MYRI_SHM=0) ;;
    myri-nocc) prov=myri extra=(-x FI_MYRI_SHM=0 -x FI_MYRI_CC=none -x FI_MYRI_PACING=0) ;;
    myri-shm) prov=myri extra=(-x FI_MYRI_TRANSPORT=shm) ;;
    myri-auto) prov=myri extra=() ;;
    vader) pml=(--mca pml ob1 --mca btl self,vader) ;;
    esac
    [ "$1" = vader ] || pml+=(--mca mtl_ofi_provider_include "$prov" --mca btl self)
    timeout 600 mpirun --allow-run-as-root --oversubscribe -np 2 "${pml[@]}" \
        --mca oob_tcp_if_include lo -x FI_PROVIDER_PATH -x FI_MYRI_ADDR "${extra[@]}" \
        "$out/pingpong" 20 | grep -E '^[0-9]+ ' >"$out/raw/mpi-${1//;/_}-$2.txt" || true
}
fi_runs=("myri rdm" "myri dgram" "myri-shm rdm" "udp dgram" "udp;ofi_rxd rdm" "tcp;ofi_rxm rdm" "shm rdm")
fi_sizes=("8 10000" "65536 1000" "1048576 100")
run_fi() { # provider endpoint size iterations round
    local port=$((47700 + RANDOM % 200)) env=(env -u FI_PROVIDER) prov=$1
    [ "$1" = myri ] && env=(env -u FI_PROVIDER FI_MYRI_SHM=0)
    [ "$1" = myri-shm ] && env=(env -u FI_PROVIDER FI_MYRI_TRANSPORT=shm) prov=myri
    [ "$2" = dgram ] && [ "$3" -gt 1400 ] && return 0
    # Server and client pinned to a core each, as mpirun binds its two ranks: unpinned,
    # two busy-polling processes on a loaded 2-core host measure the scheduler.
    "${env[@]}" taskset -c 0 timeout 120 fi_pingpong -p "$prov" -e "$2" -S "$3" -I "$4" -B $port >/dev/null 2>&1 &
    local server=$!
    for _ in $(seq 200); do grep -q ":$(printf %04X $port) .* 0A " /proc/net/tcp && break; sleep 0.01; done
    "${env[@]}" taskset -c 1 timeout 120 fi_pingpong -p "$prov" -e "$2" -S "$3" -I "$4" -P $port 127.0.0.1 |
        awk 'NR == 2 {print $7, $6}' >"$out/raw/fi-${1//;/_}-$2-$3-$5.txt" || true
    wait $server || true
}

# The floor under every udp:// figure: two processes busy-polling one UDP socket each
# on loopback, sendto and recv(MSG_DONTWAIT), 8 B, no library at all.
cat >"$out/udp_floor.c" <<'C'
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
static int cmp(const void *x, const void *y) { double d = *(const double *)x - *(const double *)y; return (d > 0) - (d < 0); }
int main(int argc, char **argv) {
    int iters = atoi(argv[1]), port = atoi(argv[2]);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(0x7f000001)}, b = a;
    b.sin_port = htons(port + 1);
    int sa = socket(AF_INET, SOCK_DGRAM, 0), sb = socket(AF_INET, SOCK_DGRAM, 0);
    if (bind(sa, (void *)&a, sizeof a) || bind(sb, (void *)&b, sizeof b)) return 1;
    char buf[64] = {0};
    pid_t child = fork();
    int me = child ? sa : sb;
    struct sockaddr_in *to = child ? &b : &a;
    double *t = malloc(sizeof(double) * iters);
    for (int i = 0; i < iters; i++) {
        double t0 = now();
        if (child) { sendto(me, buf, 8, 0, (void *)to, sizeof *to); while (recv(me, buf, 64, MSG_DONTWAIT) < 0) {} }
        else { while (recv(me, buf, 64, MSG_DONTWAIT) < 0) {} sendto(me, buf, 8, 0, (void *)to, sizeof *to); }
        t[i] = (now() - t0) / 2;
    }
    if (child) { qsort(t, iters, sizeof(double), cmp); printf("%.2f\n", t[iters / 2]); }
    return 0;
}
C
cc -O2 -o "$out/udp_floor" "$out/udp_floor.c"

for r in $(seq "$rounds"); do
    "$out/udp_floor" 20000 $((48800 + 2 * r)) >"$out/raw/udp-floor-$r.txt" || true
    for c in "${configs[@]}"; do run_mpi "$c" "$r"; done
    for sz in "${fi_sizes[@]}"; do
        for pe in "${fi_runs[@]}"; do run_fi ${pe% *} ${pe##* } $sz "$r"; done
    done
done

median() { sort -g | awk '{v[NR]=$1} END {if (NR) print v[int((NR+1)/2)]; else print "-"}'; }
{
    printf "MPI ping-pong, one-way: median of %s rounds (us | MB/s)\n%-10s" "$rounds" bytes
    for c in "${configs[@]}"; do printf " %22s" "$c"; done; echo
    for size in $(awk '{print $1}' "$out/raw/mpi-myri-1.txt"); do
        printf "%-10s" "$size"
        for c in "${configs[@]}"; do
            # The round number right after the name: `mpi-myri-*` would take in
            # myri-shm's, myri-auto's and myri-nocc's rounds too.
            lat=$(cat "$out"/raw/mpi-"${c//;/_}"-[0-9]*.txt | awk -v s="$size" '$1 == s {print $2}' | median)
            bw=$(cat "$out"/raw/mpi-"${c//;/_}"-[0-9]*.txt | awk -v s="$size" '$1 == s {print $3}' | median)
            printf " %11s %10s" "$lat" "$bw"
        done
        echo
    done
    printf "raw UDP 8 B one-way (udp_floor, no library): %s us\n" "$(cat "$out"/raw/udp-floor-*.txt | median)"
} | tee "$out/mpi.txt"
{
    echo "fi_pingpong, usec/xfer and MB/s: median of $rounds rounds"
    printf "%-16s %-6s" provider ep
    for sz in "${fi_sizes[@]}"; do printf " %20s" "${sz% *} B"; done; echo
    for pe in "${fi_runs[@]}"; do
        p=${pe% *}; e=${pe##* }
        printf "%-16s %-6s" "$p" "$e"
        for sz in "${fi_sizes[@]}"; do
            f=("$out"/raw/fi-"${p//;/_}"-"$e"-"${sz% *}"-[0-9]*.txt)
            lat=$(cat "${f[@]}" 2>/dev/null | awk '{print $1}' | median || true)
            bw=$(cat "${f[@]}" 2>/dev/null | awk '{print $2}' | median || true)
            printf " %10s %9s" "$lat" "$bw"
        done
        echo
    done
} | tee "$out/fi_pingpong.txt"

# Two log-log plots from mpi.txt: columns 2,4,6,... latency; 3,5,7,... bandwidth.
plot() { # column-offset title unit file
    awk -v off="$1" -v title="$2" -v unit="$3" -v names="${configs[*]}" '
    NR > 2 && $1 ~ /^[0-9]+$/ && $1 > 0 { n++; x[n] = log($1) / log(2); K = split(names, nm, " "); for (k = 0; k < K; k++) {
        v = $(2 + 2 * k + off); ok[k, n] = v > 0; y[k, n] = (v > 0) ? log(v) / log(10) : 0 } }
    END {
        K = split(names, nm, " "); split("#d62728 #ff9896 #1f77b4 #2ca02c #9467bd #7f7f7f", col, " ");
        ymin = 1e9; ymax = -1e9;
        for (i = 1; i <= n; i++) for (k = 0; k < K; k++) { if (!ok[k,i]) continue; if (y[k,i] < ymin) ymin = y[k,i]; if (y[k,i] > ymax) ymax = y[k,i] }
        ymin = int(ymin) - (ymin < 0); ymax = int(ymax) + 1;
        W = 640; H = 400; L = 60; B = 40;
        printf "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" font-size=\"11\">\n", W, H;
        printf "<text x=\"%d\" y=\"16\" font-size=\"13\">%s (%s, log scale) against message size (2^0 to 2^22 bytes)</text>\n", L, title, unit;
        for (d = ymin; d <= ymax; d++) { yy = H - B - (d - ymin) / (ymax - ymin) * (H - B - 30);
            printf "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/><text x=\"4\" y=\"%.1f\">%g</text>\n", L, W - 10, yy, yy, yy + 4, 10 ^ d }
        for (i = 1; i <= n; i += 2) { xx = L + x[i] / x[n] * (W - L - 20);
            printf "<text x=\"%.1f\" y=\"%d\">2^%d</text>\n", xx - 8, H - 20, x[i] }
        for (k = 0; k < K; k++) { printf "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", col[k + 1];
            for (i = 1; i <= n; i++) if (ok[k,i]) printf "%.1f,%.1f ", L + x[i] / x[n] * (W - L - 20), H - B - (y[k,i] - ymin) / (ymax - ymin) * (H - B - 30);
            printf "\"/>\n<text x=\"%d\" y=\"%d\" fill=\"%s\">%s</text>\n", L + 10 + 95 * k, H - 4, col[k + 1], nm[k + 1] }
        print "</svg>" }' "$out/mpi.txt" >"$4"
}
plot 0 "MPI one-way latency" "us" "$out/latency.svg"
plot 1 "MPI ping-pong bandwidth" "MB/s" "$out/bandwidth.svg"
echo "wrote $out/{mpi.txt,fi_pingpong.txt,latency.svg,bandwidth.svg}"
