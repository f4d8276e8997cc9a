/* Point-to-point between two ranks (bench/links_bench.py): the one-way time of 8 B and the
 * bandwidth of 4 MiB messages, ping-pong, after a warm-up round. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv)
{
    int rank, sizes[] = {8, 4 << 20};
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char *buf = malloc(4 << 20);
    for (int s = 0; s < 2; s++) {
        int n = sizes[s], reps = s ? 10 : 200;
        for (int w = 0; w < 2; w++) { /* warm-up, then timed */
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (int i = 0; i < reps; i++) {
                if (rank == 0) {
                    MPI_Send(buf, n, MPI_CHAR, 1, 0, MPI_COMM_WORLD);
                    MPI_Recv(buf, n, MPI_CHAR, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    MPI_Recv(buf, n, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(buf, n, MPI_CHAR, 0, 0, MPI_COMM_WORLD);
                }
            }
            double half = (MPI_Wtime() - t0) / reps / 2;
            if (w && rank == 0)
                printf("%d B: %.1f us one way, %.1f MB/s\n", n, half * 1e6, n / half / 1e6);
        }
    }
    MPI_Finalize();
    return 0;
}
