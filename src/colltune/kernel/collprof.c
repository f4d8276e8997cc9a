/* collprof: what an application's collectives cost, recorded through the PMPI interface.
 * Over 600 lines: one preloaded library holding a wrapper per C entry it times (the
 * Fortran ones are generated from one line per collective); splitting it as the kernel is
 * split is not done yet (issue 34).
 *
 * Preloaded into every rank (LD_PRELOAD, set by `tune profile` through the launcher's own
 * option), it counts every blocking collective per (collective, communicator size, per-rank
 * block in bytes rounded up to a power of two): calls, bytes, time in the call (total and
 * longest call). The block is what colltune calls a size: what one rank contributes or
 * receives from one peer. Nonblocking collectives are only counted: coll/tuned's rules do
 * not decide them. At MPI_Finalize each rank writes DIR/rank.<world rank>.json, DIR being
 * COLLTUNE_PROFILE_DIR; a rank that dies writes nothing, so `tune profile` knows it failed.
 *
 * Only the ranks it was meant for: on loading, the profiler takes its settings out of the
 * process's environment (LD_PRELOAD loses this library, COLLTUNE_PROFILE_* are unset), so a
 * program the rank starts (system(), a helper) does not load it. A process that MPI started
 * with MPI_Comm_spawn and that loaded it anyway writes spawned.<rank>.<pid>.json, kept
 * apart from the ranks' records. Files are created, never opened through a link: DIR must
 * be a directory of this user that no one else can write (made 0700 where it does not
 * exist, as on the other nodes of a job), and a record already there is not replaced.
 * COLLTUNE_PROFILE_CVARS names MPI_T control variables read back at MPI_Finalize: what the
 * library really used (a command line can override what the environment asked for).
 *
 * Fortran callers (mpif.h and `use mpi`, gfortran's names: mpi_allreduce_; Open MPI's
 * `use mpi_f08`: mpi_allreduce_f08_): Open MPI's Fortran bindings call PMPI_* directly, so
 * the C wrappers never see them; MPICH's mpif.h/`use mpi` bindings call MPI_* (seen). The
 * Fortran wrappers below time the call and hand it to the library's own binding (the next
 * definition of the same name); while one runs, the C wrappers do not record, so a call is
 * counted once whichever way the library goes.
 *
 * Timing uses CLOCK_MONOTONIC (a vDSO call, tens of ns): the wrapper must cost well under
 * a microsecond per call, and MPI_Wtime may be a library call with its own overhead.
 */
#define _GNU_SOURCE /* RTLD_NEXT */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum {
    C_ALLGATHER, C_ALLGATHERV, C_ALLREDUCE, C_ALLTOALL, C_ALLTOALLV, C_BARRIER, C_BCAST,
    C_EXSCAN, C_GATHER, C_GATHERV, C_REDUCE, C_REDUCE_SCATTER, C_REDUCE_SCATTER_BLOCK,
    C_SCAN, C_SCATTER, C_SCATTERV, C_ALLTOALLW, N_COLL
};
static const char *coll_names[N_COLL] = {
    "allgather", "allgatherv", "allreduce", "alltoall", "alltoallv", "barrier", "bcast",
    "exscan", "gather", "gatherv", "reduce", "reduce_scatter", "reduce_scatter_block",
    "scan", "scatter", "scatterv", "alltoallw"};

enum {
    I_ALLGATHER, I_ALLGATHERV, I_ALLREDUCE, I_ALLTOALL, I_ALLTOALLV, I_ALLTOALLW, I_BARRIER,
    I_BCAST, I_EXSCAN, I_GATHER, I_GATHERV, I_REDUCE, I_REDUCE_SCATTER,
    I_REDUCE_SCATTER_BLOCK, I_SCAN, I_SCATTER, I_SCATTERV, N_ICOLL
};
static const char *icoll_names[N_ICOLL] = {
    "iallgather", "iallgatherv", "iallreduce", "ialltoall", "ialltoallv", "ialltoallw",
    "ibarrier", "ibcast", "iexscan", "igather", "igatherv", "ireduce", "ireduce_scatter",
    "ireduce_scatter_block", "iscan", "iscatter", "iscatterv"};

#define FIRST 48 /* calls timed one by one (MVAPICH2 switches after 16) */

typedef struct {
    int used;
    int coll;
    int comm_size;
    long long bucket;
    long long calls;
    double bytes;
    double time;
    double longest;
    float first[FIRST]; /* the first calls' times, apart: a library may change after N */
} entry_t;

#define SLOTS 4096 /* (collective, comm size, bucket) triples of one rank: plenty */
static entry_t table[SLOTS];
static long long dropped;          /* calls that found the table full */
static long long icalls[N_ICOLL];
static double t_init, t_coll, t_p2p; /* start; time in collectives; in sends/receives/waits */
static int started, written;
static int spawned; /* started by MPI_Comm_spawn (the parent, once disconnected, is gone) */
static int in_fortran; /* a Fortran wrapper is timing this call: C wrappers stay silent */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static long long bucket_of(long long bytes)
{
    long long b = 1;
    if (bytes <= 0)
        return 0;
    while (b < bytes)
        b <<= 1;
    return b;
}

static int tsize(MPI_Datatype t)
{
    int s = 0;
    if (t != MPI_DATATYPE_NULL)
        PMPI_Type_size(t, &s);
    return s;
}

static int csize(MPI_Comm c)
{
    int n = 0;
    PMPI_Comm_size(c, &n);
    return n;
}

static int crank(MPI_Comm c)
{
    int r = 0;
    PMPI_Comm_rank(c, &r);
    return r;
}

static void record(int coll, MPI_Comm comm, long long bytes, double t)
{
    int n = csize(comm);
    long long b = bucket_of(bytes);
    unsigned long h = ((unsigned long)coll * 2654435761u) ^ ((unsigned long)n * 40503u) ^
                      (unsigned long)b * 97u;
    t_coll += t;
    for (int i = 0; i < SLOTS; i++) {
        entry_t *e = &table[(h + (unsigned long)i) % SLOTS];
        if (!e->used) {
            e->used = 1;
            e->coll = coll;
            e->comm_size = n;
            e->bucket = b;
        }
        if (e->coll == coll && e->comm_size == n && e->bucket == b) {
            if (e->calls < FIRST)
                e->first[e->calls] = (float)t;
            e->calls++;
            e->bytes += (double)bytes;
            e->time += t;
            if (t > e->longest)
                e->longest = t;
            return;
        }
    }
    dropped++;
}

static long long sum_counts(const int *counts, int n)
{
    long long s = 0;
    for (int i = 0; i < n; i++)
        s += counts[i];
    return s;
}

/* ---- blocking collectives: time the call, record the per-rank block ---- */

#define TIMED(coll, comm, bytes, call)                                                    \
    do {                                                                                  \
        if (in_fortran)                                                                   \
            return call;                                                                  \
        double t0_ = now();                                                               \
        int rc_ = call;                                                                   \
        record(coll, comm, bytes, now() - t0_);                                           \
        return rc_;                                                                       \
    } while (0)

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
    TIMED(C_REDUCE, comm, (long long)count * tsize(t),
          PMPI_Reduce(s, r, count, t, op, root, comm));
}

int MPI_Allreduce(const void *s, void *r, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm)
{
    TIMED(C_ALLREDUCE, comm, (long long)count * tsize(t),
          PMPI_Allreduce(s, r, count, t, op, comm));
}

int MPI_Scan(const void *s, void *r, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm)
{
    TIMED(C_SCAN, comm, (long long)count * tsize(t), PMPI_Scan(s, r, count, t, op, comm));
}

int MPI_Exscan(const void *s, void *r, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm)
{
    TIMED(C_EXSCAN, comm, (long long)count * tsize(t), PMPI_Exscan(s, r, count, t, op, comm));
}

int MPI_Reduce_scatter_block(const void *s, void *r, int rcount, MPI_Datatype t, MPI_Op op,
                             MPI_Comm comm)
{
    TIMED(C_REDUCE_SCATTER_BLOCK, comm, (long long)rcount * tsize(t),
          PMPI_Reduce_scatter_block(s, r, rcount, t, op, comm));
}

int MPI_Reduce_scatter(const void *s, void *r, const int rcounts[], MPI_Datatype t,
                       MPI_Op op, MPI_Comm comm)
{
    int n = csize(comm);
    /* the mean block: equal counts give the block, as reduce_scatter_block */
    long long bytes = n ? sum_counts(rcounts, n) * tsize(t) / n : 0;
    TIMED(C_REDUCE_SCATTER, comm, bytes, PMPI_Reduce_scatter(s, r, rcounts, t, op, comm));
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

/* ---- start and end ---- */

static void on_init(void)
{
    MPI_Comm parent = MPI_COMM_NULL;
    t_init = now();
    started = 1;
    PMPI_Comm_get_parent(&parent);
    spawned = parent != MPI_COMM_NULL;
}

int MPI_Init(int *argc, char ***argv)
{
    int rc = PMPI_Init(argc, argv);
    on_init();
    return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    on_init();
    return rc;
}

/* JSON text of the library's version: printable ASCII without quotes or backslashes */
static void clean(char *s)
{
    for (; *s; s++)
        if (*s < 32 || *s > 126 || *s == '"' || *s == '\\')
            *s = ' ';
}

/* the settings, taken from the environment when the library loads */
static char prof_dir[4096], prof_cvars[2048];

static void drop_self_from_preload(void)
{
    Dl_info info;
    const char *pre = getenv("LD_PRELOAD");
    char kept[8192] = "";
    size_t used = 0;
    if (!pre || !dladdr((void *)drop_self_from_preload, &info) || !info.dli_fname)
        return;
    char *copy = strdup(pre), *save = NULL;
    if (!copy)
        return;
    for (char *tok = strtok_r(copy, ": ", &save); tok; tok = strtok_r(NULL, ": ", &save)) {
        size_t n = strlen(tok);
        if (strcmp(tok, info.dli_fname) == 0 || used + n + 2 > sizeof kept)
            continue;
        if (used)
            kept[used++] = ':';
        memcpy(kept + used, tok, n + 1);
        used += n;
    }
    free(copy);
    if (used)
        setenv("LD_PRELOAD", kept, 1);
    else
        unsetenv("LD_PRELOAD");
}

__attribute__((constructor)) static void collprof_load(void)
{
    const char *d = getenv("COLLTUNE_PROFILE_DIR"), *c = getenv("COLLTUNE_PROFILE_CVARS");
    if (d && strlen(d) < sizeof prof_dir)
        strcpy(prof_dir, d);
    if (c && strlen(c) < sizeof prof_cvars)
        strcpy(prof_cvars, c);
    unsetenv("COLLTUNE_PROFILE_DIR");
    unsetenv("COLLTUNE_PROFILE_CVARS");
    drop_self_from_preload();
}

/* DIR as a place only this user writes: made 0700 if missing, else checked (lstat: a
 * link is not a directory of ours) */
static int own_dir(const char *dir)
{
    struct stat st;
    if (lstat(dir, &st) != 0) {
        /* another process of the job on this node may make it first */
        if (errno != ENOENT || (mkdir(dir, 0700) != 0 && errno != EEXIST) ||
            lstat(dir, &st) != 0)
            return 0;
    }
    return S_ISDIR(st.st_mode) && st.st_uid == geteuid() && !(st.st_mode & 022);
}

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch < 32 || ch == '"' || ch == '\\')
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

/* one control variable's value as the library holds it now, as JSON (null: unknown) */
static void cvar_value(FILE *f, const char *name)
{
    int idx, verb, bind, scope, count, nlen = 0, dlen = 0;
    MPI_Datatype dt;
    MPI_T_enum en;
    MPI_T_cvar_handle h;
    if (PMPI_T_cvar_get_index(name, &idx) != MPI_SUCCESS ||
        PMPI_T_cvar_get_info(idx, NULL, &nlen, &verb, &dt, &en, NULL, &dlen, &bind,
                             &scope) != MPI_SUCCESS ||
        PMPI_T_cvar_handle_alloc(idx, NULL, &h, &count) != MPI_SUCCESS) {
        fputs("null", f);
        return;
    }
    char buf[8192] = "", num[64] = "";
    int size = 0;
    PMPI_Type_size(dt, &size);
    if (dt == MPI_CHAR ? count >= (int)sizeof buf : count != 1 || size > 8 ||
                                                    PMPI_T_cvar_read(h, buf) != MPI_SUCCESS) {
        fputs("null", f);
    } else if (dt == MPI_CHAR) {
        if (PMPI_T_cvar_read(h, buf) == MPI_SUCCESS) {
            buf[sizeof buf - 1] = 0;
            json_string(f, buf);
        } else {
            fputs("null", f);
        }
    } else {
        /* every value as text, as the variable would be set in the environment */
        if (dt == MPI_C_BOOL)
            snprintf(num, sizeof num, "%d", *(_Bool *)(void *)buf ? 1 : 0);
        else if (dt == MPI_INT)
            snprintf(num, sizeof num, "%d", *(int *)(void *)buf);
        else if (dt == MPI_UNSIGNED)
            snprintf(num, sizeof num, "%u", *(unsigned *)(void *)buf);
        else if (dt == MPI_DOUBLE)
            snprintf(num, sizeof num, "%.17g", *(double *)(void *)buf);
        else if (dt == MPI_LONG || dt == MPI_LONG_LONG)
            snprintf(num, sizeof num, "%lld", *(long long *)(void *)buf);
        else if (dt == MPI_UNSIGNED_LONG || dt == MPI_UNSIGNED_LONG_LONG)
            snprintf(num, sizeof num, "%llu", *(unsigned long long *)(void *)buf);
        if (*num)
            json_string(f, num);
        else
            fputs("null", f);
    }
    PMPI_T_cvar_handle_free(&h);
}

static void write_settings(FILE *f)
{
    int provided, first = 1;
    char names[sizeof prof_cvars], *save = NULL;
    fprintf(f, ", \"settings\": {");
    if (*prof_cvars && PMPI_T_init_thread(MPI_THREAD_SINGLE, &provided) == MPI_SUCCESS) {
        strcpy(names, prof_cvars);
        for (char *n = strtok_r(names, ",", &save); n; n = strtok_r(NULL, ",", &save)) {
            if (strspn(n, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") !=
                strlen(n))
                continue;
            fprintf(f, "%s\"%s\": ", first ? "" : ", ", n);
            cvar_value(f, n);
            first = 0;
        }
        PMPI_T_finalize();
    }
    fputc('}', f);
}

static void write_profile(void)
{
    char path[4300], tmp[4400], lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int rank = 0, world = 0, len = 0, first = 1, fd;
    double wall = now() - t_init;
    if (!*prof_dir || !started || written)
        return;
    written = 1;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &world);
    PMPI_Get_library_version(lib, &len);
    lib[len < MPI_MAX_LIBRARY_VERSION_STRING ? len : MPI_MAX_LIBRARY_VERSION_STRING - 1] = 0;
    clean(lib);
    if (!own_dir(prof_dir)) {
        fprintf(stderr, "collprof: %s is not a directory of this user that only it can "
                        "write: no record written\n", prof_dir);
        return;
    }
    if (spawned) /* kept apart from the ranks' records */
        snprintf(path, sizeof path, "%s/spawned.%d.%ld.json", prof_dir, rank, (long)getpid());
    else
        snprintf(path, sizeof path, "%s/rank.%d.json", prof_dir, rank);
    snprintf(tmp, sizeof tmp, "%s/.rank.%d.%ld.tmp", prof_dir, rank, (long)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
    if (!f) {
        fprintf(stderr, "collprof: cannot create %s\n", tmp);
        if (fd >= 0)
            close(fd);
        return;
    }
    fprintf(f, "{\"rank\": %d, \"world\": %d, \"library\": \"%.200s\", \"wall_s\": %.9g, "
               "\"collective_s\": %.9g, \"p2p_s\": %.9g, \"dropped\": %lld, \"entries\": [",
            rank, world, lib, wall, t_coll, t_p2p, dropped);
    for (int i = 0; i < SLOTS; i++) {
        const entry_t *e = &table[i];
        if (!e->used)
            continue;
        fprintf(f, "%s\n {\"collective\": \"%s\", \"comm_size\": %d, \"bucket\": %lld, "
                   "\"calls\": %lld, \"bytes\": %.17g, \"time_s\": %.9g, \"longest_s\": %.9g, "
                   "\"first_s\": [",
                first ? "" : ",", coll_names[e->coll], e->comm_size, e->bucket, e->calls,
                e->bytes, e->time, e->longest);
        for (long long c = 0; c < e->calls && c < FIRST; c++)
            fprintf(f, "%s%.6g", c ? ", " : "", (double)e->first[c]);
        fputs("]}", f);
        first = 0;
    }
    fprintf(f, "], \"nonblocking\": {");
    first = 1;
    for (int i = 0; i < N_ICOLL; i++) {
        if (!icalls[i])
            continue;
        fprintf(f, "%s\"%s\": %lld", first ? "" : ", ", icoll_names[i], icalls[i]);
        first = 0;
    }
    fputc('}', f);
    /* how many CPUs this rank may run on: the binding its launcher applied */
    cpu_set_t cpus;
    fprintf(f, ", \"cpus\": %d",
            sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : -1);
    write_settings(f);
    fprintf(f, "}\n");
    /* link, not rename: a record already at `path` (or anything planted there) stays */
    if (fclose(f) != 0 || link(tmp, path) != 0)
        fprintf(stderr, "collprof: cannot write %s: %s\n", path,
                errno == EEXIST ? "a record is there already" : strerror(errno));
    unlink(tmp);
}

int MPI_Finalize(void)
{
    write_profile();
    return PMPI_Finalize();
}

/* ---- Fortran bindings: mpif.h and `use mpi` (gfortran's mpi_x_), Open MPI's mpi_f08
 * (mpi_x_f08_: the same arguments, handles by reference). Each entry times the call and
 * hands it to the library's own entry of the same name. ---- */

typedef void (*fvoid_t)(void);

/* the library's own definition of `name` (NULL: it has none) */
static fvoid_t next_of(fvoid_t *cache, const char *name)
{
    if (!*cache) {
        void *p = dlsym(RTLD_NEXT, name);
        memcpy(cache, &p, sizeof *cache); /* object to function pointer, portably */
    }
    return *cache;
}

static long long ftype(const MPI_Fint *t)
{
    return tsize(MPI_Type_f2c(*t));
}

/* one Fortran entry: the library's own definition of the same name, timed (`comm` and
 * `ierr` are among every entry's parameters) */
#define FORTRAN_ENTRY(sym, coll, params, args, bytes)                                     \
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
        double t0 = now();                                                                \
        in_fortran++;                                                                     \
        ((void(*) params)next) args;                                                      \
        in_fortran--;                                                                     \
        record(coll, MPI_Comm_f2c(*comm), b, now() - t0);                                 \
    }

/* the two Fortran names of one collective, gfortran's (mpif.h, `use mpi`) and Open MPI's
 * f08: its parameters, the arguments passed on, and the bytes of one rank's block */
#define FORTRAN_COLL(name, coll, params, args, bytes)                                     \
    FORTRAN_ENTRY(mpi_##name##_, coll, params, args, bytes)                               \
    FORTRAN_ENTRY(mpi_##name##_f08_, coll, params, args, bytes)

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
FORTRAN_COLL(reduce, C_REDUCE,
             (void *s, void *r, MPI_Fint *count, MPI_Fint *type, MPI_Fint *op, MPI_Fint *root,
              MPI_Fint *comm, MPI_Fint *ierr),
             (s, r, count, type, op, root, comm, ierr),
             (long long)*count * ftype(type))
FORTRAN_COLL(allreduce, C_ALLREDUCE,
             (void *s, void *r, MPI_Fint *count, MPI_Fint *type, MPI_Fint *op, MPI_Fint *comm,
              MPI_Fint *ierr),
             (s, r, count, type, op, comm, ierr),
             (long long)*count * ftype(type))
FORTRAN_COLL(scan, C_SCAN,
             (void *s, void *r, MPI_Fint *count, MPI_Fint *type, MPI_Fint *op, MPI_Fint *comm,
              MPI_Fint *ierr),
             (s, r, count, type, op, comm, ierr),
             (long long)*count * ftype(type))
FORTRAN_COLL(exscan, C_EXSCAN,
             (void *s, void *r, MPI_Fint *count, MPI_Fint *type, MPI_Fint *op, MPI_Fint *comm,
              MPI_Fint *ierr),
             (s, r, count, type, op, comm, ierr),
             (long long)*count * ftype(type))
FORTRAN_COLL(reduce_scatter_block, C_REDUCE_SCATTER_BLOCK,
             (void *s, void *r, MPI_Fint *count, MPI_Fint *type, MPI_Fint *op, MPI_Fint *comm,
              MPI_Fint *ierr),
             (s, r, count, type, op, comm, ierr),
             (long long)*count * ftype(type))
FORTRAN_COLL(reduce_scatter, C_REDUCE_SCATTER,
             (void *s, void *r, MPI_Fint *counts, MPI_Fint *type, MPI_Fint *op, MPI_Fint *comm,
              MPI_Fint *ierr),
             (s, r, counts, type, op, comm, ierr),
             fmean(counts, comm) * ftype(type))
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
 * entry may call MPI_Init/MPI_Finalize, ours: `written` keeps the record single) */
void mpi_init_(MPI_Fint *ierr)
{
    static fvoid_t next;
    if (!next_of(&next, "mpi_init_")) {
        if (ierr)
            *ierr = MPI_ERR_OTHER;
        return;
    }
    ((void (*)(MPI_Fint *))next)(ierr);
    on_init();
}

void mpi_init_thread_(MPI_Fint *required, MPI_Fint *provided, MPI_Fint *ierr)
{
    static fvoid_t next;
    if (!next_of(&next, "mpi_init_thread_")) {
        if (ierr)
            *ierr = MPI_ERR_OTHER;
        return;
    }
    ((void (*)(MPI_Fint *, MPI_Fint *, MPI_Fint *))next)(required, provided, ierr);
    on_init();
}

void mpi_finalize_(MPI_Fint *ierr)
{
    static fvoid_t next;
    write_profile();
    if (!next_of(&next, "mpi_finalize_")) {
        if (ierr)
            *ierr = MPI_ERR_OTHER;
        return;
    }
    ((void (*)(MPI_Fint *))next)(ierr);
}

/* Open MPI's mpi_f08 start and end (MPICH's: the same names) */
void mpi_init_thread_f08_(MPI_Fint *required, MPI_Fint *provided, MPI_Fint *ierr)
{
    static fvoid_t next;
    if (!next_of(&next, "mpi_init_thread_f08_")) {
        if (ierr)
            *ierr = MPI_ERR_OTHER;
        return;
    }
    ((void (*)(MPI_Fint *, MPI_Fint *, MPI_Fint *))next)(required, provided, ierr);
    on_init();
}

void mpi_init_f08_(MPI_Fint *ierr)
{
    static fvoid_t next;
    if (!next_of(&next, "mpi_init_f08_")) {
        if (ierr)
            *ierr = MPI_ERR_OTHER;
        return;
    }
    ((void (*)(MPI_Fint *))next)(ierr);
    on_init();
}

void mpi_finalize_f08_(MPI_Fint *ierr)
{
    static fvoid_t next;
    write_profile();
    if (!next_of(&next, "mpi_finalize_f08_")) {
        if (ierr)
            *ierr = MPI_ERR_OTHER;
        return;
    }
    ((void (*)(MPI_Fint *))next)(ierr);
}
