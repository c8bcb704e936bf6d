/* MPI point-to-point semantics over the provider, on any number of ranks >= 2:
 * MPI_ANY_SOURCE/MPI_ANY_TAG with many unexpected messages (non-overtaking order
 * checked), MPI_Probe, MPI_Iprobe, MPI_Mprobe/MPI_Mrecv, sends to self, persistent
 * requests, MPI_Cancel of a receive, synchronous sends. Prints "matching ok". */
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
    enum { N = 200 };
    MPI_Status st;

    /* Many unexpected messages: every other rank sends N to rank 0 before rank 0
     * posts anything; rank 0 receives them with wildcards, in per-sender order. */
    if (rank != 0) {
        for (int i = 0; i < N; i++) {
            int v[2] = {rank, i};
            MPI_Send(v, 2, MPI_INT, 0, i % 7, MPI_COMM_WORLD);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        int next[64] = {0};
        for (int k = 0; k < N * (size - 1); k++) {
            int v[2];
            MPI_Recv(v, 2, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            CHECK(st.MPI_SOURCE == v[0] && st.MPI_TAG == v[1] % 7, "status");
            CHECK(v[1] == next[v[0]], "from %d got %d, expected %d", v[0], v[1], next[v[0]]);
            next[v[0]]++;
        }
    }

    /* Probe, Iprobe, Mprobe/Mrecv: rank 1 sends three tagged messages to rank 0. */
    if (rank == 1) {
        int a = 11, b = 22, c = 33;
        MPI_Send(&a, 1, MPI_INT, 0, 100, MPI_COMM_WORLD);
        MPI_Send(&b, 1, MPI_INT, 0, 101, MPI_COMM_WORLD);
        MPI_Send(&c, 1, MPI_INT, 0, 102, MPI_COMM_WORLD);
    } else if (rank == 0) {
        int v, flag = 0, count;
        MPI_Probe(1, 101, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_INT, &count);
        CHECK(st.MPI_TAG == 101 && count == 1, "probe");
        while (!flag)
            MPI_Iprobe(MPI_ANY_SOURCE, 102, MPI_COMM_WORLD, &flag, &st);
        CHECK(st.MPI_SOURCE == 1, "iprobe");
        MPI_Message m;
        MPI_Mprobe(1, 100, MPI_COMM_WORLD, &m, &st);
        MPI_Mrecv(&v, 1, MPI_INT, &m, &st);
        CHECK(v == 11, "mrecv %d", v);
        MPI_Recv(&v, 1, MPI_INT, 1, 102, MPI_COMM_WORLD, &st);
        CHECK(v == 33, "recv 102 %d", v);
        MPI_Recv(&v, 1, MPI_INT, 1, 101, MPI_COMM_WORLD, &st);
        CHECK(v == 22, "recv 101 %d", v);
    }

    /* Sends to self. */
    {
        int out = rank * 10, in = -1;
        MPI_Request r;
        MPI_Isend(&out, 1, MPI_INT, rank, 5, MPI_COMM_WORLD, &r);
        MPI_Recv(&in, 1, MPI_INT, rank, 5, MPI_COMM_WORLD, &st);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
        CHECK(in == out, "self %d", in);
    }

    /* Persistent requests around a ring. */
    {
        int to = (rank + 1) % size, from = (rank + size - 1) % size, out, in;
        MPI_Request rq[2];
        MPI_Send_init(&out, 1, MPI_INT, to, 6, MPI_COMM_WORLD, &rq[0]);
        MPI_Recv_init(&in, 1, MPI_INT, from, 6, MPI_COMM_WORLD, &rq[1]);
        for (int i = 0; i < 20; i++) {
            out = rank * 1000 + i;
            MPI_Startall(2, rq);
            MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
            CHECK(in == from * 1000 + i, "persistent %d", in);
        }
        MPI_Request_free(&rq[0]);
        MPI_Request_free(&rq[1]);
    }

    /* Cancel a receive nobody sends to. */
    {
        int v;
        MPI_Request r;
        MPI_Irecv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 999, MPI_COMM_WORLD, &r);
        MPI_Cancel(&r);
        MPI_Wait(&r, &st);
        int cancelled;
        MPI_Test_cancelled(&st, &cancelled);
        CHECK(cancelled, "receive not cancelled");
    }

    /* Synchronous sends, both directions between pairs. */
    if (rank < 2) {
        int v = rank + 40, in;
        if (rank == 0) {
            MPI_Ssend(&v, 1, MPI_INT, 1, 7, MPI_COMM_WORLD);
            MPI_Recv(&in, 1, MPI_INT, 1, 7, MPI_COMM_WORLD, &st);
            CHECK(in == 41, "ssend %d", in);
        } else {
            MPI_Recv(&in, 1, MPI_INT, 0, 7, MPI_COMM_WORLD, &st);
            MPI_Ssend(&v, 1, MPI_INT, 0, 7, MPI_COMM_WORLD);
            CHECK(in == 40, "ssend %d", in);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("matching ok\n");
    MPI_Finalize();
    return 0;
}
