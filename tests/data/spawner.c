/* A rank that starts programs of its own: `system()` runs a shell that records its
 * environment (argv[1]: where), and rank 0 spawns one copy of this program (MPI_Comm_spawn)
 * that makes a 1-rank allreduce of its own. The job's ranks allreduce over 2 ranks. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Comm parent, child;
    int x = 1, y = 0, rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_get_parent(&parent);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (parent != MPI_COMM_NULL) {
        MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Comm_disconnect(&parent);
        MPI_Finalize();
        return 0;
    }
    if (argc > 1 && rank == 0) {
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "env > %.4000s", argv[1]);
        if (system(cmd) != 0)
            return 1;
    }
    for (int i = 0; i < 3; i++)
        MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Comm_spawn(argv[0], MPI_ARGV_NULL, 1, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &child,
                   MPI_ERRCODES_IGNORE);
    MPI_Comm_disconnect(&child);
    MPI_Finalize();
    return 0;
}
