/* 48 calls of MPI_Allreduce on 8 bytes; compiled with -DLATE_FROM=16, rank 1 enters every
 * call from the 17th on 2 ms late (every rank's call then waits): a synthetic change after
 * 16 calls. Without it: whatever the library itself does over its first calls. */
#define _POSIX_C_SOURCE 199309L
#include <mpi.h>
#include <time.h>
#ifndef LATE_FROM
#define LATE_FROM 1000000
#endif

int main(int argc, char **argv)
{
    int rank;
    double x = 1.0, y;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (int i = 0; i < 48; i++) {
        if (rank == 1 && i >= LATE_FROM)
            nanosleep(&(struct timespec){0, 2000000}, NULL);
        MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    MPI_Finalize();
    return 0;
}
