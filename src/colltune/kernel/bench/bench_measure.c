/* Measuring one point (a configuration at a size): the first call checked, warm-up, the
 * batch and window sizes, repetitions until the median's interval is narrow enough or the
 * budget is spent (or the cutoff: clearly slower than the default), and rank 0's result. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

/* test-only (COLLTUNE_TEST_FAULT): the configuration's calls each take a second longer
 * (slow), or its first COLD_CALLS calls at a point COLD_US longer each (cold) */
static int g_slow, g_cold;
#define COLD_CALLS 10
#define COLD_US 2000
fault_t g_fault;

/* with `min_ticks N` a timed stretch lasts at least N timer steps: a call shorter than
 * that is timed in batches (at most MAX_BATCH calls); N = 100: one step is at most 1% of
 * a sample. 0 (probes that count a call's traffic): one call, always */
#define MAX_BATCH 1000
double g_step;

static int run_coll(bufs_t *b, MPI_Comm comm)
{
    int rc = coll_call(b, comm);
    if (g_slow)
        sleep(1);
    if (g_cold > 0) {
        struct timespec ts = {0, COLD_US * 1000L};
        g_cold--;
        nanosleep(&ts, NULL);
    }
    return rc;
}

/* the statistics of the stopping rule */
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Distribution-free 95% CI of the median from order statistics. */
static void median_ci(const double *samples, int n, double *scratch, double *med, double *lo,
                      double *hi)
{
    int j, k;
    double half;
    memcpy(scratch, samples, (size_t)n * sizeof(double));
    qsort(scratch, (size_t)n, sizeof(double), cmp_double);
    *med = n % 2 ? scratch[n / 2] : 0.5 * (scratch[n / 2 - 1] + scratch[n / 2]);
    half = 0.98 * sqrt((double)n); /* 1.96 * sqrt(n) / 2 */
    j = (int)((double)n / 2.0 - half);
    k = (int)((double)n / 2.0 + half + 0.999999);
    if (j < 0)
        j = 0;
    if (k > n - 1)
        k = n - 1;
    *lo = scratch[j];
    *hi = scratch[k];
}

/* a configuration the test-only fault switch names (COLLTUNE_TEST_FAULT) */
int fault_hits(const config_t *cfg, const char *kind)
{
    char env[MAX_NAME + 16];
    const char *v;
    if (!g_fault.kind[0] || strcmp(g_fault.kind, kind))
        return 0;
    for (int a = 0; a < cfg->nassign; a++)
        if (!strcmp(cfg->assign[a].name, g_fault.name) && cfg->assign[a].value == g_fault.value)
            return 1;
    snprintf(env, sizeof(env), "OMPI_MCA_%s", g_fault.name);
    v = getenv(env);
    return v && atoll(v) == g_fault.value;
}

/* The baselines' medians per timing mode, by size and communicator size (rank 0 only):
 * what `cutoff` compares the other configurations' points with. */
typedef struct {
    long long size;
    int group;
    double med[2];
} ref_t;

static ref_t *g_refs;
static int g_nref, g_capref;

static const ref_t *ref_find(long long size, int group)
{
    for (int i = 0; i < g_nref; i++)
        if (g_refs[i].size == size && g_refs[i].group == group)
            return &g_refs[i];
    return NULL;
}

static void ref_add(long long size, int group, const double med[2])
{
    if (g_nref == g_capref) {
        g_capref = g_capref ? 2 * g_capref : 64;
        g_refs = realloc(g_refs, (size_t)g_capref * sizeof(ref_t));
        if (!g_refs)
            die("out of memory");
    }
    g_refs[g_nref].size = size;
    g_refs[g_nref].group = group;
    g_refs[g_nref].med[0] = med[0];
    g_refs[g_nref].med[1] = med[1];
    g_nref++;
}

/* Repetitions before the cutoff may stop a point, whatever min_reps says. Up to 7 the CI's
 * lower end is the fastest repetition: 3 repetitions all above 1.5x the default's median.
 * In a full sweep of 786 points (docs/benchmarks.md) none of the 617 points that rule
 * would have stopped had medians within 1.2x of the default's in both modes. */
#define CUT_REPS 3

/* min_reps is a floor while a point has used less than this many times its point_time;
 * past it (a default at a second per call, a busy-polling MPI oversubscribed) CUT_REPS
 * repetitions do: launch pairs, not repetitions, carry the statistics. A plan's
 * floor_time replaces it where a stage must end in a stated time (calls that wait out
 * retransmission timeouts: tuner/stalls.py) */
#define SLOW_POINT 10.0

/* 1 when, in some timing mode measured, the point's median CI lies above cutoff times
 * the reference's median */
static int clearly_slower(const plan_t *plan, const ref_t *ref, double *const series[2], int n,
                          double *scratch)
{
    for (int m = 0; m < 2; m++) {
        double med, lo, hi;
        if (!series[m] || ref->med[m] <= 0)
            continue;
        median_ci(series[m], n, scratch, &med, &lo, &hi);
        if (lo > plan->cutoff * ref->med[m])
            return 1;
    }
    return 0;
}

/* `comm` is this rank's communicator (MPI_COMM_NULL: in no group); `active` ranks are in
 * one, all measured at once; a repetition's time is the slowest rank's of any group */
/* Called as each point begins: a debugger's breakpoint here tells which point the library
 * calls that follow belong to (Intel MPI's proof of what ran, backends/impi/proof.py).
 * Not static and never inlined, so the symbol stays in the binary. */
void collbench_point(int cid, long long size);
__attribute__((noinline)) void collbench_point(int cid, long long size)
{
    __asm__ volatile("" : : "r"(cid), "r"(size) : "memory");
}

/* the last part of a delay is waited busy: a sleep's wake-up is late by up to a
 * scheduler tick, a spin's end is not */
#define SPIN_SECONDS 200e-6

/* An arrival pattern's repetition `n`, after the barrier: this rank (`r` in the measured
 * communicator, -1: in none) waits its delay of row n % narrival and returns the time it
 * enters the call, from which its time is taken (a late rank is not charged for its
 * lateness; a rank kept waiting is). It sleeps most of the delay: a rank spinning the
 * whole delay beside others spinning in the call (more ranks than cores) lost its core
 * for whole scheduler slices and entered 2-4x later than asked (10-19 ms for 5 ms here),
 * where a sleeper is woken at once. `offset`: how long after the barrier it entered, on
 * its own clock. */
static double arrive(const plan_t *plan, int n, int r, double *offset)
{
    const double *row = plan->arrival + (size_t)(n % plan->narrival) * MAX_ARRIVAL_RANKS;
    double d = r >= 0 && r < plan->arrival_ranks ? row[r] : 0.0;
    double t_exit = MPI_Wtime(), t_in;
    if (d > SPIN_SECONDS) {
        double s = d - SPIN_SECONDS;
        struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
        nanosleep(&ts, NULL);
    }
    while ((t_in = MPI_Wtime()) - t_exit < d)
        ;
    *offset = t_in - t_exit;
    return t_in;
}

void measure_point(const plan_t *plan, const coll_ops_t *ops, const config_t *cfg,
                   long long size, MPI_Comm comm, int active)
{
    int cid = cfg->cid;
    bufs_t b;
    int stop = 0, n = 0, rc, fail;
    int cap = plan->max_reps > 0 ? plan->max_reps : 1;
    double floor_time = plan->floor_time > 0 ? plan->floor_time : SLOW_POINT * plan->point_time;
    double *samples = NULL, *scratch = NULL, t_begin, t_call, t_tick;
    double t_point = MPI_Wtime(); /* the point's whole cost, said with its result */
    int window = 1, batch = 1, more;
    double *series[2][NOBJ] = {{NULL}}; /* [mode][objective], rank 0 only */
    double *spread = NULL; /* rank 0: each arrival repetition's entry spread */
    double loop[NOBJ][LOOP_STRETCHES];
    int loop_calls = 0;
    double start[NOBJ];
    int start_calls = 0;
    int wrong = fault_hits(cfg, "wrong");
    g_slow = fault_hits(cfg, "slow");
    g_cold = fault_hits(cfg, "cold") ? COLD_CALLS : 0;
    int group = cfg->group ? cfg->group : g_size, cut = 0;
    const ref_t *ref = NULL;

    collbench_point(cid, size);
    if (g_rank == 0) {
        printf("{\"event\":\"begin\",\"cid\":%d,\"size\":%lld}\n", cid, size);
        fflush(stdout);
    }
    t_begin = MPI_Wtime();
    if (bufs_alloc(&b, ops, size, comm) != 0)
        die("out of memory");

    /* correctness: the first call on fresh inputs must give the right answer */
    bufs_fill(&b);
    if (g_rank == 0)
        pvars_mark();
    sync_barrier();
    t_call = MPI_Wtime();
    rc = run_coll(&b, comm);
    t_call = MPI_Wtime() - t_call; /* the start's first call */
    if (wrong)
        corrupt_output(&b);
    /* 2: the library returned an error, 1: a wrong answer, 0: right */
    fail = ctl_bcast((int)ctl_max(rc != MPI_SUCCESS ? 2.0 : (bufs_check(&b) ? 0.0 : 1.0)));
    if (fail) {
        if (g_rank == 0) {
            char err[MPI_MAX_ERROR_STRING] = "on another rank";
            int elen;
            if (rc != MPI_SUCCESS)
                MPI_Error_string(rc, err, &elen);
            printf("{\"event\":\"result\",\"cid\":%d,\"size\":%lld,\"status\":\"invalid\","
                   "\"message\":", cid, size);
            if (fail == 2) {
                char msg[MPI_MAX_ERROR_STRING + 64];
                for (char *c = err; *c; c++)  /* MPICH's error stack: one line */
                    if (*c == '\n')
                        *c = ' ';
                snprintf(msg, sizeof(msg), "the library returned an error: %s", err);
                put_json_string(msg);
            } else
                printf("\"wrong result on at least one rank\"");
            printf("}\n");
            fflush(stdout);
        }
        bufs_free(&b);
        g_slow = 0;
        return;
    }
    if (plan->start > 0)
        start_calls = measure_start(plan, &b, comm, run_coll, t_call, active, cid, size, start);
    t_call = MPI_Wtime();
    for (int w = 0; w < plan->warmup; w++) {
        sync_barrier();
        t_call = MPI_Wtime();
        run_coll(&b, comm);
    }
    /* the window: `window` calls, fewer where the last warm-up call says they would take
     * longer than window_time (a default that takes a second per call oversubscribed) */
    t_call = ctl_max(MPI_Wtime() - t_call);
    if (g_rank == 0) {
        window = plan->window;
        if (t_call > 0 && plan->window_time / t_call < window)
            window = (int)(plan->window_time / t_call);
        if (window < 1)
            window = 1;
    }
    window = ctl_bcast(window);
    /* a call under min_ticks timer steps: batches of calls, doubled until one lasts that
     * long (a call shorter than one step says little about its own time) */
    /* (not under an arrival pattern: a delay stands before each call, not each batch) */
    more = ctl_bcast(g_rank == 0 && plan->min_ticks > 0 && g_step > 0 && !plan->narrival
                     && t_call < plan->min_ticks * g_step);
    while (more) {
        double t0, dt;
        batch *= 2;
        sync_barrier();
        t0 = MPI_Wtime();
        for (int c = 0; c < batch; c++)
            run_coll(&b, comm);
        dt = ctl_max(MPI_Wtime() - t0);
        more = ctl_bcast(g_rank == 0 && dt < plan->min_ticks * g_step && batch < MAX_BATCH);
    }
    if (batch > MAX_BATCH)
        batch = MAX_BATCH;
    if (window < batch)
        window = batch;
    if (g_rank == 0 && MPI_Wtime() - t_begin > TICK_SECONDS) { /* a slow warm-up is alive */
        printf("{\"event\":\"tick\",\"cid\":%d,\"size\":%lld,\"n\":0}\n", cid, size);
        fflush(stdout);
    }

    if (g_rank == 0) {
        for (int m = 0; m < 2; m++)
            for (int o = 0; o < NOBJ; o++)
                series[m][o] = (plan->timing & (1 << m)) ? malloc((size_t)cap * sizeof(double))
                                                         : NULL;
        scratch = malloc((size_t)cap * sizeof(double));
        if (plan->narrival)
            spread = malloc((size_t)cap * sizeof(double));
        /* the series that drives the stopping rule and becomes "samples" */
        samples = series[(plan->timing & TIMING_ISOLATED) ? 0 : 1][plan->objective];
        if (plan->cutoff > 0 && !cfg->baseline)
            ref = ref_find(size, group);
    }
    t_begin = t_tick = MPI_Wtime();
    while (!stop) {
        for (int m = 0; m < 2; m++) {
            double t0, t1, local, mx, sum, offset = 0;
            int calls = m == 0 ? batch : window;
            if (!(plan->timing & (1 << m)))
                continue;
            sync_barrier();
            if (m == 0 && plan->narrival) {
                t0 = arrive(plan, n, b.idle ? -1 : b.r, &offset);
                calls = 1;
            } else {
                t0 = MPI_Wtime();
            }
            for (int c = 0; c < calls; c++)
                run_coll(&b, comm);
            t1 = MPI_Wtime();
            local = b.idle ? 0.0 : (t1 - t0) / calls;
            if (m == 0 && plan->narrival) {
                /* the replay's spread, after the call: the entries' offsets after the
                 * barrier, latest minus earliest (control messages here would have
                 * synchronised the ranks again before it) */
                double late = ctl_max(b.idle ? 0.0 : offset);
                double early = -ctl_max(b.idle ? -1e30 : -offset);
                if (g_rank == 0)
                    spread[n] = late - early;
            }
            ctl_max_sum(local, &mx, &sum);
            if (g_rank == 0) {
                series[m][OBJ_COMPLETION][n] = mx;
                series[m][OBJ_MEAN][n] = sum / active;
                series[m][OBJ_ROOT][n] = local; /* every rooted collective roots at 0 */
            }
        }
        n++; /* on every rank: each takes the next repetition's arrival row */
        if (g_rank == 0) {
            tick_if_due(cid, size, n, &t_tick); /* a slow point shows it is alive */
            double *const objective[2] = {series[0][plan->objective],
                                          series[1][plan->objective]};
            if (n >= cap) {
                stop = 1;
            } else if (ref && n >= CUT_REPS && clearly_slower(plan, ref, objective, n, scratch)) {
                stop = cut = 1;
            } else if (n >= plan->min_reps
                       || (n >= CUT_REPS && MPI_Wtime() - t_begin > floor_time)) {
                double med, lo, hi;
                if (MPI_Wtime() - t_begin > plan->point_time) {
                    stop = 1;
                } else {
                    median_ci(samples, n, scratch, &med, &lo, &hi);
                    if (med > 0 && (hi - lo) / 2.0 <= plan->rel_ci * med)
                        stop = 1;
                }
            }
        }
        stop = ctl_bcast(stop);
    }
    if (plan->loop > 0) {
        double per_call = 0, med, lo, hi;
        for (int m = 0; g_rank == 0 && m < 2; m++)
            if (series[m][plan->objective]) {
                median_ci(series[m][plan->objective], n, scratch, &med, &lo, &hi);
                per_call = med > per_call ? med : per_call;
            }
        loop_calls = measure_loop(plan, &b, comm, run_coll, per_call, active, cid, size, loop);
    }
    if (g_rank == 0) {
        double med, lo, hi, sum = 0, mn = samples[0], mx = samples[0];
        int first_mode = 1;
        median_ci(samples, n, scratch, &med, &lo, &hi);
        for (int i = 0; i < n; i++) {
            sum += samples[i];
            if (samples[i] < mn)
                mn = samples[i];
            if (samples[i] > mx)
                mx = samples[i];
        }
        printf("{\"event\":\"result\",\"cid\":%d,\"size\":%lld,\"status\":\"ok\",\"n\":%d,"
               "\"median\":%.9g,\"ci_lo\":%.9g,\"ci_hi\":%.9g,\"mean\":%.9g,\"min\":%.9g,"
               "\"max\":%.9g,\"window\":%d,\"batch\":%d,\"loop\":%d,\"start\":%d,"
               "\"objective\":\"%s\",\"cut\":%s,\"spent\":%.9g", cid, size, n, med, lo, hi,
               sum / n, mn, mx, window, batch, loop_calls, start_calls,
               obj_names[plan->objective], cut ? "true" : "false", MPI_Wtime() - t_point);
        if (plan->cutoff > 0 && cfg->baseline) {
            double meds[2] = {0, 0};
            for (int m = 0; m < 2; m++)
                if (series[m][plan->objective])
                    median_ci(series[m][plan->objective], n, scratch, &meds[m], &lo, &hi);
            ref_add(size, group, meds);
        }
        pvars_print();
        printf(",\"samples\":[");
        for (int i = 0; i < n; i++)
            printf(i ? ",%.9g" : "%.9g", samples[i]);
        printf("],\"series\":{");
        for (int m = 0; m < 4; m++) {
            int count = m < 2 ? n : m == 2 ? LOOP_STRETCHES : 1;
            if (m < 2 ? !series[m][0] : m == 2 ? !loop_calls : !start_calls)
                continue;
            printf("%s\"%s\":{", first_mode ? "" : ",", mode_names[m]);
            first_mode = 0;
            for (int o = 0; o < NOBJ; o++) {
                printf("%s\"%s\":[", o ? "," : "", obj_names[o]);
                for (int i = 0; i < count; i++)
                    printf(i ? ",%.9g" : "%.9g",
                           m < 2 ? series[m][o][i] : m == 2 ? loop[o][i] : start[o]);
                printf("]");
            }
            printf("}");
        }
        printf("}");
        if (spread) { /* what the replay gave: the entries' spread, each repetition */
            printf(",\"arrival_spread\":[");
            for (int i = 0; i < n; i++)
                printf(i ? ",%.9g" : "%.9g", spread[i]);
            printf("]");
        }
        printf("}\n");
        fflush(stdout);
    }
    free(spread);
    for (int m = 0; m < 2; m++)
        for (int o = 0; o < NOBJ; o++)
            free(series[m][o]);
    free(scratch);
    bufs_free(&b);
    g_slow = 0;
}

void refs_free(void)
{
    free(g_refs);
}
