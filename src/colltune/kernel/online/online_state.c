/* collonline's shared state, owned here so that the layer's files call one another one
 * way only (collonline.c says what the layer does): the plan every file reads, the
 * collectives' names, the communicators the application called a collective on, the
 * layer's own time, the Fortran flag, and how the layer stops a job it cannot serve. */
#define _GNU_SOURCE /* dladdr, in preload.h */
#include <mpi.h>
#include <stdio.h>

#include "../common/preload.h"
#include "online.h"
#pragma GCC visibility push(hidden)

plan_t P;
const char *const NAMES[N_OCOLL] = {"allreduce", "bcast",    "reduce",
                                     "allgather", "alltoall", "barrier"};
int in_fortran;
double g_overhead;
comm_st *g_comms;
/* the plan and the directory (COLLTUNE_ONLINE_PLAN, COLLTUNE_ONLINE_DIR), taken out of the
 * environment at MPI_Init (take_settings): a process a rank starts never sees them. Not
 * when the layer is loaded: a wrapper between the launcher and the rank (strace, a shell
 * script, numactl) loads it too, and must hand it on */
char g_plan_path[4096], g_dir[4096];
static int g_taken;

void fail(const char *why)
{
    fprintf(stderr, "colltune online: %s\n", why);
    PMPI_Abort(MPI_COMM_WORLD, 3);
}

void take_settings(void)
{
    if (g_taken++)
        return;
    take_env("COLLTUNE_ONLINE_PLAN", g_plan_path, sizeof g_plan_path);
    take_env("COLLTUNE_ONLINE_DIR", g_dir, sizeof g_dir);
    drop_from_preload((void *)take_settings);
}
