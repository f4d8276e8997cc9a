/* collonline's C wrappers: each blocking collective the layer tunes, routed (online.h),
 * timed from this rank's entry, made again with the library's choice where a candidate
 * refused it, checked where it is a candidate's first call; and the start and end of the
 * run. */
#include <mpi.h>
#include <string.h>

#include "online.h"

/* the call `call_on`, on `on_` (routed), timed from this rank's entry into `t0_`..`t1_`
 * and made again with the library's choice where a candidate refused it; `rc_` its code */
#define CALLED(comm, call_on)                                                             \
    double t0_ = PMPI_Wtime();                                                            \
    int rc_ = call_on;                                                                    \
    if (refused_call(&call_, rc_)) {                                                      \
        on_ = comm;                                                                       \
        t0_ = PMPI_Wtime();                                                               \
        rc_ = call_on;                                                                    \
    }                                                                                     \
    double t1_ = PMPI_Wtime();                                                            \
    restore(&call_)

/* bytes of `count` elements of a plain type (plain_type) */
static size_t span(int count, MPI_Datatype t)
{
    return count > 0 ? (size_t)tbytes(count, t) : 0;
}

/* A wrapper: routed, called, checked where it is a candidate's first call (online_check.c:
 * the input copied before, the library's own answer made on the private duplicate after,
 * outside the call's time), then timed. */

int MPI_Allreduce(const void *s, void *r, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm)
{
    call_t call_;
    check_t ck;
    MPI_Comm on_ = route(O_ALLREDUCE, comm, tbytes(count, t), builtin_op(op), &call_);
    int checked = call_.check
                  && check_prepare(&call_, plain_type(t) && checkable_op(t, op),
                                   s == MPI_IN_PLACE ? r : s, span(count, t), span(count, t),
                                   &ck);
    CALLED(comm, PMPI_Allreduce(s, r, count, t, op, on_));
    if (checked) {
        PMPI_Allreduce(ck.in, ck.ref, count, t, op, call_.s->priv);
        check_verdict(&call_, &ck, r, span(count, t), t, op);
    }
    timed(&call_, t0_, t1_);
    return rc_;
}

int MPI_Bcast(void *buf, int count, MPI_Datatype t, int root, MPI_Comm comm)
{
    call_t call_;
    check_t ck;
    MPI_Comm on_ = route(O_BCAST, comm, tbytes(count, t), 1, &call_);
    int me = call_.check ? call_.s->rank : -1;
    int checked = call_.check && check_prepare(&call_, plain_type(t), me == root ? buf : NULL,
                                               span(count, t), span(count, t), &ck);
    CALLED(comm, PMPI_Bcast(buf, count, t, root, on_));
    if (checked) {
        if (me == root)
            memcpy(ck.ref, ck.in, span(count, t));
        PMPI_Bcast(ck.ref, count, t, root, call_.s->priv);
        check_verdict(&call_, &ck, buf, span(count, t), t, MPI_OP_NULL);
    }
    timed(&call_, t0_, t1_);
    return rc_;
}

int MPI_Reduce(const void *s, void *r, int count, MPI_Datatype t, MPI_Op op, int root,
               MPI_Comm comm)
{
    call_t call_;
    check_t ck;
    MPI_Comm on_ = route(O_REDUCE, comm, tbytes(count, t), builtin_op(op), &call_);
    int me = call_.check ? call_.s->rank : -1;
    int checked = call_.check
                  && check_prepare(&call_, plain_type(t) && checkable_op(t, op),
                                   s == MPI_IN_PLACE ? r : s, span(count, t), span(count, t),
                                   &ck);
    CALLED(comm, PMPI_Reduce(s, r, count, t, op, root, on_));
    if (checked) {
        PMPI_Reduce(ck.in, ck.ref, count, t, op, root, call_.s->priv);
        check_verdict(&call_, &ck, me == root ? r : NULL, span(count, t), t, op);
    }
    timed(&call_, t0_, t1_);
    return rc_;
}

/* allgather and alltoall: checked where their types are plain, the whole receive buffer
 * (`*all` bytes) compared; its copy kept where the call is in place (the reference is then
 * made in place in it), else the reference is made from the unchanged send buffer */
static int blocks_prepare(call_t *call, const void *s, MPI_Datatype st, void *r, int rc,
                          MPI_Datatype rt, check_t *ck, size_t *all)
{
    int n = 0, inplace = s == MPI_IN_PLACE;
    if (!call->check)
        return 0;
    PMPI_Comm_size(call->s->comm, &n);
    *all = span(rc, rt) * (size_t)n;
    return check_prepare(call, plain_type(rt) && (inplace || plain_type(st)),
                         inplace ? r : NULL, inplace ? *all : 0, *all, ck);
}

int MPI_Allgather(const void *s, int sc, MPI_Datatype st, void *r, int rc, MPI_Datatype rt,
                  MPI_Comm comm)
{
    call_t call_;
    check_t ck;
    size_t all = 0;
    MPI_Comm on_ = route(O_ALLGATHER, comm, s == MPI_IN_PLACE ? tbytes(rc, rt) : tbytes(sc, st),
                         1, &call_);
    int checked = blocks_prepare(&call_, s, st, r, rc, rt, &ck, &all);
    CALLED(comm, PMPI_Allgather(s, sc, st, r, rc, rt, on_));
    if (checked) {
        if (s == MPI_IN_PLACE)
            memcpy(ck.ref, ck.in, all);
        PMPI_Allgather(s, sc, st, ck.ref, rc, rt, call_.s->priv);
        check_verdict(&call_, &ck, r, all, rt, MPI_OP_NULL);
    }
    timed(&call_, t0_, t1_);
    return rc_;
}

int MPI_Alltoall(const void *s, int sc, MPI_Datatype st, void *r, int rc, MPI_Datatype rt,
                 MPI_Comm comm)
{
    call_t call_;
    check_t ck;
    size_t all = 0;
    MPI_Comm on_ = route(O_ALLTOALL, comm, s == MPI_IN_PLACE ? tbytes(rc, rt) : tbytes(sc, st),
                         1, &call_);
    int checked = blocks_prepare(&call_, s, st, r, rc, rt, &ck, &all);
    CALLED(comm, PMPI_Alltoall(s, sc, st, r, rc, rt, on_));
    if (checked) {
        if (s == MPI_IN_PLACE)
            memcpy(ck.ref, ck.in, all);
        PMPI_Alltoall(s, sc, st, ck.ref, rc, rt, call_.s->priv);
        check_verdict(&call_, &ck, r, all, rt, MPI_OP_NULL);
    }
    timed(&call_, t0_, t1_);
    return rc_;
}

int MPI_Barrier(MPI_Comm comm)
{
    call_t call_;
    MPI_Comm on_ = route(O_BARRIER, comm, 0, 1, &call_);
    CALLED(comm, PMPI_Barrier(on_)); /* nothing to check */
    timed(&call_, t0_, t1_);
    return rc_;
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
