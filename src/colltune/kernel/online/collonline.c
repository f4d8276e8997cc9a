/* collonline: tune online, inside the application's own run (tune online). Preloaded like
 * collprof, it routes a share of each call group's calls (collective, communicator, size
 * bucket) to candidate configurations and times every call past the group's warm-up
 * (its first min_calls, the library's choice alone), so the application's own
 * calls, with their arrival pattern, cache and network state, judge the candidates.
 *
 * Every rank must run the same configuration for the same call, or a collective mixes
 * algorithms and hangs. So nothing here depends on a rank's own clock: the schedule is a
 * function of the group's call count, and what the times decide (a candidate dropped, the
 * configuration kept) changes only at a batch's end, after the batch's times were reduced
 * (MPI_MAX) on a private duplicate of the communicator, which gives every rank the same
 * numbers. The application's communicator never sees an extra call: the duplicates are
 * made inside the group's first call of each configuration, a call every rank makes.
 *
 * How a configuration is run (`switch` in the plan): Open MPI's coll/tuned reads its forced
 * algorithm when a communicator is created, so each candidate is a duplicate made right
 * after writing its control variables through MPI_T, then restored, so the application's
 * own communicators keep the library's choice ("dup"). MPICH reads its algorithm variables
 * at each call: they are written before the candidate's call and restored right after it,
 * outside its timing ("call").
 *
 * A call's time is the slowest rank's time from its own entry: a late rank is not charged
 * to the algorithm, a rank kept waiting by it is. Passed through untouched: nonblocking and
 * persistent collectives (not wrapped), intercommunicators, communicators of one rank,
 * user-defined reduction operations, and everything under MPI_THREAD_MULTIPLE (refused:
 * the job stops at MPI_Init_thread with a message; calls from several threads at once
 * could reach the schedule in different orders on different ranks).
 *
 * The plan (COLLTUNE_ONLINE_PLAN, written by tune online):
 *   share S          at most this fraction of a group's calls explore (one call in 1/S)
 *   min_calls N      a group's first N calls run the library's choice, untimed (its
 *                    warm-up); a group with no more calls is never explored
 *   batch B          calls between two reductions of the times
 *   first F          calls each candidate gets in the first round of successive halving
 *   samples K        calls the last candidate(s) in question get (at most, per candidate)
 *   drop F           a candidate whose median is F times the default's is dropped
 *   flush S          what is learned so far is written every S seconds at most (0: only
 *                    at the end), so a run killed before MPI_Finalize leaves its evidence
 *   switch dup|call  how a candidate is run (above)
 *   vars API         the library's own variable API the candidates are written through
 *                    instead of MPI_T (mca_base_var: Open MPI's; online_mpit.c)
 *   cand COLL ID N NAME VALUE ... [below B]   a candidate: N control variables to
 *                    write; ID, the algorithm's number where it runs with the library's
 *                    own parameters (tune online maps the others' ids to what they set);
 *                    `below`: its segment size, so never tried on calls of B bytes or less
 *   skip COLL ID NP BUCKET           not explored in groups of that communicator size and
 *                                    bucket (the store already knows it clearly slower, or
 *                                    the cost model ranks it below its algorithm's best
 *                                    segment size there)
 *   prior COLL ID NP BUCKET N R      earlier runs of the same command gave it N calls in
 *                                    such groups, its median R times the library's choice's
 *                                    (each launch's own ratio): the halving starts there
 *   final COLL ID NP BUCKET          the earlier runs' halving ended with it, its gain not
 *                                    yet confirmed: it alone gets `samples` more calls
 * Fortran callers (mpif.h, `use mpi`, Open MPI's mpi_f08) reach the same routing: their
 * library entries call PMPI_ directly, so each is wrapped too and handed the candidate's
 * communicator as a Fortran handle; the library's own entry does the rest (MPI_IN_PLACE
 * and the other Fortran sentinels stay its business).
 *
 * Here: each communicator's state, the schedule and the times, the start and end. Beside
 * it (online.h between them): online_state.c, what every file of the layer shares (the
 * plan, the communicators' list, fail(), the settings); online_halving.c, successive
 * halving over a group's reduced times; online_c.c and online_fortran.c, the wrappers;
 * online_plan.c, the plan; online_mpit.c, a candidate's MPI_T writes; online_check.c, the
 * check of a candidate's first call; online_files.c, what each rank writes. Calls run one
 * way: the wrappers call this file and online_check.c, this file calls the plan, MPI_T,
 * halving and files ones, and all of them read online_state.c; none calls back.
 *
 * Outputs, in COLLTUNE_ONLINE_DIR: schedule.RANK (each rank's configurations per group,
 * as counts and a digest of the sequence, under its communicator's name) and
 * evidence.RANK (rank 0 of each communicator: every group's times per configuration, as
 * JSON lines). Written at MPI_Finalize, and
 * while the run goes on (flush) with the head line saying "partial": only the batches
 * already reduced, the same on every rank, so a killed run's evidence is still agreed.
 *
 * A group whose exploration is over is no longer timed: its configuration is fixed for the
 * rest of the run, and its batches' reductions would only cost the application. */
#define _GNU_SOURCE /* gethostname under -std=c99 */
#include <fcntl.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "online.h"
#pragma GCC visibility push(hidden)

static int g_on, g_started, g_keyval = MPI_KEYVAL_INVALID, g_seq, in_layer;
static double g_flushed; /* when the files were last written */
/* communicators the application freed before any of their groups explored, and their
 * calls: their state is gone (said at the end, by world rank 0) */
static long long g_freed, g_freed_calls;

static void refused_once(int c, int k)
{
    fprintf(stderr, "colltune online: %s candidate %d: a control variable was refused; it "
                    "runs the library's choice and is dropped\n", NAMES[c], P.cand[c][k].id);
}

/* ---- the state of each communicator the application calls a collective on ---- */

/* a group's batch reduced (below) */
static void reduce_batch(comm_st *s, group_t *g, MPI_Request *req);

/* The application freed the communicator: what the layer made for it goes too, its
 * private duplicate and its candidates' duplicates (kept, they exhausted the library's
 * communicators in an application that makes and frees many). Every rank of it frees it,
 * so every rank is here: its groups' pending times are reduced first, alike. A state
 * whose groups explored nothing goes whole; the others keep their times for the files. */
static int st_delete(MPI_Comm comm, int key, void *val, void *extra)
{
    comm_st *s = val;
    int explored = 0;
    long long calls = 0;
    (void)comm;
    (void)key;
    (void)extra;
    if (!g_on || !s) /* after finish(): MPI_Finalize's own deletions */
        return MPI_SUCCESS;
    double t0 = PMPI_Wtime();
    for (int c = 0; c < N_OCOLL; c++)
        for (int b = 0; b < NBUCKET; b++) {
            group_t *g = s->g[c][b];
            if (!g)
                continue;
            if (g->nb && s->size > 1) {
                reduce_batch(s, g, NULL);
                keep_batch(g, P.ncand[c]);
            }
            explored |= g->slot > 0;
            calls += g->calls;
        }
    for (int c = 0; c < N_OCOLL; c++)
        for (int k = 0; k < MAXC; k++)
            if (s->made[c][k] == 1) {
                PMPI_Comm_free(&s->cand[c][k]);
                s->made[c][k] = -1;
            }
    if (s->priv != MPI_COMM_NULL)
        PMPI_Comm_free(&s->priv);
    s->comm = MPI_COMM_NULL;
    if (!explored) {
        g_freed++;
        g_freed_calls += calls;
        comm_st **at = &g_comms;
        while (*at && *at != s)
            at = &(*at)->next;
        if (*at)
            *at = s->next;
        for (int c = 0; c < N_OCOLL; c++)
            for (int b = 0; b < NBUCKET; b++)
                if (s->g[c][b]) {
                    for (int k = 0; k < MAXC; k++)
                        free(s->g[c][b]->t[k]);
                    free(s->g[c][b]);
                }
        free(s);
    }
    g_overhead += PMPI_Wtime() - t0;
    return MPI_SUCCESS;
}

/* the communicator's name in every member's schedule (its rank 0's world rank and count
 * of communicators), so tune online compares each communicator's schedule across its own
 * ranks; and its layout, for the store (a sub-communicator's is its own, not the job's):
 * each rank's host, by a digest of its name, gathered on the private duplicate to its rank
 * 0, which counts the hosts and the ranks on the fullest */
static void identify(comm_st *s)
{
    int id[2] = {s->world_rank, s->seq};
    char host[256] = "";
    unsigned long long me = 1469598103934665603ULL, *all = NULL;
    gethostname(host, sizeof host - 1);
    for (const char *p = host; *p; p++)
        me = (me ^ (unsigned char)*p) * 1099511628211ULL;
    if (s->rank == 0 && !(all = malloc((size_t)s->size * sizeof *all)))
        fail("out of memory");
    PMPI_Bcast(id, 2, MPI_INT, 0, s->priv);
    s->lead = id[0];
    s->lead_seq = id[1];
    PMPI_Gather(&me, 1, MPI_UNSIGNED_LONG_LONG, all, 1, MPI_UNSIGNED_LONG_LONG, 0, s->priv);
    if (s->rank != 0)
        return;
    s->nodes = s->ppn = 0;
    for (int i = 0; i < s->size; i++) {
        int seen = 0, here = 0;
        for (int j = 0; j < s->size; j++) {
            seen += j < i && all[j] == all[i];
            here += all[j] == all[i];
        }
        s->nodes += !seen;
        s->ppn = here > s->ppn ? here : s->ppn;
    }
    free(all);
}

static comm_st *state_of(MPI_Comm comm)
{
    void *v;
    int found = 0, inter = 0;
    if (comm == MPI_COMM_NULL)
        return NULL;
    PMPI_Comm_test_inter(comm, &inter);
    if (inter)
        return NULL;
    PMPI_Comm_get_attr(comm, g_keyval, &v, &found);
    if (found)
        return v;
    comm_st *s = calloc(1, sizeof *s);
    if (!s)
        fail("out of memory");
    s->comm = comm;
    PMPI_Comm_size(comm, &s->size);
    PMPI_Comm_rank(comm, &s->rank);
    PMPI_Comm_rank(MPI_COMM_WORLD, &s->world_rank);
    s->seq = g_seq++;
    s->priv = MPI_COMM_NULL;
    s->nodes = 1;
    s->ppn = s->size;
    s->lead = s->world_rank;
    s->lead_seq = s->seq;
    if (s->size > 1) {
        PMPI_Comm_dup(comm, &s->priv); /* inside a call every rank of `comm` makes */
        identify(s);
    }
    PMPI_Comm_set_attr(comm, g_keyval, s);
    s->next = g_comms;
    g_comms = s;
    return s;
}

static int bucket_of(long long bytes)
{
    int b = 0;
    while (bytes > 0 && b < NBUCKET - 1) {
        bytes >>= 1;
        b++;
    }
    return b;
}

/* the batch's times, the same on every rank: the slowest rank's per call */
static void reduce_batch(comm_st *s, group_t *g, MPI_Request *req)
{
    if (req)
        PMPI_Iallreduce(MPI_IN_PLACE, g->bt, g->nb, MPI_DOUBLE, MPI_MAX, s->priv, req);
    else
        PMPI_Allreduce(MPI_IN_PLACE, g->bt, g->nb, MPI_DOUBLE, MPI_MAX, s->priv);
}

/* ---- one call: where it runs, and its time ---- */


MPI_Comm route(int c, MPI_Comm comm, long long bytes, int ok, call_t *call)
{
    call->g = NULL;
    call->written = 0;
    call->check = 0;
    call->warm = 0;
    call->entry = g_on && !in_layer ? PMPI_Wtime() : 0;
    if (!g_on || in_layer || in_fortran || !ok)
        return comm;
    in_layer++;
    comm_st *s = state_of(comm);
    in_layer--;
    if (!s || s->size < 2)
        return comm;
    int b = bucket_of(bytes);
    group_t *g = s->g[c][b];
    if (!g) {
        g = s->g[c][b] = calloc(1, sizeof *g);
        if (!g)
            return comm;
        g->bytes = bytes;
        g->target = P.first;
        prune(g, c, s->size, b);
    }
    int ncand = P.ncand[c], k = g->current;
    long long i = g->calls++;
    long long period = (long long)ceil(1.0 / P.share);
    if (!g->done && ncand > 1 && i >= P.min_calls && (i - P.min_calls) % period == period - 1) {
        /* the next candidate, in turn, still short of this round's calls (as far as the
         * last batch's end says); none: the slot runs what runs outside exploration */
        for (int tries = 0; tries < ncand - 1; tries++) {
            int cand = 1 + (int)(g->slot++ % (ncand - 1));
            if (!g->dropped[cand] && !g->halved[cand]
                && g->sched[cand] + g->pn[cand] < g->target && s->made[c][cand] >= 0) {
                k = cand;
                call->check = !g->sched[cand]++; /* its first: checked, from C */
                break;
            }
        }
    }
    g->used[k]++;
    /* a group's first calls are its warm-up (connections made, caches cold), and no
     * candidate runs among them: timed, they would count for the library's choice alone
     * and make every candidate look faster than it is, in the halving and in the decision
     * alike; untimed, they cost no reduction either */
    call->warm = i < P.min_calls;
    g->digest = g->digest * 1099511628211ULL + (unsigned long long)(k + 1);
    call->s = s;
    call->g = g;
    call->c = c;
    call->k = k;
    if (k == 0 || (!P.cand[c][k].nvar))
        return comm;
    if (P.per_call) {
        call->written = set_candidate(&P.cand[c][k]);
        if (!call->written) { /* the same on every rank: one library, one answer */
            if (!g->dropped[k])
                refused_once(c, k);
            g->dropped[k] = 1; /* this call runs the library's choice */
        }
        return comm;
    }
    if (!s->made[c][k]) {
        int refused;
        in_layer++;
        s->cand[c][k] = make_candidate(&P.cand[c][k], s->comm, &refused);
        s->made[c][k] = refused ? -1 : 1; /* -1: no group of `comm` schedules it again */
        in_layer--;
        if (refused) { /* said once, per rank: the library would not take it */
            refused_once(c, k);
            g->dropped[k] = 1; /* no more calls scheduled to it, on any rank alike */
        }
    }
    return s->cand[c][k];
}

/* a candidate the library refused for this call's arguments (Open MPI: an early
 * MPI_ERR_UNSUPPORTED_OPERATION, the same on every rank, such as barrier's two-process
 * algorithm on more ranks): dropped for the group, said once; the call is made again with
 * the library's choice. 1: make it again */
int refused_call(call_t *call, int rc)
{
    if (rc == MPI_SUCCESS || !call->g || !call->k)
        return 0;
    if (call->written)
        unset_candidate(&P.cand[call->c][call->k]);
    call->written = 0;
    group_t *g = call->g;
    if (!g->dropped[call->k])
        fprintf(stderr, "colltune online: %s candidate %d refused a call of %lld bytes "
                        "(error %d); dropped, the call made again with the library's "
                        "choice\n", NAMES[call->c], P.cand[call->c][call->k].id, g->bytes,
                rc);
    g->dropped[call->k] = 1;
    g->used[call->k]--;
    g->used[0]++;
    call->k = 0;
    return 1;
}

void wrong_answer(call_t *call)
{
    group_t *g = call->g;
    if (!call->k || !g)
        return;
    if (call->s->rank == 0)
        fprintf(stderr, "colltune online: %s candidate %d answered differently from the "
                        "library's choice (a call of %lld bytes, on %d ranks); dropped, the "
                        "library's answer kept\n", NAMES[call->c], P.cand[call->c][call->k].id,
                g->bytes, call->s->size);
    g->dropped[call->k] = g->wrong[call->k] = 1;
}

void restore(call_t *call)
{
    if (call->written) /* before anything else runs: only this call was the candidate's */
        unset_candidate(&P.cand[call->c][call->k]);
    call->written = 0;
}

static void time_batch(call_t *call, double t0, double t1)
{
    group_t *g = call->g;
    /* `done` changes at a batch's end only, `warm` with the group's count: alike on every
     * rank */
    if (!g || g->done || call->warm)
        return;
    g->bt[g->nb] = t1 - t0;
    g->bc[g->nb++] = call->k;
    if (g->nb >= P.batch) {
        in_layer++;
        reduce_batch(call->s, g, NULL);
        in_layer--;
        keep_batch(g, P.ncand[call->c]);
        /* each rank by its own clock: writing files changes nothing any rank runs */
        if (P.flush > 0 && t1 - g_flushed >= P.flush) {
            write_files(1);
            g_flushed = PMPI_Wtime();
        }
    }
}

void timed(call_t *call, double t0, double t1)
{
    restore(call);
    time_batch(call, t0, t1);
    if (call->entry > 0) /* all the wrapper did, the application's call excluded */
        g_overhead += PMPI_Wtime() - call->entry - (t1 - t0);
}

int builtin_op(MPI_Op op)
{
    return op == MPI_SUM || op == MPI_MAX || op == MPI_MIN || op == MPI_PROD
           || op == MPI_LAND || op == MPI_BAND || op == MPI_LOR || op == MPI_BOR
           || op == MPI_LXOR || op == MPI_BXOR || op == MPI_MAXLOC || op == MPI_MINLOC;
}

long long tbytes(int count, MPI_Datatype t)
{
    int sz = 0;
    PMPI_Type_size(t, &sz);
    return (long long)count * sz;
}

#pragma GCC visibility pop

/* ---- start and end ---- */

void start(void)
{
    MPI_Comm parent = MPI_COMM_NULL;
    int rank = 0;
    if (g_started++) /* a Fortran MPI_Init that calls the C one: once */
        return;
    take_settings();
    if (!g_plan_path[0] || !g_dir[0])
        return; /* loaded without a plan: the layer does nothing */
    /* a process a rank spawned is not one of the job's ranks (Open MPI hands it their
     * environment, the layer with it): it explores nothing and writes nothing */
    PMPI_Comm_get_parent(&parent);
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (parent != MPI_COMM_NULL || !claim_rank(rank))
        return;
    read_plan(g_plan_path);
    snprintf(P.dir, sizeof P.dir, "%s", g_dir);
    PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, st_delete, &g_keyval, NULL);
    write_library();
    g_flushed = PMPI_Wtime();
    g_on = 1;
}

void refuse_threads(int required)
{
    take_settings();
    if (required == MPI_THREAD_MULTIPLE && g_plan_path[0])
        fail("the application asks for MPI_THREAD_MULTIPLE: tune online does not run "
             "under it yet (calls from several threads could reach the schedule in "
             "different orders on different ranks); use tune profile and tune app");
}

void finish(void)
{
    if (!g_on)
        return;
    double t0 = PMPI_Wtime();
    /* the partial batches: reduced all at once (nonblocking), so communicators that ranks
     * list in different orders cannot wait on each other */
    int nreq = 0, cap = 0;
    MPI_Request *req = NULL;
    for (comm_st *s = g_comms; s; s = s->next)
        for (int c = 0; c < N_OCOLL; c++)
            for (int b = 0; b < NBUCKET; b++)
                if (s->g[c][b] && s->g[c][b]->nb && s->size > 1) {
                    if (nreq == cap) {
                        cap = cap ? 2 * cap : 16;
                        req = realloc(req, (size_t)cap * sizeof *req);
                        if (!req)
                            fail("out of memory");
                    }
                    reduce_batch(s, s->g[c][b], &req[nreq++]);
                }
    for (int i = 0; i < nreq; i++) /* all started: waiting in turn progresses them all */
        PMPI_Wait(&req[i], MPI_STATUS_IGNORE);
    free(req);
    for (comm_st *s = g_comms; s; s = s->next)
        for (int c = 0; c < N_OCOLL; c++)
            for (int b = 0; b < NBUCKET; b++)
                if (s->g[c][b] && s->g[c][b]->nb)
                    keep_batch(s->g[c][b], P.ncand[c]);
    g_overhead += PMPI_Wtime() - t0;
    write_files(0);
    int rank = 0;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (g_freed && rank == 0)
        fprintf(stderr, "colltune online: %lld communicator(s) freed before any of their "
                        "groups explored (%lld calls on this rank): not in the schedule\n",
                g_freed, g_freed_calls);
    g_on = 0;
    close_mpit();
}
