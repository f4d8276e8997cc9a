/* A program whose arrival pattern is known: before each of its calls, world rank LATE
 * (argv[2], default the last) sleeps DELAY microseconds (argv[1]) while the others enter at
 * once. CALLS (argv[3], default 200) calls of MPI_Allreduce of 8 doubles on MPI_COMM_WORLD,
 * then as many MPI_Bcast of 1 KiB on halves of the world (consecutive ranks, a split), the
 * late rank sleeping there too. The profile must find the spread and name the late rank. */
#define _POSIX_C_SOURCE 199309L
#include <mpi.h>
#include <stdlib.h>
#include <time.h>

static void pause_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

int main(int argc, char **argv)
{
    int rank, size, late, calls;
    long delay;
    double x[8] = {0}, y[8];
    char block[1024] = {0};
    MPI_Comm half;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    delay = argc > 1 ? atol(argv[1]) : 2000;
    late = argc > 2 ? atoi(argv[2]) : size - 1;
    calls = argc > 3 ? atoi(argv[3]) : 200;
    for (int i = 0; i < calls; i++) {
        if (rank == late)
            pause_us(delay);
        MPI_Allreduce(x, y, 8, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    MPI_Comm_split(MPI_COMM_WORLD, rank < size / 2, rank, &half);
    for (int i = 0; i < calls; i++) {
        if (rank == late)
            pause_us(delay);
        MPI_Bcast(block, (int)sizeof block, MPI_CHAR, 0, half);
    }
    MPI_Comm_free(&half);
    MPI_Finalize();
    return 0;
}
