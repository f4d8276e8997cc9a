/* collbench's plan file (what to measure, written by the tuner; read by rank 0, sent to the
 * others) and the seeded order of configurations and sizes: identical on every rank because
 * the seed is shared. */
#define _POSIX_C_SOURCE 200809L /* fmemopen */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/* the timing modes' and objectives' names, as the plan and the results say them (here,
 * where the plan is read, so that the files that print them need not call collbench.c) */
const char *const mode_names[4] = {"isolated", "back-to-back", "loop", "start"};
const char *const obj_names[NOBJ] = {"completion", "mean", "root"};

/* a plan is a few kilobytes; this bounds what rank 0 reads and sends */
#define PLAN_MAX (16 << 20)
#define PLAN_TAG 7101

/* a number after a plan key, at least `min` (or not negative): 1, else 0 */
static int int_at_least(const char *text, int *v, int min)
{
    return sscanf(text, "%d", v) == 1 && *v >= min;
}

static int nonneg(const char *text, double *v)
{
    return sscanf(text, "%lf", v) == 1 && *v >= 0;
}

/* the plan's text, parsed; `f` is closed */
static int parse_plan(FILE *f, plan_t *plan)
{
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
    plan->loop_time = 0.015;
    plan->start_time = 0.05;
    plan->objective = OBJ_COMPLETION;
    strcpy(plan->datatype, "double");
    plan->configs = calloc((size_t)cap_c, sizeof(config_t));
    plan->points = calloc((size_t)cap_p, sizeof(point_t));
    while (fgets(line, sizeof(line), f)) {
        char key[64];
        int off = 0, bad = 0; /* bad: a number out of range (the plan is refused) */
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
        } else if (!strcmp(key, "floor_time")) {
            sscanf(line + off, "%lf", &plan->floor_time);
        } else if (!strcmp(key, "seed")) {
            sscanf(line + off, "%llu", &plan->seed);
        } else if (!strcmp(key, "dup_always")) {
            sscanf(line + off, "%d", &plan->dup_always);
        } else if (!strcmp(key, "ordered")) {
            bad = !int_at_least(line + off, &plan->ordered, 0);
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
            bad = !int_at_least(line + off, &plan->min_ticks, 0);
        } else if (!strcmp(key, "window")) {
            bad = !int_at_least(line + off, &plan->window, 1);
        } else if (!strcmp(key, "window_time")) {
            bad = !nonneg(line + off, &plan->window_time);
        } else if (!strcmp(key, "loop")) {
            bad = !int_at_least(line + off, &plan->loop, 0);
        } else if (!strcmp(key, "loop_time")) {
            bad = !nonneg(line + off, &plan->loop_time);
        } else if (!strcmp(key, "start")) {
            bad = !int_at_least(line + off, &plan->start, 0);
        } else if (!strcmp(key, "start_time")) {
            bad = !nonneg(line + off, &plan->start_time);
        } else if (!strcmp(key, "cutoff")) {
            bad = !nonneg(line + off, &plan->cutoff);
        } else if (!strcmp(key, "datatype")) {
            sscanf(line + off, "%15s", plan->datatype);
            bad = coll_set_datatype(plan->datatype) < 0;
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
            if (sscanf(p, " select %63s%n", c->select, &n) == 1) {
                /* a name in SimGrid's table: letters, digits and underscores only */
                if (strspn(c->select, "abcdefghijklmnopqrstuvwxyz"
                                      "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") !=
                    strlen(c->select)) {
                    fclose(f);
                    return -2;
                }
                p += n;
            }
            c->baseline = strstr(p, "baseline") != NULL;
            plan->nconfig++;
        } else if (!strcmp(key, "arrival")) {
            /* one row of per-rank delays; every row as long as the first */
            char *p = line + off;
            double d;
            int n = 0, k = 0;
            if (plan->narrival == MAX_ARRIVAL_ROWS) {
                fclose(f);
                return -2;
            }
            if (!plan->arrival)
                plan->arrival = calloc((size_t)MAX_ARRIVAL_ROWS * MAX_ARRIVAL_RANKS,
                                       sizeof(double));
            while (k < MAX_ARRIVAL_RANKS && sscanf(p, "%lf%n", &d, &n) == 1) {
                if (!(d >= 0 && d <= MAX_ARRIVAL_DELAY)) {
                    fclose(f);
                    return -2;
                }
                plan->arrival[(size_t)plan->narrival * MAX_ARRIVAL_RANKS + k++] = d;
                p += n;
            }
            if (k == 0 || (plan->narrival && k != plan->arrival_ranks)) {
                fclose(f);
                return -2;
            }
            plan->arrival_ranks = k;
            plan->narrival++;
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
        if (bad) {
            fclose(f);
            return -2;
        }
    }
    fclose(f);
    return plan->collective[0] ? 0 : -3;
}

/* Rank 0 reads the plan file; every other rank gets its bytes from rank 0 by point-to-point
 * messages (the kernel's control traffic; no collective runs before the measured ones), so
 * only rank 0's node needs the file: /tmp is node-local on a cluster. 0, or -1: rank 0
 * could not read it; -2/-3: the plan is malformed. */
int read_plan(const char *path, plan_t *plan)
{
    long long len = -1;
    char *text = NULL;
    FILE *f;
    if (g_rank == 0 && (f = fopen(path, "rb")) != NULL) {
        text = malloc(PLAN_MAX);
        len = text ? (long long)fread(text, 1, PLAN_MAX, f) : -1;
        if (len == PLAN_MAX || ferror(f))
            len = -1;
        fclose(f);
    }
    if (g_rank == 0) {
        for (int r = 1; r < g_size; r++)
            MPI_Send(&len, 1, MPI_LONG_LONG, r, PLAN_TAG, MPI_COMM_WORLD);
        for (int r = 1; r < g_size && len > 0; r++)
            MPI_Send(text, (int)len, MPI_CHAR, r, PLAN_TAG, MPI_COMM_WORLD);
    } else {
        MPI_Recv(&len, 1, MPI_LONG_LONG, 0, PLAN_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (len > 0 && (text = malloc((size_t)len)) != NULL)
            MPI_Recv(text, (int)len, MPI_CHAR, 0, PLAN_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    if (len <= 0 || !text || !(f = fmemopen(text, (size_t)len, "r"))) {
        free(text);
        return -1;
    }
    len = parse_plan(f, plan);
    free(text);
    return (int)len;
}

static unsigned long long rng_state;

void rng_seed(unsigned long long seed)
{
    rng_state = seed;
}

static unsigned long long rng_next(void)
{
    /* splitmix64: tiny, good enough to randomise measurement order */
    unsigned long long z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

void shuffle_ints(int *a, int n)
{
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(rng_next() % (unsigned long long)(i + 1));
        int t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}
