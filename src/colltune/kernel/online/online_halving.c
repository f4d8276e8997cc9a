/* collonline's successive halving (collonline.c says what the layer does): a group's times,
 * reduced alike on every rank, kept per configuration, and at each batch's end the round
 * that gives the candidates still in question their calls, halves them, or ends the
 * exploration. Nothing here depends on a rank's own clock: every rank decides alike. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "online.h"
#pragma GCC visibility push(hidden)

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *x, int n)
{
    double *y = malloc((size_t)n * sizeof *y);
    if (!y || n == 0) {
        free(y);
        return NAN;
    }
    memcpy(y, x, (size_t)n * sizeof *y);
    qsort(y, (size_t)n, sizeof *y, cmp_double); /* at a batch's end, up to KEEP values */
    double m = n % 2 ? y[n / 2] : 0.5 * (y[n / 2 - 1] + y[n / 2]);
    free(y);
    return m;
}

/* a configuration's median so far (its kept times: the last KEEP) */
static double med(const group_t *g, int k)
{
    return median(g->t[k], g->n[k] < KEEP ? g->n[k] : KEEP);
}

/* a candidate's calls so far: this run's and the earlier runs' of the command (`prior`) */
static int calls_of(const group_t *g, int k)
{
    return g->n[k] + g->pn[k];
}

/* a candidate's median over the library's choice: this run's (its median over this run's
 * library median `m0`) and the earlier runs' (each launch's own ratio), weighted by their
 * calls: a run is compared with the library's choice in its own launch only, since
 * launches differ by more than the candidates do (NAN: nothing to say yet) */
static double score(const group_t *g, int k, double m0)
{
    double own = g->n[k] && m0 > 0 ? med(g, k) / m0 : NAN;
    if (!g->pn[k])
        return own;
    if (!(own > 0))
        return g->pr[k];
    return exp((g->n[k] * log(own) + g->pn[k] * log(g->pr[k])) / (g->n[k] + g->pn[k]));
}

/* the candidates still in question, fastest first (ties by their place in the plan) */
static int in_question(const group_t *g, int ncand, double m0, int *order)
{
    int n = 0;
    for (int k = 1; k < ncand; k++) {
        if (g->dropped[k] || g->halved[k])
            continue;
        int i = n++;
        for (; i > 0 && score(g, order[i - 1], m0) > score(g, k, m0); i--)
            order[i] = order[i - 1];
        order[i] = k;
    }
    return n;
}

/* Successive halving, at a batch's end (the times every rank reduced alike): each round
 * gives every candidate still in question `target` calls; when all have them, the slower
 * half is out and the others' target doubles, until one is left with `samples` calls (or
 * several, once the target reaches `samples`). A short run's few exploration calls thus go
 * to the candidates that may win, not evenly to all. A candidate clearly slower than the
 * default (its median `drop` times the default's) is dropped as soon as it has its first
 * round's calls. The calls and medians are the earlier runs' too (`score`): a run takes
 * up the halving where they left it, one round per batch while they already cover it, so
 * runs too short to end it alone end it together. */
static void next_round(group_t *g, int ncand)
{
    int order[MAXC], behind = 0;
    double m0 = g->t[0] ? med(g, 0) : NAN;
    for (int k = 1; k < ncand; k++) {
        if (g->dropped[k] || g->halved[k])
            continue;
        if (calls_of(g, k) >= P.first && score(g, k, m0) > P.drop)
            g->dropped[k] = 1;
        else if (calls_of(g, k) < g->target)
            behind = 1;
    }
    if (behind)
        return;
    int alive = in_question(g, ncand, m0, order);
    if (alive > 1 && g->target < P.samples) {
        for (int i = (alive + 1) / 2; i < alive; i++)
            g->halved[order[i]] = 1;
        g->target = 2 * g->target < P.samples ? 2 * g->target : P.samples;
        return;
    }
    if (alive == 1 && g->target < P.samples) {
        g->target = P.samples;
        return;
    }
    /* exploration over: the run keeps the fastest if it is 5% better than the library's
     * choice by the medians; the file is decided afterwards, by the statistics */
    g->done = 1;
    g->current = alive && score(g, order[0], m0) < 0.95 ? order[0] : 0;
}

void keep_batch(group_t *g, int ncand)
{
    for (int i = 0; i < g->nb; i++) {
        int k = g->bc[i];
        if (!g->t[k])
            g->t[k] = calloc(KEEP, sizeof(double));
        if (g->t[k])
            g->t[k][g->n[k]++ % KEEP] = g->bt[i];
    }
    g->nb = 0;
    if (!g->done)
        next_round(g, ncand);
}
