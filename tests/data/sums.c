/* Reductions of a named datatype, for the profiler's record of what a reduction sums:
 *   sums TYPE COUNT CALLS
 * TYPE: char (MPI_UNSIGNED_CHAR), float, complex (MPI_C_DOUBLE_COMPLEX: a type the
 * kernel does not sum) or mixed (chars and floats by turns, the same bytes a call).
 * Every rank allreduces COUNT elements CALLS times on MPI_COMM_WORLD, then reduces one
 * int to rank 0 once. */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    if (argc != 4) {
        MPI_Abort(MPI_COMM_WORLD, 2);
        return 2;
    }
    int count = atoi(argv[2]), calls = atoi(argv[3]), one = 1, sum = 0;
    MPI_Datatype t = strcmp(argv[1], "float") == 0     ? MPI_FLOAT
                     : strcmp(argv[1], "complex") == 0 ? MPI_C_DOUBLE_COMPLEX
                                                       : MPI_UNSIGNED_CHAR;
    char *in = calloc((size_t)count, 16), *out = calloc((size_t)count, 16); /* any type's */
    for (int i = 0; i < calls; i++) {
        if (strcmp(argv[1], "mixed") == 0 && i % 2) /* as many bytes in floats */
            MPI_Allreduce(in, out, count / 4, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        else
            MPI_Allreduce(in, out, count, t, MPI_SUM, MPI_COMM_WORLD);
    }
    MPI_Reduce(&one, &sum, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    free(in);
    free(out);
    MPI_Finalize();
    return 0;
}
