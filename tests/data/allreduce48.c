/* 48 calls of MPI_Allreduce on 8 bytes; compiled with -DLATE_FROM=16, every call from the
 * 17th on sums through an operation that takes 5 ms: a synthetic change after 16 calls.
 * The time is spent inside the call on the ranks that reduce, so no scheduling of the
 * ranks between calls can hide it (a rank arriving late could: a rank preempted for as
 * long as its peer was late found the peer's data waiting). Without -DLATE_FROM: whatever
 * the library itself does over its first calls. */
#define _POSIX_C_SOURCE 199309L
#include <mpi.h>
#include <time.h>
#ifndef LATE_FROM
#define LATE_FROM 1000000
#endif

static void slow_sum(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    nanosleep(&(struct timespec){0, 5000000}, NULL);
    for (int i = 0; i < *len; i++)
        ((double *)inout)[i] += ((double *)in)[i];
}

int main(int argc, char **argv)
{
    double x = 1.0, y;
    MPI_Op slow;
    MPI_Init(&argc, &argv);
    MPI_Op_create(slow_sum, 1, &slow);
    for (int i = 0; i < 48; i++)
        MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, i >= LATE_FROM ? slow : MPI_SUM, MPI_COMM_WORLD);
    MPI_Op_free(&slow);
    MPI_Finalize();
    return 0;
}
