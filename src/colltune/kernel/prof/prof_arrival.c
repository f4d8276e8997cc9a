/* collprof's arrival record: when each rank entered a sample of its calls, on rank 0's
 * clock, and the clock's offsets (collprof.c says what the profiler does).
 *
 * Each record keeps the entry time of a sample of its calls, so that the tuner can see how
 * far apart the ranks of one call entered it (the application's arrival pattern, which a
 * benchmark that starts every call after a barrier never has). A call is one communicator's
 * n-th blocking collective: every member calls a communicator's collectives in the same
 * order, so (the communicator, n) names the same call on every member, and which calls are
 * sampled is decided from n alone (the same calls on every member). A communicator is named
 * by the world rank of its rank 0 and how many communicators of that leader and size this
 * rank met before it (cached on the communicator as an attribute, found once). The entry
 * times are put on rank 0's clock: each rank measures its clock's offset to rank 0's by
 * ping-pong at MPI_Init and again at MPI_Finalize (the shortest of several round trips;
 * half of it bounds the error; clock_sync says what that costs the application); the two
 * offsets say the drift.
 */
#define _POSIX_C_SOURCE 199309L /* clock_gettime, in prof.h */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prof.h"

/* ---- arrival: a sample of calls, each rank's entry on rank 0's clock ---- */

#define SAMPLES 8192 /* a rank's sampled calls: a few hundred per (collective, size) */
#define EVERY_FIRST 64 /* a communicator's first calls are all sampled, then 1 in 64 */
#define SYNC_ROUNDS 10 /* round trips to rank 0 per clock measurement; the shortest counts */

typedef struct {
    int slot;          /* the table entry: collective, comm size, bucket */
    int leader;        /* the communicator: its rank 0's world rank ... */
    int ordinal;       /* ... and how many of that leader and size came before it here */
    int crank;         /* this rank in it */
    long long seq;     /* the call: the communicator's n-th blocking collective */
    double t0;         /* entry, this rank's clock */
    float dur;         /* time in the call */
} sample_t;

static sample_t samples[SAMPLES];
static int nsamples;
static long long samples_full; /* sampled calls that found the array full */

typedef struct {
    int inter;      /* an intercommunicator: its calls are not sampled */
    int leader;     /* MPI_UNDEFINED: rank 0 is not in this world (spawned, connected) */
    int ordinal;
    int rank;
    long long seq;  /* blocking collectives called on it so far */
} comm_info_t;

static int info_key = MPI_KEYVAL_INVALID;

#define LEADERS 1024 /* (leader, size) pairs counted for the communicators' ordinals */
static struct {
    int leader, size, count;
} leaders[LEADERS];

/* the clock: offset to rank 0's (add it to now()), its error, when it was measured; [0] at
 * MPI_Init, [1] at MPI_Finalize */
static double clock_offset[2], clock_error[2], clock_at[2];
static int clock_done[2];

static int free_info(MPI_Comm c, int key, void *val, void *extra)
{
    (void)c;
    (void)key;
    (void)extra;
    free(val);
    return MPI_SUCCESS;
}

static int ordinal_of(int leader, int size)
{
    for (int i = 0; i < LEADERS; i++) {
        if (!leaders[i].count) {
            leaders[i].leader = leader;
            leaders[i].size = size;
        }
        if (leaders[i].leader == leader && leaders[i].size == size)
            return leaders[i].count++;
    }
    return -1; /* too many communicators: not sampled */
}

/* what the profiler knows of a communicator, found at its first collective */
static comm_info_t *info_of(MPI_Comm c)
{
    void *v = NULL;
    int flag = 0;
    if (info_key == MPI_KEYVAL_INVALID || c == MPI_COMM_NULL)
        return NULL;
    if (PMPI_Comm_get_attr(c, info_key, &v, &flag) == MPI_SUCCESS && flag)
        return v;
    comm_info_t *i = calloc(1, sizeof *i);
    if (!i)
        return NULL;
    i->leader = MPI_UNDEFINED;
    PMPI_Comm_test_inter(c, &i->inter);
    if (!i->inter) {
        MPI_Group g, w;
        int zero = 0;
        PMPI_Comm_group(c, &g);
        PMPI_Comm_group(MPI_COMM_WORLD, &w);
        PMPI_Group_translate_ranks(g, 1, &zero, w, &i->leader);
        PMPI_Group_free(&g);
        PMPI_Group_free(&w);
        i->rank = crank(c);
        i->ordinal = i->leader == MPI_UNDEFINED ? -1 : ordinal_of(i->leader, csize(c));
    }
    if (PMPI_Comm_set_attr(c, info_key, i) != MPI_SUCCESS) {
        free(i);
        return NULL;
    }
    return i;
}

/* whether a communicator's n-th call is sampled: from n alone, so on every member alike;
 * the first calls all, then 1 in 64 by a hash of n (a fixed stride would always fall on the
 * same collective of an application that alternates a few) */
static int sampled(long long n)
{
    unsigned long long x = (unsigned long long)n * 0x9E3779B97F4A7C15ull;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    return n < EVERY_FIRST || (x >> 58) == 0;
}

void sample(int slot, MPI_Comm comm, double t0, double t1)
{
    comm_info_t *i = info_of(comm);
    if (!i || i->inter)
        return;
    long long n = i->seq++;
    if (i->leader == MPI_UNDEFINED || i->ordinal < 0 || !sampled(n))
        return;
    if (nsamples == SAMPLES) {
        samples_full++;
        return;
    }
    samples[nsamples++] = (sample_t){slot, i->leader, i->ordinal, i->rank, n, t0,
                                     (float)(t1 - t0)};
}

/* this rank's clock against rank 0's (Cristian's method): the reply's time taken at the
 * middle of the shortest round trip; half that round trip bounds the error. A rank on rank
 * 0's host shares its clock (CLOCK_MONOTONIC is the kernel's) and exchanges one message
 * each way only: every message the profiler sends before the application's first counts
 * towards what the library does after N messages to a peer (Open MPI's shared-memory fast
 * boxes start after 16), which the profile must still show. A rank on another host has
 * its SYNC_ROUNDS round trips (the first of them sets up the connection the application's
 * first message to rank 0 would have paid for: docs/profile.md). On MPI_COMM_WORLD at
 * MPI_Init (no receive of the application's can be posted yet), on a duplicate at
 * MPI_Finalize (one left posted, erroneously, must not match ours). */
#define SYNC_TAG 32001
static void clock_sync(int which, MPI_Comm c)
{
    int rank = 0, size = 1, remote = 0, len = 0;
    double best = 1e30, offset = 0, t;
    char host[MPI_MAX_PROCESSOR_NAME + 1] = "", root[MPI_MAX_PROCESSOR_NAME + 1] = "";
    if (clock_done[which])
        return;
    PMPI_Comm_rank(c, &rank);
    PMPI_Comm_size(c, &size);
    PMPI_Get_processor_name(host, &len);
    if (rank == 0) {
        for (int r = 1; r < size; r++) {
            PMPI_Send(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, r, SYNC_TAG, c);
            PMPI_Recv(&remote, 1, MPI_INT, r, SYNC_TAG, c, MPI_STATUS_IGNORE);
            for (int k = 0; remote && k < SYNC_ROUNDS; k++) {
                PMPI_Recv(NULL, 0, MPI_BYTE, r, SYNC_TAG, c, MPI_STATUS_IGNORE);
                t = now();
                PMPI_Send(&t, 1, MPI_DOUBLE, r, SYNC_TAG, c);
            }
        }
    } else {
        PMPI_Recv(root, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, SYNC_TAG, c, MPI_STATUS_IGNORE);
        remote = strcmp(root, host) != 0;
        PMPI_Send(&remote, 1, MPI_INT, 0, SYNC_TAG, c);
        for (int k = 0; remote && k < SYNC_ROUNDS; k++) {
            double a = now(), b;
            PMPI_Send(NULL, 0, MPI_BYTE, 0, SYNC_TAG, c);
            PMPI_Recv(&t, 1, MPI_DOUBLE, 0, SYNC_TAG, c, MPI_STATUS_IGNORE);
            b = now();
            if (b - a < best) {
                best = b - a;
                offset = t - 0.5 * (a + b);
            }
        }
    }
    clock_offset[which] = offset;
    clock_error[which] = rank != 0 && remote ? 0.5 * best : 0.0; /* rank 0: the clock itself */
    clock_at[which] = now();
    clock_done[which] = 1;
}

/* an entry time on rank 0's clock: the offset drawn between its two measurements */
static double on_rank0_clock(double t)
{
    double span = clock_at[1] - clock_at[0];
    if (!clock_done[1] || span <= 0)
        return t + clock_offset[0];
    return t + clock_offset[0] + (clock_offset[1] - clock_offset[0]) * (t - clock_at[0]) / span;
}

void arrival_start(void)
{
    PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, free_info, &info_key, NULL);
    clock_sync(0, MPI_COMM_WORLD);
}

void arrival_end(void)
{
    MPI_Comm c;
    if (PMPI_Comm_dup(MPI_COMM_WORLD, &c) == MPI_SUCCESS) {
        clock_sync(1, c);
        PMPI_Comm_free(&c);
    }
}

/* the record's fields after "entries": the sampled calls, [entry, leader, ordinal, comm
 * rank, call, entry s on rank 0's clock, s in the call], and the clock */
void write_arrivals(FILE *f, const int *out_index)
{
    fprintf(f, ", \"arrivals\": [");
    for (int i = 0; i < nsamples; i++) {
        const sample_t *a = &samples[i];
        fprintf(f, "%s\n [%d, %d, %d, %d, %lld, %.9f, %.6g]", i ? "," : "",
                out_index[a->slot], a->leader, a->ordinal, a->crank, a->seq,
                on_rank0_clock(a->t0), (double)a->dur);
    }
    fprintf(f, "], \"arrivals_dropped\": %lld", samples_full);
    fprintf(f, ", \"clock\": {\"offset_s\": [%.9f, %.9f], \"error_s\": [%.9g, %.9g], "
               "\"synced\": %s}",
            clock_offset[0], clock_offset[1], clock_error[0], clock_error[1],
            clock_done[0] && clock_done[1] ? "true" : "false");
}
