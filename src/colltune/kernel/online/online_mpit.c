/* collonline's MPI_T: a candidate's control variables written, then restored (online.h
 * says when each function is used); MPI_T opened at the first candidate, or, where the
 * plan names the library's own variable API (`vars`), not at all. */
#define _GNU_SOURCE /* RTLD_DEFAULT under -std=c99 */
#include <dlfcn.h>
#include <mpi.h>
#include <stddef.h>
#include <string.h>

#include "online.h"

#pragma GCC visibility push(hidden)

/* Open MPI's own variable API (opal/mca/base/mca_base_var.h), which its MPI_T reads and
 * writes go through, there from MPI_Init on (libopen-pal comes with libmpi): opening
 * MPI_T registers every framework's components first, loading every plugin installed
 * (0.2 s a process here, docs/online.md). Found by symbol, never linked: where a symbol
 * is missing, MPI_T as before. The plan names it only for variables that are ints (all
 * of coll/tuned's). */
typedef int (*var_find_fn)(const char *full_name, int *index);
/* stores a pointer to the variable's own storage into *value (not a copy) */
typedef int (*var_get_fn)(int index, const void *value, void *source, const char **file);
typedef int (*var_set_fn)(int index, const void *value, size_t size, int source,
                          const char *file);
enum { VAR_SOURCE_SET = 4 }; /* MCA_BASE_VAR_SOURCE_SET, as MPI_T_cvar_write records it */
static var_find_fn v_find;
static var_get_fn v_get;
static var_set_fn v_set;
static int g_own = -1; /* 1: the library's own variable API; 0: MPI_T; -1: not yet known */

static int own_api(void)
{
    if (g_own >= 0)
        return g_own;
    g_own = 0;
    if (strcmp(P.vars, "mca_base_var") != 0)
        return 0;
    /* POSIX's way to a function from dlsym (ISO C has no object-to-function cast) */
    *(void **)&v_find = dlsym(RTLD_DEFAULT, "mca_base_var_find_by_name");
    *(void **)&v_get = dlsym(RTLD_DEFAULT, "mca_base_var_get_value");
    *(void **)&v_set = dlsym(RTLD_DEFAULT, "mca_base_var_set_value");
    g_own = v_find && v_get && v_set;
    return g_own;
}

static int g_mpit; /* MPI_T opened: at the first candidate, not at MPI_Init (Open MPI 4.1
                    * takes 0.2 s to open it, 4 ranks on 2 cores: a run that explores
                    * nothing should not pay it) */

static void open_mpit(void)
{
    int prov;
    if (g_mpit)
        return;
    if (MPI_T_init_thread(MPI_THREAD_SINGLE, &prov) != MPI_SUCCESS)
        fail("MPI_T_init_thread failed: the layer cannot write control variables");
    g_mpit = 1;
}

/* the variable `name`: its MPI_T handle and type, or its index in the library's own API */
static int cvar_handle(const char *name, MPI_T_cvar_handle *h, MPI_Datatype *type, int *idx)
{
    if (own_api()) {
        *type = MPI_INT;
        return v_find(name, idx) == 0 ? 0 : -1;
    }
    open_mpit();
    int count, verb, bind, scope, nl = 0;
    MPI_T_enum en;
    if (MPI_T_cvar_get_index(name, idx) != MPI_SUCCESS)
        return -1;
    if (MPI_T_cvar_get_info(*idx, NULL, &nl, &verb, type, &en, NULL, NULL, &bind, &scope)
        != MPI_SUCCESS)
        return -1;
    return MPI_T_cvar_handle_alloc(*idx, NULL, h, &count) == MPI_SUCCESS ? 0 : -1;
}

/* write `value` (kept in `old` first); -1 where the library refuses */
static int cvar_set(MPI_T_cvar_handle h, MPI_Datatype type, int idx, long long value,
                    long long *old)
{
    if (own_api()) {
        const int *now = NULL;
        int v = (int)value;
        if (v_get(idx, &now, NULL, NULL) != 0 || !now)
            return -1;
        *old = *now;
        return v_set(idx, &v, sizeof v, VAR_SOURCE_SET, NULL) == 0 ? 0 : -1;
    }
    if (type == MPI_INT || type == MPI_UNSIGNED) {
        int o = 0, v = (int)value;
        if (MPI_T_cvar_read(h, &o) != MPI_SUCCESS)
            return -1;
        *old = o;
        return MPI_T_cvar_write(h, &v) == MPI_SUCCESS ? 0 : -1;
    }
    long long o = 0;
    if (MPI_T_cvar_read(h, &o) != MPI_SUCCESS)
        return -1;
    *old = o;
    return MPI_T_cvar_write(h, &value) == MPI_SUCCESS ? 0 : -1;
}

MPI_Comm make_candidate(const cand_t *cd, MPI_Comm comm, int *refused)
{
    MPI_T_cvar_handle h[MAXV];
    MPI_Datatype type[MAXV];
    long long old[MAXV];
    int have[MAXV] = {0}, set[MAXV] = {0}, idx[MAXV];
    MPI_Comm dup;
    *refused = 0;
    for (int v = 0; v < cd->nvar; v++) {
        have[v] = cvar_handle(cd->name[v], &h[v], &type[v], &idx[v]) == 0;
        set[v] = have[v] && cvar_set(h[v], type[v], idx[v], cd->value[v], &old[v]) == 0;
        *refused |= !set[v];
    }
    PMPI_Comm_dup(comm, &dup);
    /* a candidate the library refuses for a call's arguments returns, and is named */
    PMPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    for (int v = 0; v < cd->nvar; v++) {
        long long ignored;
        if (set[v])
            cvar_set(h[v], type[v], idx[v], old[v], &ignored);
        if (have[v] && !own_api())
            MPI_T_cvar_handle_free(&h[v]);
    }
    return dup;
}

int set_candidate(cand_t *cd)
{
    if (cd->ready == 0) {
        cd->ready = 1;
        for (int v = 0; v < cd->nvar; v++)
            if (cvar_handle(cd->name[v], &cd->h[v], &cd->type[v], &cd->idx[v]) != 0)
                cd->ready = -1;
    }
    if (cd->ready < 0)
        return 0;
    for (int v = 0; v < cd->nvar; v++)
        if (cvar_set(cd->h[v], cd->type[v], cd->idx[v], cd->value[v], &cd->old[v]) != 0) {
            long long ignored;
            while (v-- > 0)
                cvar_set(cd->h[v], cd->type[v], cd->idx[v], cd->old[v], &ignored);
            cd->ready = -1;
            return 0;
        }
    return 1;
}

void unset_candidate(cand_t *cd)
{
    long long ignored;
    for (int v = cd->nvar - 1; v >= 0; v--)
        cvar_set(cd->h[v], cd->type[v], cd->idx[v], cd->old[v], &ignored);
}

void close_mpit(void)
{
    if (g_mpit)
        MPI_T_finalize();
    g_mpit = 0;
}

#pragma GCC visibility pop
