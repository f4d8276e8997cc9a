/* collprof's Fortran wrappers (collprof.c says why they exist): each times the library's
 * own entry of the same name, found with dlsym(RTLD_NEXT). */
#define _GNU_SOURCE /* RTLD_NEXT */
#include <mpi.h>
#include <string.h>

#include "../common/fnext.h"
#include "prof.h"

/* ---- Fortran bindings: mpif.h and `use mpi` (gfortran's mpi_x_), Open MPI's mpi_f08
 * (mpi_x_f08_: the same arguments, handles by reference). Each entry times the call and
 * hands it to the library's own entry of the same name. ---- */

static long long ftype(const MPI_Fint *t)
{
    return tsize(MPI_Type_f2c(*t));
}

static int fdtype(const MPI_Fint *t)
{
    return dtype_of(MPI_Type_f2c(*t));
}

/* one Fortran entry: the library's own definition of the same name, timed (`comm` and
 * `ierr` are among every entry's parameters) */
#define FORTRAN_ENTRY(sym, coll, params, args, bytes, dt)                                 \
    void sym params                                                                       \
    {                                                                                     \
        static fvoid_t cache;                                                             \
        fvoid_t next = next_of(&cache, #sym);                                             \
        if (!next) {                                                                      \
            if (ierr)                                                                     \
                *ierr = MPI_ERR_OTHER;                                                    \
            return;                                                                       \
        }                                                                                 \
        long long b = (bytes);                                                            \
        int d = (dt);                                                                     \
        double t0 = now();                                                                \
        in_fortran++;                                                                     \
        ((void(*) params)next) args;                                                      \
        in_fortran--;                                                                     \
        record(coll, MPI_Comm_f2c(*comm), b, d, t0, now());                               \
    }

/* the two Fortran names of one collective, gfortran's (mpif.h, `use mpi`) and Open MPI's
 * f08: its parameters, the arguments passed on, the bytes of one rank's block, and what it
 * sums (DT_NONE: a collective that sums nothing) */
#define FORTRAN_SUM(name, coll, params, args, bytes, dt)                                  \
    FORTRAN_ENTRY(mpi_##name##_, coll, params, args, bytes, dt)                           \
    FORTRAN_ENTRY(mpi_##name##_f08_, coll, params, args, bytes, dt)
#define FORTRAN_COLL(name, coll, params, args, bytes)                                     \
    FORTRAN_SUM(name, coll, params, args, bytes, DT_NONE)

/* the mean of a per-rank count array over the communicator */
static long long fmean(const MPI_Fint *counts, const MPI_Fint *comm)
{
    int n = csize(MPI_Comm_f2c(*comm));
    long long s = 0;
    for (int i = 0; i < n; i++)
        s += counts[i];
    return n ? s / n : 0;
}

FORTRAN_COLL(barrier, C_BARRIER,
             (MPI_Fint *comm, MPI_Fint *ierr),
             (comm, ierr),
             0)
FORTRAN_COLL(bcast, C_BCAST,
             (void *buf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *root, MPI_Fint *comm,
              MPI_Fint *ierr),
             (buf, count, type, root, comm, ierr),
             (long long)*count * ftype(type))
FORTRAN_SUM(reduce, C_REDUCE,
             (void *s, void *r, MPI_Fint *count, MPI_Fint *type, MPI_Fint *op, MPI_Fint *root,
              MPI_Fint *comm, MPI_Fint *ierr),
             (s, r, count, type, op, root, comm, ierr),
             (long long)*count * ftype(type),
             fdtype(type))
FORTRAN_SUM(allreduce, C_ALLREDUCE,
             (void *s, void *r, MPI_Fint *count, MPI_Fint *type, MPI_Fint *op, MPI_Fint *comm,
              MPI_Fint *ierr),
             (s, r, count, type, op, comm, ierr),
             (long long)*count * ftype(type),
             fdtype(type))
FORTRAN_SUM(scan, C_SCAN,
             (void *s, void *r, MPI_Fint *count, MPI_Fint *type, MPI_Fint *op, MPI_Fint *comm,
              MPI_Fint *ierr),
             (s, r, count, type, op, comm, ierr),
             (long long)*count * ftype(type),
             fdtype(type))
FORTRAN_SUM(exscan, C_EXSCAN,
             (void *s, void *r, MPI_Fint *count, MPI_Fint *type, MPI_Fint *op, MPI_Fint *comm,
              MPI_Fint *ierr),
             (s, r, count, type, op, comm, ierr),
             (long long)*count * ftype(type),
             fdtype(type))
FORTRAN_SUM(reduce_scatter_block, C_REDUCE_SCATTER_BLOCK,
             (void *s, void *r, MPI_Fint *count, MPI_Fint *type, MPI_Fint *op, MPI_Fint *comm,
              MPI_Fint *ierr),
             (s, r, count, type, op, comm, ierr),
             (long long)*count * ftype(type),
             fdtype(type))
FORTRAN_SUM(reduce_scatter, C_REDUCE_SCATTER,
             (void *s, void *r, MPI_Fint *counts, MPI_Fint *type, MPI_Fint *op, MPI_Fint *comm,
              MPI_Fint *ierr),
             (s, r, counts, type, op, comm, ierr),
             fmean(counts, comm) * ftype(type),
             fdtype(type))
FORTRAN_COLL(allgather, C_ALLGATHER,
             (void *s, MPI_Fint *scount, MPI_Fint *stype, void *r, MPI_Fint *rcount,
              MPI_Fint *rtype, MPI_Fint *comm, MPI_Fint *ierr),
             (s, scount, stype, r, rcount, rtype, comm, ierr),
             (long long)*scount * ftype(stype))
FORTRAN_COLL(alltoall, C_ALLTOALL,
             (void *s, MPI_Fint *scount, MPI_Fint *stype, void *r, MPI_Fint *rcount,
              MPI_Fint *rtype, MPI_Fint *comm, MPI_Fint *ierr),
             (s, scount, stype, r, rcount, rtype, comm, ierr),
             (long long)*scount * ftype(stype))
FORTRAN_COLL(gather, C_GATHER,
             (void *s, MPI_Fint *scount, MPI_Fint *stype, void *r, MPI_Fint *rcount,
              MPI_Fint *rtype, MPI_Fint *root, MPI_Fint *comm, MPI_Fint *ierr),
             (s, scount, stype, r, rcount, rtype, root, comm, ierr),
             (long long)*scount * ftype(stype))
FORTRAN_COLL(scatter, C_SCATTER,
             (void *s, MPI_Fint *scount, MPI_Fint *stype, void *r, MPI_Fint *rcount,
              MPI_Fint *rtype, MPI_Fint *root, MPI_Fint *comm, MPI_Fint *ierr),
             (s, scount, stype, r, rcount, rtype, root, comm, ierr),
             (long long)*rcount * ftype(rtype))
FORTRAN_COLL(allgatherv, C_ALLGATHERV,
             (void *s, MPI_Fint *scount, MPI_Fint *stype, void *r, MPI_Fint *rcounts,
              MPI_Fint *displs, MPI_Fint *rtype, MPI_Fint *comm, MPI_Fint *ierr),
             (s, scount, stype, r, rcounts, displs, rtype, comm, ierr),
             fmean(rcounts, comm) * ftype(rtype))
FORTRAN_COLL(gatherv, C_GATHERV,
             (void *s, MPI_Fint *scount, MPI_Fint *stype, void *r, MPI_Fint *rcounts,
              MPI_Fint *displs, MPI_Fint *rtype, MPI_Fint *root, MPI_Fint *comm, MPI_Fint *ierr),
             (s, scount, stype, r, rcounts, displs, rtype, root, comm, ierr),
             (long long)*scount * ftype(stype))
FORTRAN_COLL(scatterv, C_SCATTERV,
             (void *s, MPI_Fint *scounts, MPI_Fint *displs, MPI_Fint *stype, void *r,
              MPI_Fint *rcount, MPI_Fint *rtype, MPI_Fint *root, MPI_Fint *comm, MPI_Fint *ierr),
             (s, scounts, displs, stype, r, rcount, rtype, root, comm, ierr),
             (long long)*rcount * ftype(rtype))
FORTRAN_COLL(alltoallv, C_ALLTOALLV,
             (void *s, MPI_Fint *scounts, MPI_Fint *sdispls, MPI_Fint *stype, void *r,
              MPI_Fint *rcounts, MPI_Fint *rdispls, MPI_Fint *rtype, MPI_Fint *comm,
              MPI_Fint *ierr),
             (s, scounts, sdispls, stype, r, rcounts, rdispls, rtype, comm, ierr),
             fmean(rcounts, comm) * ftype(rtype))

/* start and end through Fortran: the library's own entry, then our bookkeeping (its
 * entry may call MPI_Init/MPI_Finalize, ours: `written` keeps the record single). `before`
 * and `after` run around the library's entry. */
#define FORTRAN_EDGE(sym, params, args, before, after)                                    \
    void sym params                                                                       \
    {                                                                                     \
        static fvoid_t cache;                                                             \
        before;                                                                           \
        fvoid_t next = next_of(&cache, #sym);                                             \
        if (!next) {                                                                      \
            if (ierr)                                                                     \
                *ierr = MPI_ERR_OTHER;                                                    \
            return;                                                                       \
        }                                                                                 \
        ((void(*) params)next) args;                                                      \
        after;                                                                            \
    }

/* gfortran's (mpif.h, `use mpi`) and Open MPI's mpi_f08 (MPICH's: the same names) */
FORTRAN_EDGE(mpi_init_, (MPI_Fint *ierr), (ierr), (void)0, on_init())
FORTRAN_EDGE(mpi_init_f08_, (MPI_Fint *ierr), (ierr), (void)0, on_init())
FORTRAN_EDGE(mpi_init_thread_, (MPI_Fint *required, MPI_Fint *provided, MPI_Fint *ierr),
             (required, provided, ierr), (void)0, on_init())
FORTRAN_EDGE(mpi_init_thread_f08_, (MPI_Fint *required, MPI_Fint *provided, MPI_Fint *ierr),
             (required, provided, ierr), (void)0, on_init())
FORTRAN_EDGE(mpi_finalize_, (MPI_Fint *ierr), (ierr), write_profile(), (void)0)
FORTRAN_EDGE(mpi_finalize_f08_, (MPI_Fint *ierr), (ierr), write_profile(), (void)0)
