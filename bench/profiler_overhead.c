/* Cost of tune profile's wrappers per call: N calls of a collective that does almost
 * nothing (MPI_Barrier and an 8-byte MPI_Allreduce on MPI_COMM_SELF), timed with and
 * without the profiler preloaded (bench/profiler_overhead.py runs both). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 1000000;
    double x = 1, y;
    MPI_Init(&argc, &argv);
    for (int i = 0; i < 1000; i++)
        MPI_Barrier(MPI_COMM_SELF);
    double t0 = MPI_Wtime();
    for (int i = 0; i < n; i++)
        MPI_Barrier(MPI_COMM_SELF);
    double t1 = MPI_Wtime();
    for (int i = 0; i < n; i++)
        MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_SELF);
    double t2 = MPI_Wtime();
    printf("barrier %.6g allreduce %.6g\n", (t1 - t0) / n, (t2 - t1) / n);
    MPI_Finalize();
    return 0;
}
