/* The loop series (plan key `loop N`): free-running stretches of calls, timed as a whole,
 * as an application's time-step loop calls a collective. */
#include <stdio.h>

#include "bench.h"

/* The loop (`loop N`): LOOP_STRETCHES stretches of N calls, each after the barrier and
 * free-running within, timed as a whole, as an application's time-step loop calls a
 * collective. Calls that do not synchronise (a reduce's senders) run ahead of the root as
 * far as the library lets them, which a window of 64 hides: Intel MPI's reduce preset 4 at
 * 16 KiB on 4 ranks took 0.7x the default's time in windows of 64 and 1.5x over 1000 calls.
 * Fewer calls where `per_call` (rank 0's estimate from the repetitions, not one warm-up
 * call: MPICH busy-polling at 4 ranks on 2 cores ran far slower than its warm-up said)
 * says N would take longer than loop_time. Nothing may stop a stretch early (a rank that
 * stopped alone would leave the others waiting), so rank 0 shows it is alive meanwhile. */
int measure_loop(const plan_t *plan, bufs_t *b, MPI_Comm comm,
                 int (*call)(bufs_t *, MPI_Comm), double per_call, int active, int cid,
                 long long size, double out[NOBJ][LOOP_STRETCHES])
{
    int calls = plan->loop;
    double t_tick = MPI_Wtime();
    if (g_rank == 0 && per_call > 0 && plan->loop_time / per_call < calls)
        calls = (int)(plan->loop_time / per_call);
    calls = ctl_bcast(calls < 1 ? 1 : calls);
    for (int k = 0; k < LOOP_STRETCHES; k++) {
        double t0, local, mx, sum;
        sync_barrier();
        t0 = MPI_Wtime();
        for (int c = 0; c < calls; c++) {
            call(b, comm);
            if (g_rank == 0 && MPI_Wtime() - t_tick > TICK_SECONDS) {
                printf("{\"event\":\"tick\",\"cid\":%d,\"size\":%lld,\"n\":%d}\n", cid,
                       size, c);
                fflush(stdout);
                t_tick = MPI_Wtime();
            }
        }
        local = b->idle ? 0.0 : (MPI_Wtime() - t0) / calls;
        ctl_max_sum(local, &mx, &sum);
        if (g_rank == 0) {
            out[OBJ_COMPLETION][k] = mx;
            out[OBJ_MEAN][k] = sum / active;
            out[OBJ_ROOT][k] = local;
        }
    }
    return calls;
}
