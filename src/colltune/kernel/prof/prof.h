/* collprof's shared declarations: the collective and nonblocking indices, the record
 * every wrapper feeds, and the start and end (collprof.c says what the profiler does).
 * Hidden: a preloaded library's internal names must never bind to an application's own
 * functions of the same name (an executable's `now` or `record` would win otherwise). */
#ifndef COLLTUNE_PROF_H
#define COLLTUNE_PROF_H

#include <mpi.h>
#include <stdio.h>
#include <time.h> /* clock_gettime: each includer defines _POSIX_C_SOURCE or _GNU_SOURCE */

#pragma GCC visibility push(hidden)

enum {
    C_ALLGATHER, C_ALLGATHERV, C_ALLREDUCE, C_ALLTOALL, C_ALLTOALLV, C_BARRIER, C_BCAST,
    C_EXSCAN, C_GATHER, C_GATHERV, C_REDUCE, C_REDUCE_SCATTER, C_REDUCE_SCATTER_BLOCK,
    C_SCAN, C_SCATTER, C_SCATTERV, C_ALLTOALLW, N_COLL
};

enum {
    I_ALLGATHER, I_ALLGATHERV, I_ALLREDUCE, I_ALLTOALL, I_ALLTOALLV, I_ALLTOALLW, I_BARRIER,
    I_BCAST, I_EXSCAN, I_GATHER, I_GATHERV, I_REDUCE, I_REDUCE_SCATTER,
    I_REDUCE_SCATTER_BLOCK, I_SCAN, I_SCATTER, I_SCATTERV, N_ICOLL
};

/* what a reduction sums, as the kernel can time it (colltune.collectives.DATATYPES): a
 * library may pick another algorithm for 8 B of chars than for one double. NONE: the
 * collective sums nothing; OTHER: a type the kernel does not time (complex, derived);
 * MIXED: calls of one entry summed different types. */
enum { DT_NONE, DT_DOUBLE, DT_FLOAT, DT_INT, DT_CHAR, DT_OTHER, DT_MIXED, N_DT };

extern long long icalls[N_ICOLL]; /* nonblocking collectives: counted only */
extern double t_p2p;              /* time in sends, receives and waits */
extern int in_fortran; /* a Fortran wrapper is timing this call: C wrappers stay silent */

/* helpers every file of the profiler uses, here so that none calls back into
 * collprof.c for them (collprof.c calls prof_arrival.c, never the other way) */
static inline double now(void) /* seconds, monotonic */
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int tsize(MPI_Datatype t)
{
    int s = 0;
    if (t != MPI_DATATYPE_NULL)
        PMPI_Type_size(t, &s);
    return s;
}

static inline int csize(MPI_Comm c)
{
    int n = 0;
    PMPI_Comm_size(c, &n);
    return n;
}

static inline int crank(MPI_Comm c)
{
    int r = 0;
    PMPI_Comm_rank(c, &r);
    return r;
}

/* one call: entered at t0, left at t1 (now()'s clock), summing `dt` (DT_NONE) */
void record(int coll, MPI_Comm comm, long long bytes, int dt, double t0, double t1);
int dtype_of(MPI_Datatype t); /* a predefined type's DT_ class, C's and Fortran's names */
long long sum_counts(const int *counts, int n);
void on_init(void);        /* after the library's own MPI_Init */
/* prof_arrival.c: the sampled calls (`slot`: the table entry) and the clock */
void sample(int slot, MPI_Comm comm, double t0, double t1);
void arrival_start(void);  /* at MPI_Init: the keyval, the clock's first offset */
void arrival_end(void);    /* at MPI_Finalize, every rank: the clock's second offset */
void write_arrivals(FILE *f, const int *out_index); /* the record's arrival fields */

void write_profile(void);  /* before the library's own MPI_Finalize; once */

#pragma GCC visibility pop

#endif
