/* Collectives with checked results on any number of ranks, and one 64 MiB message from
 * rank 0 to the last rank. Prints "collectives ok". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(c, ...)                                                          \
    do {                                                                       \
        if (!(c)) {                                                            \
            fprintf(stderr, "rank %d line %d: %s: ", rank, __LINE__, #c);      \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
            MPI_Abort(MPI_COMM_WORLD, 1);                                      \
        }                                                                      \
    } while (0)

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    enum { N = 1000 };
    int *a = malloc(sizeof(int) * N * size), *b = malloc(sizeof(int) * N * size);

    for (int i = 0; i < N; i++)
        a[i] = rank == 0 ? i * 3 : -1;
    MPI_Bcast(a, N, MPI_INT, 0, MPI_COMM_WORLD);
    for (int i = 0; i < N; i++)
        CHECK(a[i] == i * 3, "bcast");

    for (int i = 0; i < N; i++)
        a[i] = rank + i;
    MPI_Reduce(a, b, N, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        for (int i = 0; i < N; i++)
            CHECK(b[i] == size * i + size * (size - 1) / 2, "reduce");
    MPI_Allreduce(a, b, N, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    for (int i = 0; i < N; i++)
        CHECK(b[i] == size - 1 + i, "allreduce");

    for (int r = 0; r < size; r++)
        for (int i = 0; i < N; i++)
            a[r * N + i] = rank * 100000 + r * 1000 + i % 1000;
    MPI_Alltoall(a, N, MPI_INT, b, N, MPI_INT, MPI_COMM_WORLD);
    for (int r = 0; r < size; r++)
        for (int i = 0; i < N; i++)
            CHECK(b[r * N + i] == r * 100000 + rank * 1000 + i % 1000, "alltoall");

    for (int i = 0; i < N; i++)
        a[i] = rank * N + i;
    MPI_Gather(a, N, MPI_INT, b, N, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 0)
        for (int i = 0; i < N * size; i++)
            CHECK(b[i] == i, "gather");
    for (int i = 0; i < N * size; i++)
        a[i] = i * 2;
    MPI_Scatter(a, N, MPI_INT, b, N, MPI_INT, 0, MPI_COMM_WORLD);
    for (int i = 0; i < N; i++)
        CHECK(b[i] == (rank * N + i) * 2, "scatter");

    size_t big = 64 << 20;
    int last = size - 1;
    if (rank == 0 || rank == last) {
        unsigned char *m = malloc(big);
        if (rank == 0) {
            for (size_t i = 0; i < big; i++)
                m[i] = (unsigned char)(i * 13 + 1);
            MPI_Send(m, (int)big, MPI_BYTE, last, 64, MPI_COMM_WORLD);
        } else {
            MPI_Recv(m, (int)big, MPI_BYTE, 0, 64, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (size_t i = 0; i < big; i++)
                CHECK(m[i] == (unsigned char)(i * 13 + 1), "64 MiB byte %zu", i);
        }
        free(m);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("collectives ok\n");
    free(a);
    free(b);
    MPI_Finalize();
    return 0;
}
