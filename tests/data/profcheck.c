/* A program with exactly known collective calls, to check `tune profile` against: on
 * MPI_COMM_WORLD (np ranks), on a dup of it, and on the halves of a split (np/2 ranks each
 * for an even np). Every count below is asserted by tests/test_profile.py. */
#include <mpi.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int rank, np;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    double d[256] = {0}, e[256];
    char c[4096] = {0};
    char *big = calloc((size_t)np, 4096);
    int *counts = malloc(sizeof(int) * (size_t)np), *displs = malloc(sizeof(int) * (size_t)np);
    for (int i = 0; i < 3; i++)  /* 100 doubles: 800 B, bucket 1024 */
        MPI_Allreduce(d, e, 100, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < 5; i++)  /* 16 B */
        MPI_Bcast(c, 16, MPI_CHAR, 0, MPI_COMM_WORLD);
    MPI_Comm half, dup;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    for (int i = 0; i < 7; i++)  /* 1 int: 4 B, on a communicator of np/2 */
        MPI_Reduce(d, e, 1, MPI_INT, MPI_SUM, 0, half);
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    for (int i = 0; i < 4; i++)
        MPI_Barrier(dup);
    for (int i = 0; i < np; i++) {
        counts[i] = 32;
        displs[i] = 32 * i;
    }
    for (int i = 0; i < 2; i++)  /* 32 B from every rank */
        MPI_Allgatherv(c, 32, MPI_CHAR, big, counts, displs, MPI_CHAR, MPI_COMM_WORLD);
    MPI_Gatherv(c, 32, MPI_CHAR, big, counts, displs, MPI_CHAR, 0, MPI_COMM_WORLD);
    for (int i = 0; i < 2; i++)  /* 32 B to every peer */
        MPI_Alltoallv(c, counts, displs, MPI_CHAR, big, counts, displs, MPI_CHAR, dup);
    MPI_Request q;  /* counted, not tuned */
    MPI_Iallreduce(d, e, 8, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &q);
    MPI_Wait(&q, MPI_STATUS_IGNORE);
    MPI_Comm_free(&dup);
    MPI_Comm_free(&half);
    free(big);
    free(counts);
    free(displs);
    MPI_Finalize();
    return 0;
}
