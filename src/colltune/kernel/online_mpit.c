/* collonline's MPI_T: a candidate's control variables written, then restored (online.h
 * says when each function is used); MPI_T opened at the first candidate. */
#include <mpi.h>
#include <stddef.h>

#include "online.h"

#pragma GCC visibility push(hidden)

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

static int cvar_handle(const char *name, MPI_T_cvar_handle *h, MPI_Datatype *type)
{
    open_mpit();
    int idx, count, verb, bind, scope, nl = 0;
    MPI_T_enum en;
    if (MPI_T_cvar_get_index(name, &idx) != MPI_SUCCESS)
        return -1;
    if (MPI_T_cvar_get_info(idx, NULL, &nl, &verb, type, &en, NULL, NULL, &bind, &scope)
        != MPI_SUCCESS)
        return -1;
    return MPI_T_cvar_handle_alloc(idx, NULL, h, &count) == MPI_SUCCESS ? 0 : -1;
}

/* write `value` (kept in `old` first); -1 where the library refuses */
static int cvar_set(MPI_T_cvar_handle h, MPI_Datatype type, long long value, long long *old)
{
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
    int have[MAXV] = {0}, set[MAXV] = {0};
    MPI_Comm dup;
    *refused = 0;
    for (int v = 0; v < cd->nvar; v++) {
        have[v] = cvar_handle(cd->name[v], &h[v], &type[v]) == 0;
        set[v] = have[v] && cvar_set(h[v], type[v], cd->value[v], &old[v]) == 0;
        *refused |= !set[v];
    }
    PMPI_Comm_dup(comm, &dup);
    /* a candidate the library refuses for a call's arguments returns, and is named */
    PMPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    for (int v = 0; v < cd->nvar; v++) {
        long long ignored;
        if (set[v])
            cvar_set(h[v], type[v], old[v], &ignored);
        if (have[v])
            MPI_T_cvar_handle_free(&h[v]);
    }
    return dup;
}

int set_candidate(cand_t *cd)
{
    if (cd->ready == 0) {
        cd->ready = 1;
        for (int v = 0; v < cd->nvar; v++)
            if (cvar_handle(cd->name[v], &cd->h[v], &cd->type[v]) != 0)
                cd->ready = -1;
    }
    if (cd->ready < 0)
        return 0;
    for (int v = 0; v < cd->nvar; v++)
        if (cvar_set(cd->h[v], cd->type[v], cd->value[v], &cd->old[v]) != 0) {
            long long ignored;
            while (v-- > 0)
                cvar_set(cd->h[v], cd->type[v], cd->old[v], &ignored);
            cd->ready = -1;
            return 0;
        }
    return 1;
}

void unset_candidate(cand_t *cd)
{
    long long ignored;
    for (int v = cd->nvar - 1; v >= 0; v--)
        cvar_set(cd->h[v], cd->type[v], cd->old[v], &ignored);
}

void close_mpit(void)
{
    if (g_mpit)
        MPI_T_finalize();
    g_mpit = 0;
}

#pragma GCC visibility pop
