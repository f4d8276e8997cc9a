/* collonline's Fortran wrappers: the library's Fortran entries call PMPI_ directly, so
 * each is wrapped, routed as the C call (online.h) and handed the candidate's communicator
 * as a Fortran handle; the library's own entry does the rest (MPI_IN_PLACE and the other
 * Fortran sentinels stay its business). */
#define _GNU_SOURCE /* RTLD_NEXT */
#include <mpi.h>

#include "../common/fnext.h"
#include "online.h"

static long long ftbytes(const MPI_Fint *count, const MPI_Fint *type)
{
    return tbytes((int)*count, MPI_Type_f2c(*type));
}

/* the library's own entry `sym`, as `next`; none: the call fails (every entry has `ierr`) */
#define F_NEXT(sym)                                                                       \
    static fvoid_t cache;                                                                 \
    fvoid_t next = next_of(&cache, #sym);                                                 \
    if (!next) {                                                                          \
        *ierr = MPI_ERR_OTHER;                                                            \
        return;                                                                           \
    }

/* one Fortran entry of collective `c`: routed as the C call, `fcomm` the handle passed on */
#define F_ROUTED(sym, c, params, args, bytes, ok)                                         \
    void sym params                                                                       \
    {                                                                                     \
        F_NEXT(sym);                                                                      \
        call_t call_;                                                                     \
        MPI_Fint fcomm_ = MPI_Comm_c2f(route(c, MPI_Comm_f2c(*comm), bytes, ok, &call_)); \
        MPI_Fint *fcomm = &fcomm_;                                                        \
        double t0_ = PMPI_Wtime();                                                        \
        in_fortran++;                                                                     \
        ((void(*) params)next) args;                                                      \
        if (refused_call(&call_, (int)*ierr)) {                                           \
            fcomm_ = *comm;                                                               \
            t0_ = PMPI_Wtime();                                                           \
            ((void(*) params)next) args;                                                  \
        }                                                                                 \
        in_fortran--;                                                                     \
        timed(&call_, t0_, PMPI_Wtime());                                                 \
    }

#define F_BOTH(name, c, params, args, bytes, ok)                                          \
    F_ROUTED(mpi_##name##_, c, params, args, bytes, ok)                                   \
    F_ROUTED(mpi_##name##_f08_, c, params, args, bytes, ok)

F_BOTH(allreduce, O_ALLREDUCE,
       (void *s, void *r, MPI_Fint *count, MPI_Fint *type, MPI_Fint *op, MPI_Fint *comm,
        MPI_Fint *ierr),
       (s, r, count, type, op, fcomm, ierr), ftbytes(count, type),
       builtin_op(MPI_Op_f2c(*op)))
F_BOTH(bcast, O_BCAST,
       (void *buf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *root, MPI_Fint *comm,
        MPI_Fint *ierr),
       (buf, count, type, root, fcomm, ierr), ftbytes(count, type), 1)
F_BOTH(reduce, O_REDUCE,
       (void *s, void *r, MPI_Fint *count, MPI_Fint *type, MPI_Fint *op, MPI_Fint *root,
        MPI_Fint *comm, MPI_Fint *ierr),
       (s, r, count, type, op, root, fcomm, ierr), ftbytes(count, type),
       builtin_op(MPI_Op_f2c(*op)))
F_BOTH(allgather, O_ALLGATHER,
       (void *s, MPI_Fint *scount, MPI_Fint *stype, void *r, MPI_Fint *rcount,
        MPI_Fint *rtype, MPI_Fint *comm, MPI_Fint *ierr),
       (s, scount, stype, r, rcount, rtype, fcomm, ierr), ftbytes(rcount, rtype), 1)
F_BOTH(alltoall, O_ALLTOALL,
       (void *s, MPI_Fint *scount, MPI_Fint *stype, void *r, MPI_Fint *rcount,
        MPI_Fint *rtype, MPI_Fint *comm, MPI_Fint *ierr),
       (s, scount, stype, r, rcount, rtype, fcomm, ierr), ftbytes(rcount, rtype), 1)
F_BOTH(barrier, O_BARRIER, (MPI_Fint *comm, MPI_Fint *ierr), (fcomm, ierr), 0, 1)

/* start and end through Fortran: the library's own entry, and the layer's around it */
#define F_EDGE(sym, params, args, before, after)                                          \
    void sym params                                                                       \
    {                                                                                     \
        F_NEXT(sym);                                                                      \
        before;                                                                           \
        ((void(*) params)next) args;                                                      \
        after;                                                                            \
    }

F_EDGE(mpi_init_, (MPI_Fint *ierr), (ierr), (void)0, start())
F_EDGE(mpi_init_f08_, (MPI_Fint *ierr), (ierr), (void)0, start())
F_EDGE(mpi_init_thread_, (MPI_Fint *required, MPI_Fint *provided, MPI_Fint *ierr),
       (required, provided, ierr), (void)0, (refuse_threads((int)*required), start()))
F_EDGE(mpi_init_thread_f08_, (MPI_Fint *required, MPI_Fint *provided, MPI_Fint *ierr),
       (required, provided, ierr), (void)0, (refuse_threads((int)*required), start()))
F_EDGE(mpi_finalize_, (MPI_Fint *ierr), (ierr), finish(), (void)0)
F_EDGE(mpi_finalize_f08_, (MPI_Fint *ierr), (ierr), finish(), (void)0)
