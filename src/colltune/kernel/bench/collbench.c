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
 *  - with `loop N` (fresh-launch confirmation and verify), also 2 stretches of N calls
 *    each after the barrier, free-running within, timed as a whole (series "loop"):
 *    calls that do not synchronise run ahead for as long as the library lets them, which
 *    a short window hides;
 *  - with `start N` (fresh-launch confirmation), also the point's first calls, its
 *    first call on from cold, up to N, each after the barrier (series "start"):
 *    what an application's loop pays for an algorithm's slow start, which every other
 *    series, timed after the warm-up, skips;
 *    `timing both` takes one of each per repetition;
 *  - a call shorter than 100 steps of MPI_Wtime (what it really resolves,
 *    measured at start and reported there with MPI_Wtick) is timed in batches
 *    of consecutive calls, at least that long, in either mode ("batch");
 *  - a point whose calls are slow reports "tick" events every 2 s (the
 *    launcher's watchdog is for hangs), and past 10x its time budget (or the
 *    plan's `floor_time` seconds) stops at 3 repetitions whatever min_reps says;
 *  - repetitions continue until the 95% confidence interval of the median is
 *    within a relative tolerance, a time budget is spent, or max_reps is hit;
 *  - results are checked for correctness; a wrong answer marks the point
 *    invalid;
 *  - configurations and sizes are visited in a seeded random order (with
 *    `ordered 1`, a configuration's sizes smallest first: an exact simulation
 *    has no noise to spread, and a point that runs out of time then leaves
 *    only larger sizes behind it);
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
 *        collbench --init         start and stop MPI, one process: whether the
 *                                 library accepts its environment (a tuning file
 *                                 MPICH parses in MPI_Init)
 *        collbench --cvars TEXT   MPI_T control variables whose name contains
 *                                 TEXT, one JSON object per line (name,
 *                                 description, integer value or text): how the tuner
 *                                 reads the catalog of an MPI without an
 *                                 info tool
 * Test-only fault switch: COLLTUNE_TEST_FAULT=KIND:NAME=VALUE makes every
 * configuration that sets control variable NAME to VALUE (through MPI_T, or
 * through OMPI_MCA_NAME in the environment) hang, crash (SIGSEGV) or return a
 * wrong result, or take a second longer per call, or start slow (a point's first 10
 * calls 2 ms longer each); KIND is hang, crash, wrong, slow or cold. coarse:timer_step_ns=N makes the kernel take MPI_Wtime's step to be N ns.
 * Unset in normal use.
 */
#define _GNU_SOURCE /* dladdr: which libmpi file the process loaded */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/mpiobjects.h"
#include "bench.h"

/* the source files: bench_plan.c (the plan file, the seeded order), bench_sync.c
 * (synchronisation and control by point-to-point messages), bench_mpit.c (MPI_T control
 * and performance variables), bench_colls.c (the collectives' table: buffers, call,
 * check), bench_measure.c (one point), bench_loop.c (its free-running stretches); this
 * file: the configurations, in order */


/* Where the launcher really put the ranks, for rank 0: nodes (ranks with one processor
 * name) and the most ranks on one of them. The tuner records a layout with every
 * measurement, so it checks the layout it asked for is the one that ran. Names sent point
 * to point: a collective here (or a communicator split, whose context-id agreement sends
 * small messages between varying pairs) would add collective traffic to what the traffic
 * proofs compare, and an algorithm forced at launch (MPICH's CVARs) would apply to it. */
static int by_name(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

static void placed(int *nodes, int *ppn)
{
    char *names;
    int len = 0, i, run = 1;

    names = calloc((size_t)g_size, MPI_MAX_PROCESSOR_NAME);
    if (!names)
        die("out of memory");
    MPI_Get_processor_name(names + (size_t)g_rank * MPI_MAX_PROCESSOR_NAME, &len);
    if (g_rank != 0) {
        MPI_Send(names + (size_t)g_rank * MPI_MAX_PROCESSOR_NAME, MPI_MAX_PROCESSOR_NAME,
                 MPI_CHAR, 0, 77, MPI_COMM_WORLD);
        free(names);
        return;
    }
    for (i = 1; i < g_size; i++)
        MPI_Recv(names + (size_t)i * MPI_MAX_PROCESSOR_NAME, MPI_MAX_PROCESSOR_NAME,
                 MPI_CHAR, i, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    qsort(names, (size_t)g_size, MPI_MAX_PROCESSOR_NAME, by_name);
    *nodes = 1;
    *ppn = 1;
    for (i = 1; i < g_size; i++) {
        if (strcmp(names + (size_t)i * MPI_MAX_PROCESSOR_NAME,
                   names + (size_t)(i - 1) * MPI_MAX_PROCESSOR_NAME) == 0) {
            if (++run > *ppn)
                *ppn = run;
        } else {
            ++*nodes;
            run = 1;
        }
    }
    free(names);
}

/* The file of the MPI library this process loaded (the one defining MPI_Init, "" where the
 * loader cannot say): the tuner refuses a launch whose ranks loaded another MPI's. */
static const char *library_file(void)
{
    Dl_info info;
    return dladdr((void *)MPI_Init, &info) && info.dli_fname ? info.dli_fname : "";
}

int main(int argc, char **argv)
{
    plan_t plan;
    const coll_ops_t *coll;
    int *order;
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int liblen = 0;
    int nodes = 0, ppn = 0;
    double t_start;
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
    if (argc == 2 && strcmp(argv[1], "--init") == 0) {
        /* a library that rejects a file read at start-up aborts here, not in a job */
        MPI_Init(&argc, &argv);
        MPI_Finalize();
        puts("ok");
        return 0;
    }
    if (fault && !strncmp(fault, "hang:init=", 10)) {
        /* test-only: the ranks on host NAME never enter MPI_Init (a node that hangs) */
        char host[256] = "";
        gethostname(host, sizeof host - 1);
        while (!strcmp(host, fault + 10))
            pause();
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    if (argc != 2)
        die("usage: collbench PLANFILE");
    switch (read_plan(argv[1], &plan)) {
    case 0:
        break;
    case -1: /* rank 0 reads it: its node must see the path */
        die("rank 0 cannot read the plan file (it must be on rank 0's node)");
        break;
    default:
        die("cannot read the plan file");
    }
    coll = coll_find(plan.collective);
    if (!coll)
        die("unknown collective in plan");
    /* a reduction's size that is not a whole number of its elements would be timed as a
     * shorter call than asked (its count rounded down): refused, never measured */
    for (int i = 0; i < plan.npoint; i++)
        if (coll_reduction(coll) && plan.points[i].size % coll_reduction(coll))
            die("a reduction's size in the plan is not a whole number of its datatype");
    if (fault && sscanf(fault, "%15[a-z]:%255[^=]=%lld", g_fault.kind, g_fault.name,
                        &g_fault.value) != 3)
        memset(&g_fault, 0, sizeof(g_fault));
    rng_seed(plan.seed);

    MPI_Get_library_version(lib, &liblen);
    cvars_init(&plan);
    pvars_init(plan.pvars);
    g_step = ctl_max(timer_step());
    if (!strcmp(g_fault.kind, "coarse") && !strcmp(g_fault.name, "timer_step_ns"))
        g_step = (double)g_fault.value * 1e-9; /* test-only: a timer as coarse as asked */
    placed(&nodes, &ppn);
    t_start = MPI_Wtime();
    if (g_rank == 0) {
        printf("{\"event\":\"start\",\"np\":%d,\"collective\":\"%s\",\"configs\":%d,"
               "\"points\":%d,\"wtick\":%.9g,\"timer_step\":%.9g,\"nodes\":%d,"
               "\"ppn\":%d,\"library\":",
               g_size, plan.collective, plan.nconfig, plan.npoint, MPI_Wtick(), g_step, nodes,
               ppn);
        put_json_string(lib);
        printf(",\"library_file\":");
        put_json_string(library_file());
        char objects[8192];
        mpi_objects(objects, sizeof objects);
        printf(",\"library_objects\":%s}\n", objects);
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

        bad = select_apply(plan.collective, cfg, why, sizeof(why)) != 0 ||
              cvars_apply(cfg, why, sizeof(why)) != 0;
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
        if (plan.ordered) { /* insertion sort by size: a few dozen points */
            for (int i = 1; i < npts; i++)
                for (int j = i; j > 0 && plan.points[pidx[j]].size <
                                          plan.points[pidx[j - 1]].size; j--) {
                    int t = pidx[j];
                    pidx[j] = pidx[j - 1];
                    pidx[j - 1] = t;
                }
        } else {
            shuffle_ints(pidx, npts);
        }
        for (int k = 0; k < npts; k++)
            measure_point(&plan, coll, cfg, plan.points[pidx[k]].size, comm, active);
        free(pidx);
        if (comm != MPI_COMM_WORLD && comm != MPI_COMM_NULL)
            MPI_Comm_free(&comm);
    }
    if (g_rank == 0) {
        /* the launch's time from the start line on, by the library's clock: simulated
         * seconds under SMPI, what an allocation would hold for it (core/account.py) */
        printf("{\"event\":\"done\",\"elapsed\":%.9g}\n", MPI_Wtime() - t_start);
        fflush(stdout);
    }
    free(order);
    free(plan.configs);
    free(plan.points);
    free(plan.arrival);
    refs_free();
    /* MPI_T must be closed before MPI_Finalize, or components that report
     * at finalize (pml monitoring) stay silent */
    pvars_close();
    cvars_close();
    MPI_Finalize();
    return 0;
}
