/* A stand-in application for the loop of tune profile / tune app / tune verify --app where
 * no real application is linked to the MPI (Debian's LAMMPS links Open MPI 4.1.4 only):
 * a time-step loop of local work and the collectives an application typically makes
 * (a small allreduce every step, a larger allreduce and a bcast every tenth step).
 * Usage: standin_app [steps] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int steps = argc > 1 ? atoi(argv[1]) : 2000;
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    enum { BIG = 8192, WORK = 4096 };
    double *a = malloc(sizeof(double) * BIG), *b = malloc(sizeof(double) * BIG);
    double w[WORK], e = 0, s;
    char *msg = malloc(4096);
    for (int i = 0; i < BIG; i++)
        a[i] = rank + i;
    for (int i = 0; i < WORK; i++)
        w[i] = i;
    for (int i = 0; i < 4096; i++)
        msg[i] = (char)i;
    for (int step = 0; step < steps; step++) {
        for (int i = 0; i < WORK; i++)  /* local work */
            w[i] = w[i] * 0.999 + 0.001 * (double)step;
        e = w[step % WORK];
        MPI_Allreduce(&e, &s, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        if (step % 10 == 0) {
            MPI_Allreduce(a, b, BIG, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);  /* 64 KiB */
            MPI_Bcast(msg, 4096, MPI_CHAR, 0, MPI_COMM_WORLD);
        }
    }
    if (rank == 0)
        printf("%g %g\n", s, b[0]);
    free(a);
    free(b);
    free(msg);
    MPI_Finalize();
    return 0;
}
