/* One message size's MPI ping-pong between ranks 0 and 1: 1000 warm-up round trips, then
 * ITERS timed ones (default 20000) of LEN bytes (default 8); rank 0 prints the median,
 * 10th and 90th percentile of the one-way time (half of each round trip). Used by
 * transport/fabric/ab.sh to compare two builds or settings, interleaved. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void round_trip(int rank, char *buf, int len) {
    if (rank == 0) {
        MPI_Send(buf, len, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
        MPI_Recv(buf, len, MPI_BYTE, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
        MPI_Recv(buf, len, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buf, len, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
    }
}

int main(int argc, char **argv) {
    int rank, iters = argc > 1 ? atoi(argv[1]) : 20000, len = argc > 2 ? atoi(argv[2]) : 8;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (iters < 10 || len < 0 || len > (64 << 20)) {
        if (rank == 0)
            fprintf(stderr, "usage: latency [ITERS >= 10] [LEN <= 64 MiB]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    char *buf = calloc(len ? len : 1, 1);
    double *t = malloc(sizeof(double) * iters);
    for (int i = 0; i < 1000; i++)
        round_trip(rank, buf, len);
    for (int i = 0; i < iters; i++) {
        double t0 = MPI_Wtime();
        round_trip(rank, buf, len);
        t[i] = (MPI_Wtime() - t0) / 2;
    }
    if (rank == 0) {
        qsort(t, iters, sizeof(double), cmp);
        printf("%d B one-way median %.3f us p10 %.3f p90 %.3f\n", len, t[iters / 2] * 1e6,
               t[iters / 10] * 1e6, t[iters * 9 / 10] * 1e6);
    }
    free(t);
    free(buf);
    MPI_Finalize();
    return 0;
}
