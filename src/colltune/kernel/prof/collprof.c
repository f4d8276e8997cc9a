/* collprof: what an application's collectives cost, recorded through the PMPI interface.
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
 *
 * Where the ranks ran and when they entered: each record says its rank's processor name,
 * and the entry times of a sample of its calls on rank 0's clock (prof_arrival.c). */
#define _GNU_SOURCE /* dladdr, sched_getaffinity */
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

#include "../common/mpiobjects.h"
#include "../common/preload.h"
#include "prof.h"

/* the files: prof_c.c (the C wrappers), prof_fortran.c (the Fortran ones), prof_arrival.c
 * (the sampled calls' entries and the clock); this one: the record, the start and the end */

static const char *coll_names[N_COLL] = {
    "allgather", "allgatherv", "allreduce", "alltoall", "alltoallv", "barrier", "bcast",
    "exscan", "gather", "gatherv", "reduce", "reduce_scatter", "reduce_scatter_block",
    "scan", "scatter", "scatterv", "alltoallw"};

static const char *icoll_names[N_ICOLL] = {
    "iallgather", "iallgatherv", "iallreduce", "ialltoall", "ialltoallv", "ialltoallw",
    "ibarrier", "ibcast", "iexscan", "igather", "igatherv", "ireduce", "ireduce_scatter",
    "ireduce_scatter_block", "iscan", "iscatter", "iscatterv"};

/* DT_ names as the profile says them (null for DT_NONE) */
static const char *dt_names[N_DT] = {NULL, "double", "float", "int", "char", "other", "mixed"};

#define FIRST 48 /* calls timed one by one (MVAPICH2 switches after 16) */

typedef struct {
    int used;
    int coll;
    int comm_size;
    long long bucket;
    int dtype; /* what its calls summed (DT_) */
    long long calls;
    double bytes;
    double time;
    double longest;
    float first[FIRST]; /* the first calls' times, apart: a library may change after N */
} entry_t;

#define SLOTS 4096 /* (collective, comm size, bucket) triples of one rank: plenty */
static entry_t table[SLOTS];

static long long dropped;          /* calls that found the table full */
long long icalls[N_ICOLL];
static double t_init, t_coll;
double t_p2p; /* start; time in collectives; in sends/receives/waits */
static int started, written;
static int spawned; /* started by MPI_Comm_spawn (the parent, once disconnected, is gone) */
int in_fortran;
/* the settings, taken from the environment when the library loads */
static char prof_dir[4096], prof_cvars[2048];

static long long bucket_of(long long bytes)
{
    long long b = 1;
    if (bytes <= 0)
        return 0;
    while (b < bytes)
        b <<= 1;
    return b;
}

/* Handles compared, not names: a Fortran caller's MPI_DOUBLE_PRECISION is its own handle
 * (MPICH without Fortran defines it as MPI_DATATYPE_NULL, which no call passes).
 * By kind and size as the kernel sums them: 8-byte reals as double, 4-byte ones as float,
 * 4-byte integers as int, one-byte integers and bytes as char. */
int dtype_of(MPI_Datatype t)
{
    /* built per call: Open MPI's handles are addresses, MPICH's integers (tens of ns);
     * the optional Fortran types only where the library defines them (an Open MPI built
     * without Fortran does not) */
    const struct {
        int dt;
        MPI_Datatype t;
    } known[] = {
        {DT_DOUBLE, MPI_DOUBLE},      {DT_DOUBLE, MPI_DOUBLE_PRECISION},
        {DT_FLOAT, MPI_FLOAT},        {DT_FLOAT, MPI_REAL},
        {DT_INT, MPI_INT},            {DT_INT, MPI_INTEGER},
        {DT_INT, MPI_INT32_T},        {DT_CHAR, MPI_CHAR},
        {DT_CHAR, MPI_SIGNED_CHAR},   {DT_CHAR, MPI_UNSIGNED_CHAR},
        {DT_CHAR, MPI_BYTE},          {DT_CHAR, MPI_INT8_T},
        {DT_CHAR, MPI_UINT8_T},       {DT_CHAR, MPI_CHARACTER},
#ifdef MPI_REAL8
        {DT_DOUBLE, MPI_REAL8},
#endif
#ifdef MPI_REAL4
        {DT_FLOAT, MPI_REAL4},
#endif
#ifdef MPI_INTEGER4
        {DT_INT, MPI_INTEGER4},
#endif
#ifdef MPI_INTEGER1
        {DT_CHAR, MPI_INTEGER1},
#endif
    };
    if (t == MPI_DATATYPE_NULL)
        return DT_OTHER;
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (t == known[i].t)
            return known[i].dt;
    return DT_OTHER;
}

void record(int coll, MPI_Comm comm, long long bytes, int dt, double t0, double t1)
{
    double t = t1 - t0;
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
            e->dtype = dt;
        }
        if (e->coll == coll && e->comm_size == n && e->bucket == b) {
            if (e->calls < FIRST)
                e->first[e->calls] = (float)t;
            e->calls++;
            if (e->dtype != dt)
                e->dtype = DT_MIXED;
            e->bytes += (double)bytes;
            e->time += t;
            if (t > e->longest)
                e->longest = t;
            sample((int)(e - table), comm, t0, t1);
            return;
        }
    }
    dropped++;
}

long long sum_counts(const int *counts, int n)
{
    long long s = 0;
    for (int i = 0; i < n; i++)
        s += counts[i];
    return s;
}

/* ---- start and end ---- */

void on_init(void)
{
    MPI_Comm parent = MPI_COMM_NULL;
    if (!started && *prof_dir) {
        /* before the application's first call: its own communicators stay untouched */
        arrival_start();
    }
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



__attribute__((constructor)) static void collprof_load(void)
{
    take_env("COLLTUNE_PROFILE_DIR", prof_dir, sizeof prof_dir);
    take_env("COLLTUNE_PROFILE_CVARS", prof_cvars, sizeof prof_cvars);
    drop_from_preload((void *)collprof_load);
}

/* DIR as a place only this user writes, made by the tuner before the job (lstat: a link is
 * not a directory of ours). Never made here: missing on this node means the tuner's job
 * directory is not on a file system every node shares, and a record made in a node-local
 * copy would never reach it (-1). */
static int own_dir(const char *dir)
{
    struct stat st;
    if (lstat(dir, &st) != 0)
        return errno == ENOENT ? -1 : 0;
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

/* the file of the MPI library this process loaded (the one defining PMPI_Init), cleaned
 * (json_clean): tune profile refuses ranks that ran on another MPI's library */
static void library_file(char *out, size_t n)
{
    Dl_info info;
    snprintf(out, n, "%s", dladdr((void *)PMPI_Init, &info) && info.dli_fname
                               ? info.dli_fname : "");
    json_clean(out);
}

void write_profile(void)
{
    char path[4300], tmp[4400], lib[MPI_MAX_LIBRARY_VERSION_STRING], libfile[1024];
    char objects[8192];
    int rank = 0, world = 0, len = 0, first = 1, fd;
    double wall = now() - t_init;
    if (!*prof_dir || !started || written)
        return;
    written = 1;
    /* every rank, whether or not it can write its record: rank 0 waits for each */
    arrival_end();
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &world);
    PMPI_Get_library_version(lib, &len);
    lib[len < MPI_MAX_LIBRARY_VERSION_STRING ? len : MPI_MAX_LIBRARY_VERSION_STRING - 1] = 0;
    json_clean(lib);
    library_file(libfile, sizeof libfile);
    mpi_objects(objects, sizeof objects);
    switch (own_dir(prof_dir)) {
    case 1:
        break;
    case -1: {
        char host[256] = "?";
        gethostname(host, sizeof host - 1);
        fprintf(stderr, "collprof: rank %d: %s does not exist on %s: the profile directory "
                        "must be on a file system every node shares: no record written\n",
                rank, prof_dir, host);
        return;
    }
    default:
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
    fprintf(f, "{\"rank\": %d, \"world\": %d, \"library\": \"%.200s\", "
               "\"library_file\": \"%s\", \"library_objects\": %s, \"wall_s\": %.9g, "
               "\"collective_s\": %.9g, \"p2p_s\": %.9g, \"dropped\": %lld, \"entries\": [",
            rank, world, lib, libfile, objects, wall, t_coll, t_p2p, dropped);
    int out_index[SLOTS], nout = 0; /* each table entry's place in "entries" */
    for (int i = 0; i < SLOTS; i++) {
        const entry_t *e = &table[i];
        out_index[i] = -1;
        if (!e->used)
            continue;
        out_index[i] = nout++;
        fprintf(f, "%s\n {\"collective\": \"%s\", \"comm_size\": %d, \"bucket\": %lld, "
                   "\"calls\": %lld, \"bytes\": %.17g, \"time_s\": %.9g, \"longest_s\": %.9g, "
                   "\"first_s\": [",
                first ? "" : ",", coll_names[e->coll], e->comm_size, e->bucket, e->calls,
                e->bytes, e->time, e->longest);
        for (long long c = 0; c < e->calls && c < FIRST; c++)
            fprintf(f, "%s%.6g", c ? ", " : "", (double)e->first[c]);
        fputc(']', f);
        if (dt_names[e->dtype])
            fprintf(f, ", \"datatype\": \"%s\"", dt_names[e->dtype]);
        fputc('}', f);
        first = 0;
    }
    fputc(']', f);
    write_arrivals(f, out_index);
    {
        char host[MPI_MAX_PROCESSOR_NAME + 1] = "";
        int hlen = 0;
        PMPI_Get_processor_name(host, &hlen);
        host[hlen > 0 && hlen <= MPI_MAX_PROCESSOR_NAME ? hlen : 0] = 0;
        fputs(", \"host\": ", f);
        json_string(f, host);
    }
    fprintf(f, ", \"nonblocking\": {");
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

