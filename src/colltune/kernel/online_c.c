/* collonline's C wrappers: each blocking collective the layer tunes, routed (online.h),
 * timed from this rank's entry, made again with the library's choice where a candidate
 * refused it; and the start and end of the run. */
#include <mpi.h>

#include "online.h"

#define ROUTED(c, comm, bytes, ok, call_on)                                               \
    do {                                                                                  \
        call_t call_;                                                                     \
        MPI_Comm on_ = route(c, comm, bytes, ok, &call_);                                 \
        double t0_ = PMPI_Wtime();                                                        \
        int rc_ = call_on;                                                                \
        if (refused_call(&call_, rc_)) {                                                  \
            on_ = comm;                                                                   \
            t0_ = PMPI_Wtime();                                                           \
            rc_ = call_on;                                                                \
        }                                                                                 \
        timed(&call_, t0_, PMPI_Wtime());                                                 \
        return rc_;                                                                       \
    } while (0)


int MPI_Allreduce(const void *s, void *r, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm)
{
    ROUTED(O_ALLREDUCE, comm, tbytes(count, t), builtin_op(op),
           PMPI_Allreduce(s, r, count, t, op, on_));
}

int MPI_Bcast(void *buf, int count, MPI_Datatype t, int root, MPI_Comm comm)
{
    ROUTED(O_BCAST, comm, tbytes(count, t), 1, PMPI_Bcast(buf, count, t, root, on_));
}

int MPI_Reduce(const void *s, void *r, int count, MPI_Datatype t, MPI_Op op, int root,
               MPI_Comm comm)
{
    ROUTED(O_REDUCE, comm, tbytes(count, t), builtin_op(op),
           PMPI_Reduce(s, r, count, t, op, root, on_));
}

int MPI_Allgather(const void *s, int sc, MPI_Datatype st, void *r, int rc, MPI_Datatype rt,
                  MPI_Comm comm)
{
    ROUTED(O_ALLGATHER, comm, s == MPI_IN_PLACE ? tbytes(rc, rt) : tbytes(sc, st), 1,
           PMPI_Allgather(s, sc, st, r, rc, rt, on_));
}

int MPI_Alltoall(const void *s, int sc, MPI_Datatype st, void *r, int rc, MPI_Datatype rt,
                 MPI_Comm comm)
{
    ROUTED(O_ALLTOALL, comm, s == MPI_IN_PLACE ? tbytes(rc, rt) : tbytes(sc, st), 1,
           PMPI_Alltoall(s, sc, st, r, rc, rt, on_));
}

int MPI_Barrier(MPI_Comm comm)
{
    ROUTED(O_BARRIER, comm, 0, 1, PMPI_Barrier(on_));
}

int MPI_Init(int *argc, char ***argv)
{
    int rc = PMPI_Init(argc, argv);
    start();
    return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    refuse_threads(required);
    start();
    return rc;
}

int MPI_Finalize(void)
{
    finish();
    return PMPI_Finalize();
}
