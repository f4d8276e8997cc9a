/* The loop and start series (plan keys `loop N`, `start N`): stretches of calls as an
 * application's time-step loop makes them, free-running (the loop) or from a size's first
 * call on (the start), and the "tick" a long stretch prints to show it is alive. */
#include <stdio.h>

#include "bench.h"

/* rank 0, every TICK_SECONDS inside a long stretch: the launcher's watchdog is for hangs */
void tick_if_due(int cid, long long size, int n, double *t_tick)
{
    if (g_rank == 0 && MPI_Wtime() - *t_tick > TICK_SECONDS) {
        printf("{\"event\":\"tick\",\"cid\":%d,\"size\":%lld,\"n\":%d}\n", cid, size, n);
        fflush(stdout);
        *t_tick = MPI_Wtime();
    }
}

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
            tick_if_due(cid, size, c, &t_tick);
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

/* The start (`start N`): the point's first calls, N in all from the first on (`first`: its
 * local time, timed by the caller after a barrier, before its check), each after the
 * barrier and timed alone, summed: an application's first calls at a size, which the
 * warm-up hides from every other series. Intel MPI's reduce preset 1 at 8 B on 2 ranks
 * was slow for its first thousands of calls: 1.25x faster than the default by IMB, 0.87x
 * by a loop of 2000 calls from cold. Each after the barrier, not back to back: a burst of
 * free-running calls first changed what came after (Open MPI 4.1's rabenseifner reduce
 * at 1 MiB on 4 ranks, 3x slower than the default in every series and in an
 * application-style loop, ran as fast as the default for the rest of the point after 5
 * such calls), and the warm series must stay what they were. Fewer calls once start_time
 * (0.05 s) has passed: rank 0 says so before each call, since a first call does not
 * predict the rest (MPICH busy-polling at 4 ranks on 2 cores: 5 ms to a second a call
 * at 1 MiB). The caller weighs them against the series timed later (tuner/confirm.py).
 * Returns the calls timed. */
int measure_start(const plan_t *plan, bufs_t *b, MPI_Comm comm,
                  int (*call)(bufs_t *, MPI_Comm), double first, int active, int cid,
                  long long size, double out[NOBJ])
{
    int calls = 1;
    double local = first, mx, sum, t_begin = MPI_Wtime(), t_tick = t_begin;
    while (calls < plan->start
           && ctl_bcast(g_rank == 0 && MPI_Wtime() - t_begin < plan->start_time)) {
        double t0;
        sync_barrier();
        t0 = MPI_Wtime();
        call(b, comm);
        local += MPI_Wtime() - t0;
        calls++;
        tick_if_due(cid, size, calls, &t_tick);
    }
    local = b->idle ? 0.0 : local / calls;
    ctl_max_sum(local, &mx, &sum);
    if (g_rank == 0) {
        out[OBJ_COMPLETION] = mx;
        out[OBJ_MEAN] = sum / active;
        out[OBJ_ROOT] = local;
    }
    return calls;
}
