/* MPI_T in collbench: control variables written per configuration and read back (how a
 * configuration is forced; under SMPI, SimGrid's own table of collectives instead),
 * performance counters of rank 0 (which algorithm a library says it ran), and the
 * listing of control variables the tuner reads a catalog from. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#if defined(SMPI_H)
#include <xbt/config.h>
/* SimGrid fills its table of collectives (one function pointer per collective, shared by
 * every simulated rank) from its smpi/<coll> options when the simulation starts; calling
 * that again after an option changed switches the algorithm inside the running
 * simulation. It is not in SimGrid's installed headers (3.32's libsimgrid exports it):
 * weak, so a SimGrid without it rejects the configuration and the tuner launches it with
 * --cfg=smpi/<coll>:<name> instead. */
void _ZN7simgrid4smpi5colls15set_collectivesEv(void) __attribute__((weak));
#endif

int select_apply(const char *coll, const config_t *cfg, char *why, size_t whylen)
{
    if (!cfg->select[0])
        return 0;
#if defined(SMPI_H)
    if (!_ZN7simgrid4smpi5colls15set_collectivesEv) {
        snprintf(why, whylen, "smpi/%s is not settable through MPI_T (this SimGrid cannot "
                 "switch collectives in a running simulation)", coll);
        return -1;
    }
    /* the table is the whole simulation's: every rank leaves the previous configuration's
     * last call before it changes and none enters a call before it has changed; the
     * barrier is point-to-point, the collective being switched may be MPI_Barrier */
    sync_barrier();
    if (g_rank == 0) {
        char option[MAX_NAME];
        snprintf(option, sizeof(option), "smpi/%s", coll);
        sg_cfg_set_string(option, cfg->select);
        _ZN7simgrid4smpi5colls15set_collectivesEv();
    }
    sync_barrier();
    return 0;
#else
    snprintf(why, whylen, "%s: selecting %s by name is not settable through MPI_T here", coll,
             cfg->select);
    return -1;
#endif
}

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

void cvars_init(const plan_t *plan)
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
int cvars_apply(const config_t *cfg, char *why, size_t whylen)
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

#if HAVE_MPIT_CVARS
static pvar_t *g_pvars; /* every counter with the prefix (MVAPICH2 has hundreds) */
static int g_npvars;
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
void pvars_init(const char *prefix)
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

void pvars_mark(void)
{
#if HAVE_MPIT_CVARS
    for (int i = 0; i < g_npvars; i++)
        if (pvar_read(&g_pvars[i], &g_pvars[i].before) != 0)
            g_pvars[i].before = 0;
#endif
}

/* ,"pvars":{"name":delta,...} for the counters that moved since pvars_mark */
void pvars_print(void)
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

void pvars_close(void)
{
#if HAVE_MPIT_CVARS
    if (g_pvars_open == 1)
        MPI_T_pvar_session_free(&g_session);
    if (g_pvars_open)
        MPI_T_finalize();
    free(g_pvars);
#endif
}


void cvars_close(void)
{
#if HAVE_MPIT_CVARS
    if (g_mpit_open)
        MPI_T_finalize();
#endif
    free(g_cvars);
}

/* MPI_T may be used without MPI_Init: the variables and their descriptions
 * are known before any process starts. */
int list_cvars(const char *text)
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
