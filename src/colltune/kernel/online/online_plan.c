/* collonline's plan: what tune online wrote for the layer (COLLTUNE_ONLINE_PLAN; its
 * lines are said in collonline.c), read once at the start, and what a new group may try. */
#include <stdio.h>
#include <string.h>

#include "online.h"

/* Every setting the plan must carry, and its range: tune online writes each (its defaults
 * are declared once, apploop/online/request.py); a plan without one, or with one out of
 * range, is refused with the line named, never run on a value of the layer's own */
static void check_plan(int per_call_said)
{
    const char *bad = !(P.share > 0 && P.share <= 1)                   ? "share (0 < S <= 1)"
                      : !(P.drop > 1 && P.drop < 1e6)                  ? "drop (1 < F < 1e6)"
                      : !(P.min_calls >= 0)                            ? "min_calls (N >= 0)"
                      : !(P.batch >= 1 && P.batch <= MAXB)             ? "batch (1 <= B <= 256)"
                      : !(P.samples >= 1 && P.samples <= KEEP)         ? "samples (1 <= K <= 512)"
                      : !(P.first >= 1 && P.first <= P.samples)        ? "first (1 <= F <= samples)"
                      : !(P.flush >= 0 && P.flush < 1e6)               ? "flush (0 <= S < 1e6)"
                      : !per_call_said                                 ? "switch (dup or call)"
                                                                       : NULL;
    if (bad) {
        char why[160];
        snprintf(why, sizeof why, "the plan's line %s is missing or out of range", bad);
        fail(why);
    }
}

void read_plan(const char *path)
{
    FILE *f = fopen(path, "r");
    char line[4096];
    int per_call_said = 0;
    P.share = P.drop = P.flush = -1; /* not said: refused by check_plan */
    P.min_calls = -1;
    P.batch = P.samples = P.first = -1;
    for (int c = 0; c < N_OCOLL; c++)
        P.ncand[c] = 1; /* the default */
    if (!f)
        fail("cannot read the plan (COLLTUNE_ONLINE_PLAN)");
    while (fgets(line, sizeof line, f)) {
        char coll[64], how[16];
        int id, nvar, off = 0;
        if (sscanf(line, "switch %15s", how) == 1) {
            P.per_call = !strcmp(how, "call");
            per_call_said = P.per_call || !strcmp(how, "dup");
            continue;
        }
        if (sscanf(line, "vars %31s", P.vars) == 1)
            continue;
        if (sscanf(line, "share %lf", &P.share) == 1 || sscanf(line, "drop %lf", &P.drop) == 1
            || sscanf(line, "min_calls %lld", &P.min_calls) == 1
            || sscanf(line, "batch %d", &P.batch) == 1
            || sscanf(line, "samples %d", &P.samples) == 1
            || sscanf(line, "first %d", &P.first) == 1
            || sscanf(line, "flush %lf", &P.flush) == 1)
            continue;
        int np, bucket, calls, skip;
        double ratio;
        if (sscanf(line, "prior %63s %d %d %d %d %lf", coll, &id, &np, &bucket, &calls, &ratio)
            == 6) {
            int c = 0;
            while (c < N_OCOLL && strcmp(NAMES[c], coll))
                c++;
            /* data from the store: a count or ratio out of range says nothing, left out */
            if (c < N_OCOLL && P.nprior < MAXPRIOR && calls > 0 && calls <= 1000000
                && ratio > 0 && ratio < 1e6)
                P.prior[P.nprior++] = (prior_t){c, id, np, bucket, calls, ratio};
            continue;
        }
        if (sscanf(line, "final %63s %d %d %d", coll, &id, &np, &bucket) == 4) {
            int c = 0;
            while (c < N_OCOLL && strcmp(NAMES[c], coll))
                c++;
            if (c < N_OCOLL && P.nfinal < (int)(sizeof P.final / sizeof P.final[0]))
                P.final[P.nfinal++] = (final_t){c, id, np, bucket};
            continue;
        }
        skip = sscanf(line, "skip %63s %d %d %d", coll, &id, &np, &bucket) == 4;
        if (!skip && sscanf(line, "cand %63s %d %d%n", coll, &id, &nvar, &off) != 3)
            continue;
        int c = 0;
        while (c < N_OCOLL && strcmp(NAMES[c], coll))
            c++;
        if (skip) {
            if (c < N_OCOLL && P.nskip < MAXSKIP)
                P.skip[P.nskip++] = (skip_t){c, id, np, bucket};
            continue;
        }
        if (c == N_OCOLL || P.ncand[c] >= MAXC || nvar > MAXV || nvar < 0)
            fail("a plan line names an unknown collective or too many candidates");
        cand_t *k = &P.cand[c][P.ncand[c]++];
        k->id = id;
        k->nvar = nvar;
        char *p = line + off;
        for (int v = 0; v < nvar; v++) {
            int used = 0;
            if (sscanf(p, " %95s %lld%n", k->name[v], &k->value[v], &used) != 2)
                fail("a candidate's control variables are malformed in the plan");
            p += used;
        }
        if (sscanf(p, " below %lld", &k->below) != 1)
            k->below = 0;
    }
    fclose(f);
    check_plan(per_call_said);
}

/* a new group's candidates the plan skips for its communicator size and bucket, and
 * those whose segment would hold its whole first call (one segment: what the algorithm
 * runs unsegmented, another candidate): never explored (the plan and the call's size are
 * the same on every rank, so is this); nothing left to try, the group is never timed.
 * The others start with what earlier runs gave them (`prior`), so the halving goes on
 * where they left it, or, past its end, with the finalist alone (`final`) */
void prune(group_t *g, int c, int np, int bucket)
{
    int open = 0;
    for (int k = 1; k < P.ncand[c]; k++) {
        if (P.cand[c][k].below && g->bytes <= P.cand[c][k].below)
            g->unfit[k] = g->dropped[k] = 1;
        for (int i = 0; i < P.nskip; i++) {
            const skip_t *x = &P.skip[i];
            if (x->c == c && x->id == P.cand[c][k].id && x->np == np && x->bucket == bucket)
                g->pruned[k] = g->dropped[k] = 1;
        }
        for (int i = 0; i < P.nprior; i++) {
            const prior_t *x = &P.prior[i];
            if (x->c == c && x->id == P.cand[c][k].id && x->np == np && x->bucket == bucket) {
                g->pn[k] = x->calls;
                g->pr[k] = x->ratio;
            }
        }
        open |= !g->dropped[k];
    }
    /* a finalist whose gain is not yet confirmed: the others are out, and it gets
     * `samples` calls more (its round's target past `samples`: the halving ends when it
     * has them) */
    for (int i = 0; i < P.nfinal; i++) {
        const final_t *x = &P.final[i];
        if (x->c != c || x->np != np || x->bucket != bucket)
            continue;
        for (int k = 1; k < P.ncand[c]; k++) {
            if (P.cand[c][k].id == x->id && !g->dropped[k])
                g->target = g->pn[k] + P.samples;
            else
                g->halved[k] = !g->dropped[k];
        }
    }
    g->done = !open;
}
