/* collprof's C wrappers: blocking collectives timed and recorded by their per-rank block,
 * nonblocking ones counted (their time is in the waits), point to point timed in total. */
#define _POSIX_C_SOURCE 199309L /* clock_gettime, in prof.h */
#include <mpi.h>

#include "prof.h"

/* ---- blocking collectives: time the call, record the per-rank block ---- */

#define TIMED_AS(coll, comm, bytes, dt, call)                                             \
    do {                                                                                  \
        if (in_fortran)                                                                   \
            return call;                                                                  \
        double t0_ = now();                                                               \
        int rc_ = call;                                                                   \
        record(coll, comm, bytes, dt, t0_, now());                                       \
        return rc_;                                                                       \
    } while (0)
/* a collective that sums nothing */
#define TIMED(coll, comm, bytes, call) TIMED_AS(coll, comm, bytes, DT_NONE, call)

int MPI_Barrier(MPI_Comm comm)
{
    TIMED(C_BARRIER, comm, 0, PMPI_Barrier(comm));
}

int MPI_Bcast(void *buf, int count, MPI_Datatype t, int root, MPI_Comm comm)
{
    TIMED(C_BCAST, comm, (long long)count * tsize(t), PMPI_Bcast(buf, count, t, root, comm));
}

int MPI_Reduce(const void *s, void *r, int count, MPI_Datatype t, MPI_Op op, int root,
               MPI_Comm comm)
{
    TIMED_AS(C_REDUCE, comm, (long long)count * tsize(t), dtype_of(t),
             PMPI_Reduce(s, r, count, t, op, root, comm));
}

int MPI_Allreduce(const void *s, void *r, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm)
{
    TIMED_AS(C_ALLREDUCE, comm, (long long)count * tsize(t), dtype_of(t),
             PMPI_Allreduce(s, r, count, t, op, comm));
}

int MPI_Scan(const void *s, void *r, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm)
{
    TIMED_AS(C_SCAN, comm, (long long)count * tsize(t), dtype_of(t),
             PMPI_Scan(s, r, count, t, op, comm));
}

int MPI_Exscan(const void *s, void *r, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm)
{
    TIMED_AS(C_EXSCAN, comm, (long long)count * tsize(t), dtype_of(t),
             PMPI_Exscan(s, r, count, t, op, comm));
}

int MPI_Reduce_scatter_block(const void *s, void *r, int rcount, MPI_Datatype t, MPI_Op op,
                             MPI_Comm comm)
{
    TIMED_AS(C_REDUCE_SCATTER_BLOCK, comm, (long long)rcount * tsize(t), dtype_of(t),
             PMPI_Reduce_scatter_block(s, r, rcount, t, op, comm));
}

int MPI_Reduce_scatter(const void *s, void *r, const int rcounts[], MPI_Datatype t,
                       MPI_Op op, MPI_Comm comm)
{
    int n = csize(comm);
    /* the mean block: equal counts give the block, as reduce_scatter_block */
    long long bytes = n ? sum_counts(rcounts, n) * tsize(t) / n : 0;
    TIMED_AS(C_REDUCE_SCATTER, comm, bytes, dtype_of(t),
             PMPI_Reduce_scatter(s, r, rcounts, t, op, comm));
}

int MPI_Allgather(const void *s, int scount, MPI_Datatype st, void *r, int rcount,
                  MPI_Datatype rt, MPI_Comm comm)
{
    long long bytes = s == MPI_IN_PLACE ? (long long)rcount * tsize(rt)
                                        : (long long)scount * tsize(st);
    TIMED(C_ALLGATHER, comm, bytes, PMPI_Allgather(s, scount, st, r, rcount, rt, comm));
}

int MPI_Allgatherv(const void *s, int scount, MPI_Datatype st, void *r, const int rcounts[],
                   const int displs[], MPI_Datatype rt, MPI_Comm comm)
{
    int n = csize(comm);
    long long bytes = n ? sum_counts(rcounts, n) * tsize(rt) / n : 0;
    (void)scount;
    TIMED(C_ALLGATHERV, comm, bytes,
          PMPI_Allgatherv(s, scount, st, r, rcounts, displs, rt, comm));
}

int MPI_Gather(const void *s, int scount, MPI_Datatype st, void *r, int rcount,
               MPI_Datatype rt, int root, MPI_Comm comm)
{
    long long bytes = s == MPI_IN_PLACE ? (long long)rcount * tsize(rt)
                                        : (long long)scount * tsize(st);
    TIMED(C_GATHER, comm, bytes, PMPI_Gather(s, scount, st, r, rcount, rt, root, comm));
}

int MPI_Gatherv(const void *s, int scount, MPI_Datatype st, void *r, const int rcounts[],
                const int displs[], MPI_Datatype rt, int root, MPI_Comm comm)
{
    long long bytes = s == MPI_IN_PLACE ? (long long)rcounts[crank(comm)] * tsize(rt)
                                        : (long long)scount * tsize(st);
    TIMED(C_GATHERV, comm, bytes,
          PMPI_Gatherv(s, scount, st, r, rcounts, displs, rt, root, comm));
}

int MPI_Scatter(const void *s, int scount, MPI_Datatype st, void *r, int rcount,
                MPI_Datatype rt, int root, MPI_Comm comm)
{
    long long bytes = r == MPI_IN_PLACE ? (long long)scount * tsize(st)
                                        : (long long)rcount * tsize(rt);
    TIMED(C_SCATTER, comm, bytes, PMPI_Scatter(s, scount, st, r, rcount, rt, root, comm));
}

int MPI_Scatterv(const void *s, const int scounts[], const int displs[], MPI_Datatype st,
                 void *r, int rcount, MPI_Datatype rt, int root, MPI_Comm comm)
{
    long long bytes = r == MPI_IN_PLACE ? (long long)scounts[crank(comm)] * tsize(st)
                                        : (long long)rcount * tsize(rt);
    TIMED(C_SCATTERV, comm, bytes,
          PMPI_Scatterv(s, scounts, displs, st, r, rcount, rt, root, comm));
}

int MPI_Alltoall(const void *s, int scount, MPI_Datatype st, void *r, int rcount,
                 MPI_Datatype rt, MPI_Comm comm)
{
    long long bytes = s == MPI_IN_PLACE ? (long long)rcount * tsize(rt)
                                        : (long long)scount * tsize(st);
    TIMED(C_ALLTOALL, comm, bytes, PMPI_Alltoall(s, scount, st, r, rcount, rt, comm));
}

int MPI_Alltoallv(const void *s, const int scounts[], const int sdispls[], MPI_Datatype st,
                  void *r, const int rcounts[], const int rdispls[], MPI_Datatype rt,
                  MPI_Comm comm)
{
    int n = csize(comm);
    /* the mean block this rank receives from one peer */
    long long bytes = n ? sum_counts(rcounts, n) * tsize(rt) / n : 0;
    TIMED(C_ALLTOALLV, comm, bytes,
          PMPI_Alltoallv(s, scounts, sdispls, st, r, rcounts, rdispls, rt, comm));
}

int MPI_Alltoallw(const void *s, const int scounts[], const int sdispls[],
                  const MPI_Datatype sts[], void *r, const int rcounts[], const int rdispls[],
                  const MPI_Datatype rts[], MPI_Comm comm)
{
    int n = csize(comm);
    long long bytes = 0;
    for (int i = 0; i < n; i++)
        bytes += (long long)rcounts[i] * tsize(rts[i]);
    TIMED(C_ALLTOALLW, comm, n ? bytes / n : 0,
          PMPI_Alltoallw(s, scounts, sdispls, sts, r, rcounts, rdispls, rts, comm));
}

/* ---- nonblocking collectives: counted, not timed (the time is in the waits) ---- */

#define COUNTED(i, call)                                                                  \
    do {                                                                                  \
        icalls[i]++;                                                                      \
        return call;                                                                      \
    } while (0)

int MPI_Ibarrier(MPI_Comm comm, MPI_Request *q)
{
    COUNTED(I_BARRIER, PMPI_Ibarrier(comm, q));
}

int MPI_Ibcast(void *buf, int count, MPI_Datatype t, int root, MPI_Comm comm, MPI_Request *q)
{
    COUNTED(I_BCAST, PMPI_Ibcast(buf, count, t, root, comm, q));
}

int MPI_Ireduce(const void *s, void *r, int count, MPI_Datatype t, MPI_Op op, int root,
                MPI_Comm comm, MPI_Request *q)
{
    COUNTED(I_REDUCE, PMPI_Ireduce(s, r, count, t, op, root, comm, q));
}

int MPI_Iallreduce(const void *s, void *r, int count, MPI_Datatype t, MPI_Op op,
                   MPI_Comm comm, MPI_Request *q)
{
    COUNTED(I_ALLREDUCE, PMPI_Iallreduce(s, r, count, t, op, comm, q));
}

int MPI_Iscan(const void *s, void *r, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm,
              MPI_Request *q)
{
    COUNTED(I_SCAN, PMPI_Iscan(s, r, count, t, op, comm, q));
}

int MPI_Iexscan(const void *s, void *r, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm,
                MPI_Request *q)
{
    COUNTED(I_EXSCAN, PMPI_Iexscan(s, r, count, t, op, comm, q));
}

int MPI_Ireduce_scatter_block(const void *s, void *r, int rcount, MPI_Datatype t, MPI_Op op,
                              MPI_Comm comm, MPI_Request *q)
{
    COUNTED(I_REDUCE_SCATTER_BLOCK, PMPI_Ireduce_scatter_block(s, r, rcount, t, op, comm, q));
}

int MPI_Ireduce_scatter(const void *s, void *r, const int rcounts[], MPI_Datatype t,
                        MPI_Op op, MPI_Comm comm, MPI_Request *q)
{
    COUNTED(I_REDUCE_SCATTER, PMPI_Ireduce_scatter(s, r, rcounts, t, op, comm, q));
}

int MPI_Iallgather(const void *s, int scount, MPI_Datatype st, void *r, int rcount,
                   MPI_Datatype rt, MPI_Comm comm, MPI_Request *q)
{
    COUNTED(I_ALLGATHER, PMPI_Iallgather(s, scount, st, r, rcount, rt, comm, q));
}

int MPI_Iallgatherv(const void *s, int scount, MPI_Datatype st, void *r, const int rcounts[],
                    const int displs[], MPI_Datatype rt, MPI_Comm comm, MPI_Request *q)
{
    COUNTED(I_ALLGATHERV, PMPI_Iallgatherv(s, scount, st, r, rcounts, displs, rt, comm, q));
}

int MPI_Igather(const void *s, int scount, MPI_Datatype st, void *r, int rcount,
                MPI_Datatype rt, int root, MPI_Comm comm, MPI_Request *q)
{
    COUNTED(I_GATHER, PMPI_Igather(s, scount, st, r, rcount, rt, root, comm, q));
}

int MPI_Igatherv(const void *s, int scount, MPI_Datatype st, void *r, const int rcounts[],
                 const int displs[], MPI_Datatype rt, int root, MPI_Comm comm, MPI_Request *q)
{
    COUNTED(I_GATHERV, PMPI_Igatherv(s, scount, st, r, rcounts, displs, rt, root, comm, q));
}

int MPI_Iscatter(const void *s, int scount, MPI_Datatype st, void *r, int rcount,
                 MPI_Datatype rt, int root, MPI_Comm comm, MPI_Request *q)
{
    COUNTED(I_SCATTER, PMPI_Iscatter(s, scount, st, r, rcount, rt, root, comm, q));
}

int MPI_Iscatterv(const void *s, const int scounts[], const int displs[], MPI_Datatype st,
                  void *r, int rcount, MPI_Datatype rt, int root, MPI_Comm comm,
                  MPI_Request *q)
{
    COUNTED(I_SCATTERV, PMPI_Iscatterv(s, scounts, displs, st, r, rcount, rt, root, comm, q));
}

int MPI_Ialltoall(const void *s, int scount, MPI_Datatype st, void *r, int rcount,
                  MPI_Datatype rt, MPI_Comm comm, MPI_Request *q)
{
    COUNTED(I_ALLTOALL, PMPI_Ialltoall(s, scount, st, r, rcount, rt, comm, q));
}

int MPI_Ialltoallv(const void *s, const int scounts[], const int sdispls[], MPI_Datatype st,
                   void *r, const int rcounts[], const int rdispls[], MPI_Datatype rt,
                   MPI_Comm comm, MPI_Request *q)
{
    COUNTED(I_ALLTOALLV,
            PMPI_Ialltoallv(s, scounts, sdispls, st, r, rcounts, rdispls, rt, comm, q));
}

int MPI_Ialltoallw(const void *s, const int scounts[], const int sdispls[],
                   const MPI_Datatype sts[], void *r, const int rcounts[], const int rdispls[],
                   const MPI_Datatype rts[], MPI_Comm comm, MPI_Request *q)
{
    COUNTED(I_ALLTOALLW,
            PMPI_Ialltoallw(s, scounts, sdispls, sts, r, rcounts, rdispls, rts, comm, q));
}

/* ---- point to point: only their time, for the application's time in MPI ---- */

#define P2P(call)                                                                         \
    do {                                                                                  \
        double t0_ = now();                                                               \
        int rc_ = call;                                                                   \
        t_p2p += now() - t0_;                                                             \
        return rc_;                                                                       \
    } while (0)

int MPI_Send(const void *b, int n, MPI_Datatype t, int dest, int tag, MPI_Comm c)
{
    P2P(PMPI_Send(b, n, t, dest, tag, c));
}

int MPI_Recv(void *b, int n, MPI_Datatype t, int src, int tag, MPI_Comm c, MPI_Status *st)
{
    P2P(PMPI_Recv(b, n, t, src, tag, c, st));
}

int MPI_Sendrecv(const void *sb, int sn, MPI_Datatype st, int dest, int stag, void *rb,
                 int rn, MPI_Datatype rt, int src, int rtag, MPI_Comm c, MPI_Status *s)
{
    P2P(PMPI_Sendrecv(sb, sn, st, dest, stag, rb, rn, rt, src, rtag, c, s));
}

int MPI_Wait(MPI_Request *q, MPI_Status *s)
{
    P2P(PMPI_Wait(q, s));
}

int MPI_Waitall(int n, MPI_Request qs[], MPI_Status ss[])
{
    P2P(PMPI_Waitall(n, qs, ss));
}

int MPI_Waitany(int n, MPI_Request qs[], int *i, MPI_Status *s)
{
    P2P(PMPI_Waitany(n, qs, i, s));
}
