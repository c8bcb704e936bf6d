/* MPI ping-pong of 1 B to 4 MiB between ranks 0 and 1, data checked; prints the
 * one-way latency of each size (half the round trip, median of the iterations). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int rank, size, iters = argc > 1 ? atoi(argv[1]) : 50;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    size_t max = 4 << 20;
    unsigned char *buf = malloc(max);
    double *t = malloc(sizeof(double) * iters);
    if (rank == 0)
        printf("%-10s %12s %12s\n", "bytes", "one-way-us", "MB/s");
    for (size_t len = 1; len <= max; len *= 2) {
        for (int i = 0; i < iters; i++) {
            if (rank == 0) {
                for (size_t k = 0; k < len; k++)
                    buf[k] = (unsigned char)(k + i + len);
                double t0 = MPI_Wtime();
                MPI_Send(buf, (int)len, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
                MPI_Recv(buf, (int)len, MPI_BYTE, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                t[i] = (MPI_Wtime() - t0) / 2;
                for (size_t k = 0; k < len; k++)
                    if (buf[k] != (unsigned char)(k + i + len + 1)) {
                        fprintf(stderr, "bad byte %zu of %zu\n", k, len);
                        MPI_Abort(MPI_COMM_WORLD, 1);
                    }
            } else if (rank == 1) {
                MPI_Status st;
                int n;
                MPI_Recv(buf, (int)len, MPI_BYTE, 0, 1, MPI_COMM_WORLD, &st);
                MPI_Get_count(&st, MPI_BYTE, &n);
                if ((size_t)n != len) {
                    fprintf(stderr, "got %d of %zu\n", n, len);
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
                for (size_t k = 0; k < len; k++)
                    buf[k] = (unsigned char)(buf[k] + 1);
                MPI_Send(buf, (int)len, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
            }
        }
        if (rank == 0) {
            qsort(t, iters, sizeof(double), cmp);
            double med = t[iters / 2];
            printf("%-10zu %12.2f %12.1f\n", len, med * 1e6, len / med / 1e6);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("pingpong ok\n");
    free(buf);
    free(t);
    MPI_Finalize();
    return 0;
}
