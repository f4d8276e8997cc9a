/*
 * collstep: an application's time step, as `tune verify --step` judges a file by it: one
 * collective called at each of several sizes in turn, step after step, free-running, on
 * MPI_COMM_WORLD, timed as a whole.
 *
 * Why: the kernel measures each size alone, and what a call costs can depend on the call
 * before it (a reduce's senders run on into the next call). Intel MPI at 2 ranks, reduce
 * with preset 1 at 8 B and the library's own entry at 64 KiB: neither size alone was shown
 * faster than the default, the step of both was 9-14% faster. Only a step shows that.
 *
 * Per launch: a lead of untimed steps (LEAD_CALLS calls in all, or LEAD_SECONDS: Intel MPI
 * runs a launch's first few hundred calls slower), then STRETCHES stretches of the same
 * number of steps, each after the point-to-point barrier, timed as a whole; rank 0 prints
 * the slowest rank's time per step (and the mean over ranks) for each stretch, one JSON
 * line each. The number of steps is chosen on rank 0 so that a stretch takes about SECONDS
 * (from the lead's last chunk: its first calls may be a launch's slow start). Last, every
 * size is called once more on fresh inputs and its output checked: a wrong answer fails
 * the launch.
 *
 * Usage: collstep COLLECTIVE SECONDS SIZE [SIZE...]   (per-rank bytes)
 *        collstep --library                          the MPI library this binary loads
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define LEAD_CALLS 1000
#define LEAD_SECONDS 2.0
#define STRETCHES 5
#define MAX_SIZES 64
#define MAX_STEPS 1000000

static void step(bufs_t *b, int n, MPI_Comm comm)
{
    for (int i = 0; i < n; i++)
        if (coll_call(&b[i], comm) != MPI_SUCCESS)
            die("a collective call failed");
}

int main(int argc, char **argv)
{
    static bufs_t bufs[MAX_SIZES];
    const coll_ops_t *ops;
    double seconds, t0, start, lead_time = 0;
    int n = argc - 3, lead, steps, calls = 0, wrong = 0;

    if (argc == 2 && strcmp(argv[1], "--library") == 0) {
        char lib[MPI_MAX_LIBRARY_VERSION_STRING];
        int len;
        MPI_Get_library_version(lib, &len);
        printf("%s\n", lib);
        return 0;
    }
    g_prog = "collstep";
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    if (argc < 4 || n > MAX_SIZES)
        die("usage: collstep COLLECTIVE SECONDS SIZE [SIZE...] (at most 64 sizes)");
    ops = coll_find(argv[1]);
    seconds = atof(argv[2]);
    if (!ops || !(seconds > 0))
        die("unknown collective, or SECONDS not above 0");
    for (int i = 0; i < n; i++) {
        char *end;
        long long size = strtoll(argv[i + 3], &end, 10);
        /* reductions count doubles: a size that is not a whole number of them is refused,
         * never rounded (the step would not be the one asked for) */
        if (*end || size < 0 || size > (1LL << 30))
            die("a size is not a number of bytes from 0 to 1 GiB");
        if (bufs_alloc(&bufs[i], ops, size, MPI_COMM_WORLD) != 0)
            die("out of memory");
        if (coll_reduction(ops) && size % coll_reduction(ops))
            die("a reduction's size is not a whole number of doubles");
        bufs_fill(&bufs[i]);
    }

    /* the lead, in chunks that double, rank 0 saying after each whether to go on: until
     * LEAD_CALLS calls, or LEAD_SECONDS where calls are slow (MPICH busy-polling at 4 ranks
     * on 2 cores: 0.1 s a step); the last chunk's time sizes the stretches */
    sync_barrier();
    start = MPI_Wtime();
    for (int chunk = 1, more = 1; more;) {
        t0 = MPI_Wtime();
        for (int k = 0; k < chunk; k++)
            step(bufs, n, MPI_COMM_WORLD);
        lead_time = (MPI_Wtime() - t0) / chunk;
        calls += chunk * n;
        more = ctl_bcast(calls < LEAD_CALLS && MPI_Wtime() - start < LEAD_SECONDS);
        lead = (LEAD_CALLS - calls + n - 1) / n;
        chunk = 2 * chunk < lead ? 2 * chunk : lead > 0 ? lead : 1;
    }
    steps = (int)(seconds / (lead_time > 0 ? lead_time : 1e-9));
    steps = ctl_bcast(steps < 1 ? 1 : steps > MAX_STEPS ? MAX_STEPS : steps);

    for (int k = 0; k < STRETCHES; k++) {
        double mx, sum, local;
        sync_barrier();
        t0 = MPI_Wtime();
        for (int s = 0; s < steps; s++)
            step(bufs, n, MPI_COMM_WORLD);
        local = (MPI_Wtime() - t0) / steps;
        ctl_max_sum(local, &mx, &sum);
        if (g_rank == 0) {
            printf("{\"event\":\"stretch\",\"k\":%d,\"steps\":%d,\"step\":%.9g,"
                   "\"mean\":%.9g}\n", k, steps, mx, sum / g_size);
            fflush(stdout);
        }
    }
    for (int i = 0; i < n; i++) {
        bufs_fill(&bufs[i]);
        step(&bufs[i], 1, MPI_COMM_WORLD);
        if (!bufs_check(&bufs[i]))
            wrong = 1;
    }
    wrong = ctl_max(wrong) > 0;
    wrong = ctl_bcast(wrong);
    if (g_rank == 0) {
        printf("{\"event\":\"%s\"}\n", wrong ? "wrong" : "done");
        fflush(stdout);
    }
    for (int i = 0; i < n; i++)
        bufs_free(&bufs[i]);
    MPI_Finalize();
    return wrong ? 3 : 0;
}
