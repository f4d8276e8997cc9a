/*
 * collbench: measures one MPI collective over a list of (configuration, size)
 * points and prints one JSON object per line on rank 0's stdout.
 *
 * The kernel is MPI-agnostic: a configuration is a list of MPI_T control
 * variable assignments chosen by the Python side. Per configuration the
 * kernel writes them, duplicates MPI_COMM_WORLD (libraries read their
 * selection variables when a communicator is created) and measures on the
 * duplicate.
 *
 * Methodology (see docs/methodology.md):
 *  - ranks are synchronised before every repetition by a dissemination
 *    barrier built from point-to-point messages, never by MPI_Barrier, which
 *    is itself a collective of the library under test;
 *  - the time of a repetition is the maximum of the ranks' local times
 *    (completion); the mean over ranks (what OSU prints) and the root's own
 *    time are recorded beside it;
 *  - `timing isolated` times one call after the barrier; `timing
 *    back-to-back` times a window of `window` consecutive calls with no
 *    synchronisation between them, divided by the calls (how an application
 *    loop calls it: consecutive calls overlap and skew carries over);
 *    `timing both` takes one of each per repetition;
 *  - a call shorter than 100 steps of MPI_Wtime (what it really resolves,
 *    measured at start and reported there with MPI_Wtick) is timed in batches
 *    of consecutive calls, at least that long, in either mode ("batch");
 *  - a point whose calls are slow reports "tick" events every 2 s (the
 *    launcher's watchdog is for hangs), and past 10x its time budget stops at
 *    3 repetitions whatever min_reps says;
 *  - repetitions continue until the 95% confidence interval of the median is
 *    within a relative tolerance, a time budget is spent, or max_reps is hit;
 *  - results are checked for correctness; a wrong answer marks the point
 *    invalid;
 *  - configurations and sizes are visited in a seeded random order;
 *  - with `cutoff F`, a point stops early once its median's 95% CI lies
 *    wholly above F times the median of the library default (the configuration
 *    marked `baseline`, then measured first) at the same size and communicator,
 *    in any timing mode: a choice must beat the default in every mode, so more
 *    repetitions of it could not change a decision.
 *
 * With `pvars PREFIX` in the plan, each result also carries how much rank 0's
 * MPI_T counters named PREFIX... grew while the point was measured: which
 * algorithm the library ran, in its own words (MVAPICH2's mv2_coll_*).
 *
 * A configuration with `group G` runs on communicators of G consecutive ranks split
 * from MPI_COMM_WORLD, every group at once (a ladder of communicator sizes in one
 * launch); the time of a repetition is then the slowest group's.
 *
 * Usage: collbench PLANFILE
 *        collbench --library      the MPI library this binary loads
 *        collbench --cvars TEXT   MPI_T control variables whose name contains
 *                                 TEXT, one JSON object per line (name,
 *                                 description, integer value or text): how the tuner
 *                                 reads the catalog of an MPI without an
 *                                 info tool
 * Test-only fault switch: COLLTUNE_TEST_FAULT=KIND:NAME=VALUE makes every
 * configuration that sets control variable NAME to VALUE (through MPI_T, or
 * through OMPI_MCA_NAME in the environment) hang, crash (SIGSEGV) or return a
 * wrong result, or take a second longer per call; KIND is hang, crash, wrong or
 * slow. coarse:timer_step_ns=N makes the kernel take MPI_Wtime's step to be N ns.
 * Unset in normal use.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_NAME 256
#define MAX_ASSIGN 16
#define TAG_SYNC 30001
#define TAG_CTL 30002

#define TIMING_ISOLATED 1
#define TIMING_B2B 2
enum { OBJ_COMPLETION, OBJ_MEAN, OBJ_ROOT, NOBJ };
static const char *mode_names[] = {"isolated", "back-to-back"};
static const char *obj_names[] = {"completion", "mean", "root"};

/* ------------------------------------------------------------------ */
/* Plan                                                                */
/* ------------------------------------------------------------------ */

typedef struct {
    char name[MAX_NAME];
    long long value;
} assign_t;

typedef struct {
    int cid;
    int nassign;
    assign_t assign[MAX_ASSIGN];
    int group; /* ranks per communicator (consecutive ranks); 0: MPI_COMM_WORLD's size */
    int baseline; /* the library default for its communicator: the cutoff's reference */
} config_t;

typedef struct {
    int cid;
    long long size;
} point_t;

typedef struct {
    char collective[64];
    int warmup;
    int min_reps;
    int max_reps;
    double rel_ci;
    double point_time;
    unsigned long long seed;
    int dup_always; /* 0: configurations without variables run on MPI_COMM_WORLD */
    char pvars[64];  /* count rank 0's performance variables whose name starts so */
    int timing;      /* TIMING_* bits */
    int min_ticks;   /* a timed stretch lasts this many timer steps at least (0: off) */
    int window;      /* calls per back-to-back window, at most */
    double window_time; /* ... and fewer where the window would take longer (seconds) */
    int objective;   /* OBJ_*: which statistic drives the stopping rule and "samples" */
    double cutoff;   /* > 0: stop points this much slower than the baseline (see top) */
    int nconfig;
    config_t *configs;
    int npoint;
    point_t *points;
} plan_t;

static void die(const char *msg)
{
    fprintf(stderr, "collbench: %s\n", msg);
    MPI_Abort(MPI_COMM_WORLD, 2);
    exit(2);
}

static int read_plan(const char *path, plan_t *plan)
{
    FILE *f = fopen(path, "r");
    char line[8192];
    int cap_c = 16, cap_p = 64;
    if (!f)
        return -1;
    memset(plan, 0, sizeof(*plan));
    plan->warmup = 2;
    plan->min_reps = 5;
    plan->max_reps = 1000;
    plan->rel_ci = 0.05;
    plan->point_time = 0.5;
    plan->seed = 1;
    plan->dup_always = 1;
    plan->timing = TIMING_ISOLATED;
    plan->window = 64;
    plan->window_time = 0.01;
    plan->objective = OBJ_COMPLETION;
    plan->configs = calloc((size_t)cap_c, sizeof(config_t));
    plan->points = calloc((size_t)cap_p, sizeof(point_t));
    while (fgets(line, sizeof(line), f)) {
        char key[64];
        int off = 0;
        if (sscanf(line, "%63s%n", key, &off) != 1 || key[0] == '#')
            continue;
        if (!strcmp(key, "collective")) {
            sscanf(line + off, "%63s", plan->collective);
        } else if (!strcmp(key, "warmup")) {
            sscanf(line + off, "%d", &plan->warmup);
        } else if (!strcmp(key, "min_reps")) {
            sscanf(line + off, "%d", &plan->min_reps);
        } else if (!strcmp(key, "max_reps")) {
            sscanf(line + off, "%d", &plan->max_reps);
        } else if (!strcmp(key, "rel_ci")) {
            sscanf(line + off, "%lf", &plan->rel_ci);
        } else if (!strcmp(key, "point_time")) {
            sscanf(line + off, "%lf", &plan->point_time);
        } else if (!strcmp(key, "seed")) {
            sscanf(line + off, "%llu", &plan->seed);
        } else if (!strcmp(key, "dup_always")) {
            sscanf(line + off, "%d", &plan->dup_always);
        } else if (!strcmp(key, "pvars")) {
            sscanf(line + off, "%63s", plan->pvars);
        } else if (!strcmp(key, "timing")) {
            char v[32] = "";
            sscanf(line + off, "%31s", v);
            plan->timing = !strcmp(v, "both") ? TIMING_ISOLATED | TIMING_B2B
                           : !strcmp(v, "back-to-back") ? TIMING_B2B
                           : !strcmp(v, "isolated") ? TIMING_ISOLATED : 0;
            if (!plan->timing) {
                fclose(f);
                return -2;
            }
        } else if (!strcmp(key, "min_ticks")) {
            if (sscanf(line + off, "%d", &plan->min_ticks) != 1 || plan->min_ticks < 0) {
                fclose(f);
                return -2;
            }
        } else if (!strcmp(key, "window")) {
            if (sscanf(line + off, "%d", &plan->window) != 1 || plan->window < 1) {
                fclose(f);
                return -2;
            }
        } else if (!strcmp(key, "window_time")) {
            if (sscanf(line + off, "%lf", &plan->window_time) != 1 || plan->window_time < 0) {
                fclose(f);
                return -2;
            }
        } else if (!strcmp(key, "cutoff")) {
            if (sscanf(line + off, "%lf", &plan->cutoff) != 1 || plan->cutoff < 0) {
                fclose(f);
                return -2;
            }
        } else if (!strcmp(key, "objective")) {
            char v[32] = "";
            sscanf(line + off, "%31s", v);
            plan->objective = -1;
            for (int o = 0; o < NOBJ; o++)
                if (!strcmp(v, obj_names[o]))
                    plan->objective = o;
            if (plan->objective < 0) {
                fclose(f);
                return -2;
            }
        } else if (!strcmp(key, "config")) {
            config_t *c;
            char *p = line + off;
            int n = 0;
            if (plan->nconfig == cap_c) {
                cap_c *= 2;
                plan->configs = realloc(plan->configs, (size_t)cap_c * sizeof(config_t));
            }
            c = &plan->configs[plan->nconfig];
            memset(c, 0, sizeof(*c));
            if (sscanf(p, "%d %d%n", &c->cid, &c->nassign, &n) != 2 || c->nassign > MAX_ASSIGN) {
                fclose(f);
                return -2;
            }
            p += n;
            for (int i = 0; i < c->nassign; i++) {
                if (sscanf(p, "%255s %lld%n", c->assign[i].name, &c->assign[i].value, &n) != 2) {
                    fclose(f);
                    return -2;
                }
                p += n;
            }
            if (sscanf(p, " group %d%n", &c->group, &n) == 1) {
                if (c->group < 2) {
                    fclose(f);
                    return -2;
                }
                p += n;
            }
            c->baseline = strstr(p, "baseline") != NULL;
            plan->nconfig++;
        } else if (!strcmp(key, "point")) {
            if (plan->npoint == cap_p) {
                cap_p *= 2;
                plan->points = realloc(plan->points, (size_t)cap_p * sizeof(point_t));
            }
            if (sscanf(line + off, "%d %lld", &plan->points[plan->npoint].cid,
                       &plan->points[plan->npoint].size) != 2) {
                fclose(f);
                return -2;
            }
            plan->npoint++;
        }
    }
    fclose(f);
    return plan->collective[0] ? 0 : -3;
}

/* ------------------------------------------------------------------ */
/* Seeded shuffle: identical on every rank because the seed is shared  */
/* ------------------------------------------------------------------ */

static unsigned long long rng_state;

static unsigned long long rng_next(void)
{
    /* splitmix64: tiny, good enough to randomise measurement order */
    unsigned long long z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static void shuffle_ints(int *a, int n)
{
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(rng_next() % (unsigned long long)(i + 1));
        int t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

/* ------------------------------------------------------------------ */
/* Synchronisation and control, point-to-point only on MPI_COMM_WORLD   */
/* ------------------------------------------------------------------ */

static int g_rank, g_size;

static void sync_barrier(void)
{
    /* dissemination barrier: ceil(log2 p) rounds of zero-byte exchanges */
    char s = 0, r = 0;
    for (int k = 1; k < g_size; k <<= 1) {
        int to = (g_rank + k) % g_size;
        int from = (g_rank - k + g_size) % g_size;
        MPI_Sendrecv(&s, 0, MPI_CHAR, to, TAG_SYNC, &r, 0, MPI_CHAR, from, TAG_SYNC,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
}

/* binomial-tree maximum of a double towards rank 0 */
static double ctl_max(double v)
{
    for (int k = 1; k < g_size; k <<= 1) {
        if (g_rank & k) {
            MPI_Send(&v, 1, MPI_DOUBLE, g_rank - k, TAG_CTL, MPI_COMM_WORLD);
            break;
        }
        if (g_rank + k < g_size) {
            double o;
            MPI_Recv(&o, 1, MPI_DOUBLE, g_rank + k, TAG_CTL, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (o > v)
                v = o;
        }
    }
    return v;
}

/* binomial-tree maximum and sum of a double towards rank 0, in one pass */
static void ctl_max_sum(double v, double *mx, double *sum)
{
    double acc[2] = {v, v};
    for (int k = 1; k < g_size; k <<= 1) {
        if (g_rank & k) {
            MPI_Send(acc, 2, MPI_DOUBLE, g_rank - k, TAG_CTL, MPI_COMM_WORLD);
            break;
        }
        if (g_rank + k < g_size) {
            double o[2];
            MPI_Recv(o, 2, MPI_DOUBLE, g_rank + k, TAG_CTL, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (o[0] > acc[0])
                acc[0] = o[0];
            acc[1] += o[1];
        }
    }
    *mx = acc[0];
    *sum = acc[1];
}

/* binomial-tree broadcast of an int from rank 0 */
/* The step MPI_Wtime really takes: the least nonzero difference between successive
 * readings over up to 10 ms (MPI_Wtick is what the library claims; MVAPICH2 2.3.7 claims
 * less than the 2^-22 s it resolves). On a fine clock this is the cost of a reading. */
static double timer_step(void)
{
    double best = 0, start = MPI_Wtime(), prev = start, now;
    int steps = 0;
    /* bounded in readings too: a simulated clock (SMPI) may never move; then 0, no batches */
    for (long i = 0; i < 1000000 && steps < 1000 && (now = MPI_Wtime()) - start < 0.01; i++) {
        if (now != prev) {
            if (best == 0 || now - prev < best)
                best = now - prev;
            prev = now;
            steps++;
        }
    }
    return best;
}

static int ctl_bcast(int v)
{
    int top = 1;
    while (top < g_size)
        top <<= 1;
    for (int k = top >> 1; k >= 1; k >>= 1) {
        if (g_rank % (2 * k) == 0 && g_rank + k < g_size)
            MPI_Send(&v, 1, MPI_INT, g_rank + k, TAG_CTL, MPI_COMM_WORLD);
        else if (g_rank % (2 * k) == k)
            MPI_Recv(&v, 1, MPI_INT, g_rank - k, TAG_CTL, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    return v;
}

/* ------------------------------------------------------------------ */
/* Output (rank 0 only)                                                 */
/* ------------------------------------------------------------------ */

static void put_json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

/* ------------------------------------------------------------------ */
/* MPI_T control variables                                              */
/* ------------------------------------------------------------------ */

/* SimGrid SMPI implements no MPI_T control variables: there every
 * configuration is chosen at launch (smpirun --cfg=smpi/<coll>:<name>) and
 * a plan that asks to write variables is rejected. */
#if defined(SMPI_H)
#define HAVE_MPIT_CVARS 0
#else
#define HAVE_MPIT_CVARS 1
#endif

typedef struct {
    char name[MAX_NAME];
    int found;
#if HAVE_MPIT_CVARS
    MPI_T_cvar_handle handle;
#endif
    int settable;
    MPI_Datatype type;
    long long initial;
} cvar_t;

static cvar_t *g_cvars;
static int g_ncvars;
#if HAVE_MPIT_CVARS
static int g_mpit_open;
#endif

#if HAVE_MPIT_CVARS
static int cvar_read(cvar_t *cv, long long *out)
{
    if (cv->type == MPI_INT || cv->type == MPI_UNSIGNED) {
        int v = 0;
        if (MPI_T_cvar_read(cv->handle, &v) != MPI_SUCCESS)
            return -1;
        *out = v;
    } else if (cv->type == MPI_LONG || cv->type == MPI_UNSIGNED_LONG) {
        long v = 0;
        if (MPI_T_cvar_read(cv->handle, &v) != MPI_SUCCESS)
            return -1;
        *out = v;
    } else {
        long long v = 0;
        if (MPI_T_cvar_read(cv->handle, &v) != MPI_SUCCESS)
            return -1;
        *out = v;
    }
    return 0;
}

static int cvar_write(cvar_t *cv, long long value)
{
    if (cv->type == MPI_INT || cv->type == MPI_UNSIGNED) {
        int v = (int)value;
        return MPI_T_cvar_write(cv->handle, &v) == MPI_SUCCESS ? 0 : -1;
    } else if (cv->type == MPI_LONG || cv->type == MPI_UNSIGNED_LONG) {
        long v = (long)value;
        return MPI_T_cvar_write(cv->handle, &v) == MPI_SUCCESS ? 0 : -1;
    }
    return MPI_T_cvar_write(cv->handle, &value) == MPI_SUCCESS ? 0 : -1;
}
#else
static int cvar_read(cvar_t *cv, long long *out)
{
    (void)cv;
    *out = 0;
    return -1;
}

static int cvar_write(cvar_t *cv, long long value)
{
    (void)cv;
    (void)value;
    return -1;
}
#endif

static cvar_t *cvar_lookup(const char *name)
{
    for (int i = 0; i < g_ncvars; i++)
        if (!strcmp(g_cvars[i].name, name))
            return &g_cvars[i];
    return NULL;
}

static void cvars_init(const plan_t *plan)
{
    int total = 0;
    for (int c = 0; c < plan->nconfig; c++)
        total += plan->configs[c].nassign;
    g_cvars = calloc((size_t)(total + 1), sizeof(cvar_t));
    if (total == 0 || !HAVE_MPIT_CVARS)
        return; /* every lookup then fails: "no MPI_T control variable" */
#if HAVE_MPIT_CVARS
    int prov;
    if (MPI_T_init_thread(MPI_THREAD_SINGLE, &prov) != MPI_SUCCESS)
        die("MPI_T_init_thread failed");
    g_mpit_open = 1;
    for (int c = 0; c < plan->nconfig; c++) {
        for (int a = 0; a < plan->configs[c].nassign; a++) {
            const char *name = plan->configs[c].assign[a].name;
            cvar_t *cv;
            int idx, count, verb, bind, scope;
            MPI_T_enum en;
            char nm[MAX_NAME];
            int nmlen = MAX_NAME;
            if (cvar_lookup(name))
                continue;
            cv = &g_cvars[g_ncvars++];
            snprintf(cv->name, sizeof(cv->name), "%s", name);
            if (MPI_T_cvar_get_index(name, &idx) != MPI_SUCCESS)
                continue;
            if (MPI_T_cvar_get_info(idx, nm, &nmlen, &verb, &cv->type, &en, NULL, NULL, &bind,
                                    &scope) != MPI_SUCCESS)
                continue;
            if (MPI_T_cvar_handle_alloc(idx, NULL, &cv->handle, &count) != MPI_SUCCESS)
                continue;
            if (cvar_read(cv, &cv->initial) != 0)
                continue;
            cv->found = 1;
            /* Open MPI registers some variables (coll_tuned_allgatherv_*) as
             * constant: they can only be set at launch */
            cv->settable = scope != MPI_T_SCOPE_CONSTANT && scope != MPI_T_SCOPE_READONLY;
        }
    }
#endif
}

/* Restores every variable to its launch value, then applies the
 * configuration, so no setting leaks from one configuration to the next. */
static int cvars_apply(const config_t *cfg, char *why, size_t whylen)
{
    for (int i = 0; i < g_ncvars; i++)
        if (g_cvars[i].found && g_cvars[i].settable &&
            cvar_write(&g_cvars[i], g_cvars[i].initial) != 0) {
            snprintf(why, whylen, "cannot restore %s", g_cvars[i].name);
            return -1;
        }
    for (int a = 0; a < cfg->nassign; a++) {
        cvar_t *cv = cvar_lookup(cfg->assign[a].name);
        long long back = 0;
        if (!cv || !cv->found) {
            snprintf(why, whylen, "no MPI_T control variable %s", cfg->assign[a].name);
            return -1;
        }
        if (!cv->settable) {
            snprintf(why, whylen, "%s is not settable through MPI_T", cv->name);
            return -1;
        }
        if (cvar_write(cv, cfg->assign[a].value) != 0) {
            snprintf(why, whylen, "MPI_T refused %s=%lld", cv->name, cfg->assign[a].value);
            return -1;
        }
        if (cvar_read(cv, &back) != 0 || back != cfg->assign[a].value) {
            snprintf(why, whylen, "%s reads back %lld after writing %lld", cv->name, back,
                     cfg->assign[a].value);
            return -1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* MPI_T performance variables: which algorithm the library ran         */
/* ------------------------------------------------------------------ */

/* Libraries that count calls per algorithm (MVAPICH2's mv2_coll_* counters)
 * show what really ran: rank 0's counters are read before and after each
 * point and the differences reported with its result. */
typedef struct {
    char name[MAX_NAME];
#if HAVE_MPIT_CVARS
    MPI_T_pvar_handle handle;
#endif
    MPI_Datatype type;
    unsigned long long before;
} pvar_t;

static pvar_t *g_pvars; /* every counter with the prefix (MVAPICH2 has hundreds) */
static int g_npvars;
#if HAVE_MPIT_CVARS
static MPI_T_pvar_session g_session;
static int g_pvars_open;

static int pvar_read(pvar_t *pv, unsigned long long *out)
{
    if (pv->type == MPI_UNSIGNED || pv->type == MPI_INT) {
        unsigned v = 0;
        if (MPI_T_pvar_read(g_session, pv->handle, &v) != MPI_SUCCESS)
            return -1;
        *out = v;
    } else if (pv->type == MPI_UNSIGNED_LONG || pv->type == MPI_LONG) {
        unsigned long v = 0;
        if (MPI_T_pvar_read(g_session, pv->handle, &v) != MPI_SUCCESS)
            return -1;
        *out = v;
    } else {
        unsigned long long v = 0;
        if (MPI_T_pvar_read(g_session, pv->handle, &v) != MPI_SUCCESS)
            return -1;
        *out = v;
    }
    return 0;
}
#endif

/* Counters of rank 0 whose names start with `prefix`; none where the
 * library has no such variables (the results then carry no "pvars"). */
static void pvars_init(const char *prefix)
{
#if HAVE_MPIT_CVARS
    int prov, n = 0;
    size_t plen = strlen(prefix);
    if (!plen || g_rank != 0 || MPI_T_init_thread(MPI_THREAD_SINGLE, &prov) != MPI_SUCCESS)
        return;
    g_pvars_open = 1;
    if (MPI_T_pvar_get_num(&n) != MPI_SUCCESS ||
        MPI_T_pvar_session_create(&g_session) != MPI_SUCCESS) {
        g_pvars_open = 2; /* initialised, no session */
        return;
    }
    g_pvars = calloc((size_t)n + 1, sizeof(pvar_t));
    for (int i = 0; i < n; i++) {
        pvar_t *pv = &g_pvars[g_npvars];
        int nlen = MAX_NAME, verb, cls, bind, ro, cont, atomic, count;
        MPI_T_enum en;
        if (MPI_T_pvar_get_info(i, pv->name, &nlen, &verb, &cls, &pv->type, &en, NULL, NULL,
                                &bind, &ro, &cont, &atomic) != MPI_SUCCESS ||
            strncmp(pv->name, prefix, plen) != 0 || cls != MPI_T_PVAR_CLASS_COUNTER ||
            bind != MPI_T_BIND_NO_OBJECT)
            continue;
        if (MPI_T_pvar_handle_alloc(g_session, i, NULL, &pv->handle, &count) != MPI_SUCCESS)
            continue;
        if (count != 1 || (!cont && MPI_T_pvar_start(g_session, pv->handle) != MPI_SUCCESS)) {
            MPI_T_pvar_handle_free(g_session, &pv->handle);
            continue;
        }
        g_npvars++;
    }
#else
    (void)prefix;
#endif
}

static void pvars_mark(void)
{
#if HAVE_MPIT_CVARS
    for (int i = 0; i < g_npvars; i++)
        if (pvar_read(&g_pvars[i], &g_pvars[i].before) != 0)
            g_pvars[i].before = 0;
#endif
}

/* ,"pvars":{"name":delta,...} for the counters that moved since pvars_mark */
static void pvars_print(void)
{
#if HAVE_MPIT_CVARS
    int first = 1;
    if (!g_npvars)
        return;
    printf(",\"pvars\":{");
    for (int i = 0; i < g_npvars; i++) {
        unsigned long long now;
        if (pvar_read(&g_pvars[i], &now) != 0 || now == g_pvars[i].before)
            continue;
        printf(first ? "" : ",");
        put_json_string(g_pvars[i].name);
        printf(":%llu", now - g_pvars[i].before);
        first = 0;
    }
    printf("}");
#endif
}

static void pvars_close(void)
{
#if HAVE_MPIT_CVARS
    if (g_pvars_open == 1)
        MPI_T_pvar_session_free(&g_session);
    if (g_pvars_open)
        MPI_T_finalize();
#endif
    free(g_pvars);
}

/* ------------------------------------------------------------------ */
/* Buffers, the collective call and its correctness check               */
/* ------------------------------------------------------------------ */

typedef enum {
    C_ALLGATHER, C_ALLGATHERV, C_ALLREDUCE, C_ALLTOALL, C_ALLTOALLV, C_BARRIER, C_BCAST,
    C_EXSCAN, C_GATHER, C_REDUCE, C_REDUCE_SCATTER, C_REDUCE_SCATTER_BLOCK, C_SCAN, C_SCATTER,
    C_UNKNOWN
} coll_t;

static const char *coll_names[] = {"allgather", "allgatherv", "allreduce", "alltoall",
                                   "alltoallv", "barrier", "bcast", "exscan", "gather",
                                   "reduce", "reduce_scatter", "reduce_scatter_block", "scan",
                                   "scatter"};

static coll_t coll_from_name(const char *n)
{
    for (int i = 0; i < (int)C_UNKNOWN; i++)
        if (!strcmp(coll_names[i], n))
            return (coll_t)i;
    return C_UNKNOWN;
}

static int is_reduction(coll_t c)
{
    return c == C_ALLREDUCE || c == C_REDUCE || c == C_REDUCE_SCATTER ||
           c == C_REDUCE_SCATTER_BLOCK || c == C_SCAN || c == C_EXSCAN;
}

/* `size` is the per-rank block in bytes (the count a caller passes times the
 * datatype size). Reductions use MPI_DOUBLE holding small integers, so sums
 * are exact and can be checked bit for bit; the rest use MPI_BYTE. */
typedef struct {
    coll_t coll;
    long long size;
    int p, r;  /* the communicator's size and this rank in it */
    int idle;  /* in no group (the ranks left over when groups do not divide the job) */
    int count; /* elements per block */
    void *sbuf, *rbuf;
    int *counts, *displs;
} bufs_t;

static unsigned char pat(int a, int b, long long i)
{
    return (unsigned char)((a * 31 + b * 7 + i) & 0xff);
}

static int bufs_alloc(bufs_t *b, coll_t coll, long long size, MPI_Comm comm)
{
    size_t p, blk;
    memset(b, 0, sizeof(*b));
    b->coll = coll;
    b->size = size;
    b->idle = comm == MPI_COMM_NULL;
    b->p = 1;
    if (!b->idle) {
        MPI_Comm_size(comm, &b->p);
        MPI_Comm_rank(comm, &b->r);
    }
    p = (size_t)b->p;
    b->count = (int)(is_reduction(coll) ? size / (long long)sizeof(double) : size);
    blk = (size_t)size;
    b->counts = calloc(p, sizeof(int));
    b->displs = calloc(p, sizeof(int));
    for (size_t i = 0; i < p; i++) {
        b->counts[i] = b->count;
        b->displs[i] = (int)i * b->count;
    }
    switch (coll) {
    case C_BARRIER:
        b->sbuf = malloc(1);
        b->rbuf = malloc(1);
        break;
    case C_BCAST:
        b->sbuf = malloc(blk + 1);
        b->rbuf = malloc(1);
        break;
    case C_ALLREDUCE:
    case C_REDUCE:
    case C_SCAN:
    case C_EXSCAN:
        b->sbuf = malloc(blk + 8);
        b->rbuf = malloc(blk + 8);
        break;
    case C_ALLGATHER:
    case C_ALLGATHERV:
    case C_GATHER:
        b->sbuf = malloc(blk + 1);
        b->rbuf = malloc(blk * p + 1);
        break;
    case C_SCATTER:
        b->sbuf = malloc(blk * p + 1);
        b->rbuf = malloc(blk + 1);
        break;
    case C_ALLTOALL:
    case C_ALLTOALLV:
        b->sbuf = malloc(blk * p + 1);
        b->rbuf = malloc(blk * p + 1);
        break;
    case C_REDUCE_SCATTER:
    case C_REDUCE_SCATTER_BLOCK:
        b->sbuf = malloc(blk * p + 8);
        b->rbuf = malloc(blk + 8);
        break;
    default:
        return -1;
    }
    return (b->sbuf && b->rbuf) ? 0 : -1;
}

static void bufs_free(bufs_t *b)
{
    free(b->sbuf);
    free(b->rbuf);
    free(b->counts);
    free(b->displs);
}

/* Fills inputs with a rank-dependent pattern and clears outputs. */
static void bufs_fill(bufs_t *b)
{
    long long n = b->size, p = b->p, r = b->r;
    unsigned char *s = b->sbuf, *rb = b->rbuf;
    double *sd = b->sbuf, *rd = b->rbuf;
    switch (b->coll) {
    case C_BCAST:
        for (long long i = 0; i < n; i++)
            s[i] = r == 0 ? pat(1, 2, i) : 0;
        break;
    case C_ALLREDUCE:
    case C_REDUCE:
    case C_SCAN:
    case C_EXSCAN:
        for (long long i = 0; i < b->count; i++) {
            sd[i] = (double)(r + 1 + i % 13);
            rd[i] = -1.0;
        }
        break;
    case C_REDUCE_SCATTER:
    case C_REDUCE_SCATTER_BLOCK:
        for (long long i = 0; i < (long long)b->count * p; i++)
            sd[i] = (double)(r + 1 + i % 13);
        for (long long i = 0; i < b->count; i++)
            rd[i] = -1.0;
        break;
    case C_ALLGATHER:
    case C_ALLGATHERV:
    case C_GATHER:
        for (long long i = 0; i < n; i++)
            s[i] = pat((int)r, 0, i);
        memset(rb, 0, (size_t)(n * p));
        break;
    case C_SCATTER:
        for (long long d = 0; d < p; d++)
            for (long long i = 0; i < n; i++)
                s[d * n + i] = r == 0 ? pat((int)d, 3, i) : 0;
        memset(rb, 0, (size_t)n);
        break;
    case C_ALLTOALL:
    case C_ALLTOALLV:
        for (long long d = 0; d < p; d++)
            for (long long i = 0; i < n; i++)
                s[d * n + i] = pat((int)r, (int)d, i);
        memset(rb, 0, (size_t)(n * p));
        break;
    default:
        break;
    }
}

/* test-only: the configuration's calls each take a second longer (COLLTUNE_TEST_FAULT) */
static int g_slow;

/* with `min_ticks N` a timed stretch lasts at least N timer steps: a call shorter than
 * that is timed in batches (at most MAX_BATCH calls); N = 100: one step is at most 1% of
 * a sample. 0 (probes that count a call's traffic): one call, always */
#define MAX_BATCH 1000
static double g_step; /* what MPI_Wtime resolves (timer_step), slowest rank's */

static int coll_call(bufs_t *b, MPI_Comm comm);

static int run_coll(bufs_t *b, MPI_Comm comm)
{
    int rc = coll_call(b, comm);
    if (g_slow)
        sleep(1);
    return rc;
}

static int coll_call(bufs_t *b, MPI_Comm comm)
{
    int c = b->count;
    if (b->idle)
        return MPI_SUCCESS;
    switch (b->coll) {
    case C_BARRIER:
        return MPI_Barrier(comm);
    case C_BCAST:
        return MPI_Bcast(b->sbuf, c, MPI_BYTE, 0, comm);
    case C_REDUCE:
        return MPI_Reduce(b->sbuf, b->rbuf, c, MPI_DOUBLE, MPI_SUM, 0, comm);
    case C_ALLREDUCE:
        return MPI_Allreduce(b->sbuf, b->rbuf, c, MPI_DOUBLE, MPI_SUM, comm);
    case C_SCAN:
        return MPI_Scan(b->sbuf, b->rbuf, c, MPI_DOUBLE, MPI_SUM, comm);
    case C_EXSCAN:
        return MPI_Exscan(b->sbuf, b->rbuf, c, MPI_DOUBLE, MPI_SUM, comm);
    case C_REDUCE_SCATTER:
        return MPI_Reduce_scatter(b->sbuf, b->rbuf, b->counts, MPI_DOUBLE, MPI_SUM, comm);
    case C_REDUCE_SCATTER_BLOCK:
        return MPI_Reduce_scatter_block(b->sbuf, b->rbuf, c, MPI_DOUBLE, MPI_SUM, comm);
    case C_ALLGATHER:
        return MPI_Allgather(b->sbuf, c, MPI_BYTE, b->rbuf, c, MPI_BYTE, comm);
    case C_ALLGATHERV:
        return MPI_Allgatherv(b->sbuf, c, MPI_BYTE, b->rbuf, b->counts, b->displs, MPI_BYTE,
                              comm);
    case C_GATHER:
        return MPI_Gather(b->sbuf, c, MPI_BYTE, b->rbuf, c, MPI_BYTE, 0, comm);
    case C_SCATTER:
        return MPI_Scatter(b->sbuf, c, MPI_BYTE, b->rbuf, c, MPI_BYTE, 0, comm);
    case C_ALLTOALL:
        return MPI_Alltoall(b->sbuf, c, MPI_BYTE, b->rbuf, c, MPI_BYTE, comm);
    case C_ALLTOALLV:
        return MPI_Alltoallv(b->sbuf, b->counts, b->displs, MPI_BYTE, b->rbuf, b->counts,
                             b->displs, MPI_BYTE, comm);
    default:
        return MPI_ERR_OTHER;
    }
}

/* Returns 1 when this rank's output is what the collective must produce. */
static int bufs_check(const bufs_t *b)
{
    long long n = b->size, p = b->p, r = b->r;
    const unsigned char *s = b->sbuf, *rb = b->rbuf;
    const double *rd = b->rbuf;
    if (b->idle)
        return 1;
    switch (b->coll) {
    case C_BARRIER:
        return 1;
    case C_BCAST:
        for (long long i = 0; i < n; i++)
            if (s[i] != pat(1, 2, i))
                return 0;
        return 1;
    case C_REDUCE:
    case C_ALLREDUCE:
        if (b->coll == C_REDUCE && r != 0)
            return 1;
        for (long long i = 0; i < b->count; i++)
            if (rd[i] != (double)(p * (p + 1) / 2 + p * (i % 13)))
                return 0;
        return 1;
    case C_SCAN:
    case C_EXSCAN: {
        long long upto = b->coll == C_SCAN ? r + 1 : r; /* ranks 0..upto-1 contribute */
        if (upto == 0)
            return 1; /* exscan leaves rank 0's buffer undefined */
        for (long long i = 0; i < b->count; i++)
            if (rd[i] != (double)(upto * (upto + 1) / 2 + upto * (i % 13)))
                return 0;
        return 1;
    }
    case C_REDUCE_SCATTER:
    case C_REDUCE_SCATTER_BLOCK:
        for (long long i = 0; i < b->count; i++) {
            long long gi = r * b->count + i;
            if (rd[i] != (double)(p * (p + 1) / 2 + p * (gi % 13)))
                return 0;
        }
        return 1;
    case C_GATHER:
        if (r != 0)
            return 1;
        /* fall through */
    case C_ALLGATHER:
    case C_ALLGATHERV:
        for (long long q = 0; q < p; q++)
            for (long long i = 0; i < n; i++)
                if (rb[q * n + i] != pat((int)q, 0, i))
                    return 0;
        return 1;
    case C_SCATTER:
        for (long long i = 0; i < n; i++)
            if (rb[i] != pat((int)r, 3, i))
                return 0;
        return 1;
    case C_ALLTOALL:
    case C_ALLTOALLV:
        for (long long q = 0; q < p; q++)
            for (long long i = 0; i < n; i++)
                if (rb[q * n + i] != pat((int)q, (int)r, i))
                    return 0;
        return 1;
    default:
        return 0;
    }
}

static void corrupt_output(bufs_t *b)
{
    /* test-only: simulate an algorithm that returns a wrong answer */
    if (b->idle)
        return;
    if (b->coll == C_BCAST && b->r != 0 && b->size > 0)
        ((unsigned char *)b->sbuf)[0] ^= 0xff;
    else if (is_reduction(b->coll) && b->count > 0)
        ((double *)b->rbuf)[0] += 1.0;
    else if (b->size > 0)
        ((unsigned char *)b->rbuf)[0] ^= 0xff;
}

/* ------------------------------------------------------------------ */
/* Statistics needed for the stopping rule                              */
/* ------------------------------------------------------------------ */

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

/* ------------------------------------------------------------------ */
/* Measuring one point                                                  */
/* ------------------------------------------------------------------ */

typedef struct {
    char kind[16];
    char name[MAX_NAME];
    long long value;
} fault_t;

static fault_t g_fault;

static int fault_hits(const config_t *cfg, const char *kind)
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
 * repetitions do: launch pairs, not repetitions, carry the statistics */
#define SLOW_POINT 10.0
/* seconds between two "tick" events while a point runs */
#define TICK_SECONDS 2.0

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
 * calls that follow belong to (Intel MPI's proof of what ran, backends/impi_proof.py).
 * Not static and never inlined, so the symbol stays in the binary. */
void collbench_point(int cid, long long size);
__attribute__((noinline)) void collbench_point(int cid, long long size)
{
    __asm__ volatile("" : : "r"(cid), "r"(size) : "memory");
}

static void measure_point(const plan_t *plan, coll_t coll, const config_t *cfg,
                          long long size, MPI_Comm comm, int active)
{
    int cid = cfg->cid;
    bufs_t b;
    int stop = 0, n = 0, rc, fail;
    int cap = plan->max_reps > 0 ? plan->max_reps : 1;
    double *samples = NULL, *scratch = NULL, t_begin, t_call, t_tick;
    int window = 1, batch = 1, more;
    double *series[2][NOBJ] = {{NULL}}; /* [mode][objective], rank 0 only */
    int wrong = fault_hits(cfg, "wrong");
    g_slow = fault_hits(cfg, "slow");
    int group = cfg->group ? cfg->group : g_size, cut = 0;
    const ref_t *ref = NULL;

    collbench_point(cid, size);
    if (g_rank == 0) {
        printf("{\"event\":\"begin\",\"cid\":%d,\"size\":%lld}\n", cid, size);
        fflush(stdout);
    }
    t_begin = MPI_Wtime();
    if (bufs_alloc(&b, coll, size, comm) != 0)
        die("out of memory");

    /* correctness: the first call on fresh inputs must give the right answer */
    bufs_fill(&b);
    if (g_rank == 0)
        pvars_mark();
    sync_barrier();
    rc = run_coll(&b, comm);
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
    more = ctl_bcast(g_rank == 0 && plan->min_ticks > 0 && g_step > 0
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
        /* the series that drives the stopping rule and becomes "samples" */
        samples = series[(plan->timing & TIMING_ISOLATED) ? 0 : 1][plan->objective];
        if (plan->cutoff > 0 && !cfg->baseline)
            ref = ref_find(size, group);
    }
    t_begin = t_tick = MPI_Wtime();
    while (!stop) {
        for (int m = 0; m < 2; m++) {
            double t0, t1, local, mx, sum;
            int calls = m == 0 ? batch : window;
            if (!(plan->timing & (1 << m)))
                continue;
            sync_barrier();
            t0 = MPI_Wtime();
            for (int c = 0; c < calls; c++)
                run_coll(&b, comm);
            t1 = MPI_Wtime();
            local = b.idle ? 0.0 : (t1 - t0) / calls;
            ctl_max_sum(local, &mx, &sum);
            if (g_rank == 0) {
                series[m][OBJ_COMPLETION][n] = mx;
                series[m][OBJ_MEAN][n] = sum / active;
                series[m][OBJ_ROOT][n] = local; /* every rooted collective roots at 0 */
            }
        }
        if (g_rank == 0) {
            n++;
            /* a slow point shows it is alive: the launcher's watchdog is for hangs */
            if (MPI_Wtime() - t_tick > TICK_SECONDS) {
                printf("{\"event\":\"tick\",\"cid\":%d,\"size\":%lld,\"n\":%d}\n", cid, size, n);
                fflush(stdout);
                t_tick = MPI_Wtime();
            }
            double *const objective[2] = {series[0][plan->objective],
                                          series[1][plan->objective]};
            if (n >= cap) {
                stop = 1;
            } else if (ref && n >= CUT_REPS && clearly_slower(plan, ref, objective, n, scratch)) {
                stop = cut = 1;
            } else if (n >= plan->min_reps
                       || (n >= CUT_REPS && MPI_Wtime() - t_begin > SLOW_POINT * plan->point_time)) {
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
               "\"max\":%.9g,\"window\":%d,\"batch\":%d,\"objective\":\"%s\",\"cut\":%s",
               cid, size, n, med, lo, hi, sum / n, mn, mx, window, batch,
               obj_names[plan->objective], cut ? "true" : "false");
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
        for (int m = 0; m < 2; m++) {
            if (!series[m][0])
                continue;
            printf("%s\"%s\":{", first_mode ? "" : ",", mode_names[m]);
            first_mode = 0;
            for (int o = 0; o < NOBJ; o++) {
                printf("%s\"%s\":[", o ? "," : "", obj_names[o]);
                for (int i = 0; i < n; i++)
                    printf(i ? ",%.9g" : "%.9g", series[m][o][i]);
                printf("]");
            }
            printf("}");
        }
        printf("}}\n");
        fflush(stdout);
    }
    for (int m = 0; m < 2; m++)
        for (int o = 0; o < NOBJ; o++)
            free(series[m][o]);
    free(scratch);
    bufs_free(&b);
    g_slow = 0;
}

/* ------------------------------------------------------------------ */
/* Main: plan -> per configuration (apply, dup, measure sizes)          */
/* ------------------------------------------------------------------ */

/* MPI_T may be used without MPI_Init: the variables and their descriptions
 * are known before any process starts. */
static int list_cvars(const char *text)
{
#if HAVE_MPIT_CVARS
    int prov, n = 0;
    static char name[MAX_NAME], desc[8192];
    if (MPI_T_init_thread(MPI_THREAD_SINGLE, &prov) != MPI_SUCCESS ||
        MPI_T_cvar_get_num(&n) != MPI_SUCCESS)
        return 1;
    for (int i = 0; i < n; i++) {
        int nlen = sizeof(name), dlen = sizeof(desc), verb, bind, scope;
        MPI_Datatype dt;
        MPI_T_enum en;
        if (MPI_T_cvar_get_info(i, name, &nlen, &verb, &dt, &en, desc, &dlen, &bind,
                                &scope) != MPI_SUCCESS || !strstr(name, text))
            continue;
        printf("{\"name\":");
        put_json_string(name);
        printf(",\"description\":");
        put_json_string(desc);
        if (dt == MPI_INT && bind == MPI_T_BIND_NO_OBJECT) {
            /* the value in this environment: names an enumeration's values */
            MPI_T_cvar_handle h;
            int count, v;
            if (MPI_T_cvar_handle_alloc(i, NULL, &h, &count) == MPI_SUCCESS) {
                if (count == 1 && MPI_T_cvar_read(h, &v) == MPI_SUCCESS)
                    printf(",\"value\":%d", v);
                MPI_T_cvar_handle_free(&h);
            }
        } else if (dt == MPI_CHAR && bind == MPI_T_BIND_NO_OBJECT) {
            /* a string setting (MPICH's tree types), as a tuning file must repeat it */
            MPI_T_cvar_handle h;
            int count;
            static char text_value[4096];
            if (MPI_T_cvar_handle_alloc(i, NULL, &h, &count) == MPI_SUCCESS) {
                if (count > 0 && count < (int)sizeof(text_value) &&
                    MPI_T_cvar_read(h, text_value) == MPI_SUCCESS) {
                    text_value[count] = '\0';
                    printf(",\"text\":");
                    put_json_string(text_value);
                }
                MPI_T_cvar_handle_free(&h);
            }
        }
        printf("}\n");
    }
    MPI_T_finalize();
    return 0;
#else
    (void)text;
    return 1;
#endif
}

int main(int argc, char **argv)
{
    plan_t plan;
    coll_t coll;
    int *order;
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int liblen = 0;
    const char *fault = getenv("COLLTUNE_TEST_FAULT");

    /* Which MPI library this binary loads, without starting MPI (allowed before
     * MPI_Init since MPI-3): lets the tuner catch a kernel built for another MPI. */
    if (argc == 2 && strcmp(argv[1], "--library") == 0) {
        MPI_Get_library_version(lib, &liblen);
        printf("%s\n", lib);
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "--cvars") == 0)
        return list_cvars(argv[2]);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    if (argc != 2)
        die("usage: collbench PLANFILE");
    if (read_plan(argv[1], &plan) != 0)
        die("cannot read the plan file");
    coll = coll_from_name(plan.collective);
    if (coll == C_UNKNOWN)
        die("unknown collective in plan");
    if (fault && sscanf(fault, "%15[a-z]:%255[^=]=%lld", g_fault.kind, g_fault.name,
                        &g_fault.value) != 3)
        memset(&g_fault, 0, sizeof(g_fault));
    rng_state = plan.seed;

    MPI_Get_library_version(lib, &liblen);
    cvars_init(&plan);
    pvars_init(plan.pvars);
    g_step = ctl_max(timer_step());
    if (!strcmp(g_fault.kind, "coarse") && !strcmp(g_fault.name, "timer_step_ns"))
        g_step = (double)g_fault.value * 1e-9; /* test-only: a timer as coarse as asked */
    if (g_rank == 0) {
        printf("{\"event\":\"start\",\"np\":%d,\"collective\":\"%s\",\"configs\":%d,"
               "\"points\":%d,\"wtick\":%.9g,\"timer_step\":%.9g,\"library\":",
               g_size, plan.collective, plan.nconfig, plan.npoint, MPI_Wtick(), g_step);
        put_json_string(lib);
        printf("}\n");
        fflush(stdout);
    }

    order = malloc((size_t)(plan.nconfig + 1) * sizeof(int));
    for (int i = 0; i < plan.nconfig; i++)
        order[i] = i;
    shuffle_ints(order, plan.nconfig);
    if (plan.cutoff > 0) { /* the baselines first, each keeping its shuffled place among them */
        int nb = 0;
        for (int i = 0; i < plan.nconfig; i++)
            if (plan.configs[order[i]].baseline) {
                int b = order[i];
                memmove(&order[nb + 1], &order[nb], (size_t)(i - nb) * sizeof(int));
                order[nb++] = b;
            }
    }

    for (int oi = 0; oi < plan.nconfig; oi++) {
        const config_t *cfg = &plan.configs[order[oi]];
        char why[512] = "";
        int bad, npts = 0, *pidx, active = g_size;
        MPI_Comm comm;

        bad = cvars_apply(cfg, why, sizeof(why)) != 0;
        bad = ctl_bcast((int)ctl_max(bad ? 1.0 : 0.0));
        if (bad) {
            if (g_rank == 0) {
                printf("{\"event\":\"rejected\",\"cid\":%d,\"message\":", cfg->cid);
                put_json_string(why[0] ? why : "rejected on another rank");
                printf("}\n");
                fflush(stdout);
            }
            continue;
        }
        if (g_rank == 0) {
            printf("{\"event\":\"config\",\"cid\":%d}\n", cfg->cid);
            fflush(stdout);
        }
        if (fault_hits(cfg, "hang")) {
            if (g_rank == 0) {
                printf("{\"event\":\"begin\",\"cid\":%d,\"size\":%lld}\n", cfg->cid, -1LL);
                fflush(stdout);
            }
            for (;;)
                sleep(1);
        }
        if (fault_hits(cfg, "crash") && g_rank == g_size - 1)
            raise(SIGSEGV);

        /* A fresh communicator makes the library read the variables just written.
         * Traffic checks skip it where nothing was written: the dup's context-id
         * agreement sends a few small messages between pairs that vary run to run. */
        if (cfg->group > g_size)
            die("a configuration's group is larger than the job");
        if (cfg->group && cfg->group < g_size) {
            /* a ladder of communicator sizes: groups of consecutive ranks, as an
             * application's row communicators; the ranks left over idle */
            int groups = g_size / cfg->group, color;
            active = groups * cfg->group;
            color = g_rank < active ? g_rank / cfg->group : MPI_UNDEFINED;
            MPI_Comm_split(MPI_COMM_WORLD, color, g_rank, &comm);
        } else if (plan.dup_always || cfg->nassign > 0)
            MPI_Comm_dup(MPI_COMM_WORLD, &comm);
        else
            comm = MPI_COMM_WORLD;
        /* a configuration the library refuses for some arguments (MPICH with
         * MPIR_CVAR_COLLECTIVE_FALLBACK=error) fails that point, not the job */
        if (comm != MPI_COMM_NULL)
            MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
        pidx = malloc((size_t)(plan.npoint + 1) * sizeof(int));
        for (int p = 0; p < plan.npoint; p++)
            if (plan.points[p].cid == cfg->cid)
                pidx[npts++] = p;
        shuffle_ints(pidx, npts);
        for (int k = 0; k < npts; k++)
            measure_point(&plan, coll, cfg, plan.points[pidx[k]].size, comm, active);
        free(pidx);
        if (comm != MPI_COMM_WORLD && comm != MPI_COMM_NULL)
            MPI_Comm_free(&comm);
    }
    if (g_rank == 0) {
        printf("{\"event\":\"done\"}\n");
        fflush(stdout);
    }
    free(order);
    free(plan.configs);
    free(plan.points);
    free(g_refs);
    /* MPI_T must be closed before MPI_Finalize, or components that report
     * at finalize (pml monitoring) stay silent */
    pvars_close();
#if HAVE_MPIT_CVARS
    if (g_mpit_open)
        MPI_T_finalize();
#endif
    free(g_cvars);
    MPI_Finalize();
    return 0;
}
