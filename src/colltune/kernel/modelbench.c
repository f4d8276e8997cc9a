/* modelbench: point-to-point probes for fitting cost models (Hockney, LogGP).
 *
 * Rank 0 measures against each peer r = 1..np-1: ping-pong (half round trip), send
 * overhead (time inside MPI_Send with the receive already posted), receive overhead (time
 * inside MPI_Recv once the message has had time to arrive), and the gap per message of a
 * train of back-to-back sends. Alone, it times MPI_Reduce_local (double, sum) for gamma.
 * Then the same ping-pong and local reduction with every rank busy at once (ranks paired
 * 0-1, 2-3, ...): a collective step keeps all ranks communicating or reducing, and where
 * ranks share cores or memory bandwidth that costs more than one pair alone sees.
 * Every figure is the median over `reps` repetitions; rank 0 prints JSON lines.
 *
 *   modelbench --library
 *   mpirun -np N modelbench MAX_BYTES REPS
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRAIN 16 /* messages per train: long enough that the start-up cost amortises */

static int g_rank, g_size;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *xs, int n)
{
    qsort(xs, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? xs[n / 2] : 0.5 * (xs[n / 2 - 1] + xs[n / 2]);
}

static void spin(double seconds)
{
    double until = MPI_Wtime() + seconds;
    while (MPI_Wtime() < until) {
    }
}

/* Half the round trip of `size` bytes between rank 0 and `peer`. */
static double pingpong(char *buf, int size, int peer, int reps, int warm, double *t)
{
    int i;
    for (i = -warm; i < reps; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        if (g_rank == 0) {
            double t0 = MPI_Wtime();
            MPI_Send(buf, size, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
            MPI_Recv(buf, size, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (i >= 0)
                t[i] = 0.5 * (MPI_Wtime() - t0);
        } else if (g_rank == peer) {
            MPI_Recv(buf, size, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, size, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
        }
    }
    return g_rank == 0 ? median(t, reps) : 0.0;
}

/* Time spent inside MPI_Send when the receiver has already posted its receive. */
static double send_overhead(char *buf, int size, int peer, int reps, double *t)
{
    int i;
    for (i = -2; i < reps; i++) {
        MPI_Request req = MPI_REQUEST_NULL;
        if (g_rank == peer)
            MPI_Irecv(buf, size, MPI_BYTE, 0, 3, MPI_COMM_WORLD, &req);
        MPI_Barrier(MPI_COMM_WORLD);
        if (g_rank == 0) {
            double t0 = MPI_Wtime();
            MPI_Send(buf, size, MPI_BYTE, peer, 3, MPI_COMM_WORLD);
            if (i >= 0)
                t[i] = MPI_Wtime() - t0;
        } else if (g_rank == peer) {
            MPI_Wait(&req, MPI_STATUS_IGNORE);
        }
    }
    return g_rank == 0 ? median(t, reps) : 0.0;
}

/* Time inside MPI_Recv on the peer once the message has had `delay` seconds to arrive;
 * the peer reports its median back to rank 0. */
static double recv_overhead(char *buf, int size, int peer, int reps, double delay, double *t)
{
    int i;
    double med = 0.0;
    for (i = -2; i < reps; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        if (g_rank == 0) {
            MPI_Request req;
            MPI_Isend(buf, size, MPI_BYTE, peer, 4, MPI_COMM_WORLD, &req);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
        } else if (g_rank == peer) {
            double t0;
            spin(delay);
            t0 = MPI_Wtime();
            MPI_Recv(buf, size, MPI_BYTE, 0, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (i >= 0)
                t[i] = MPI_Wtime() - t0;
        }
    }
    if (g_rank == peer) {
        med = median(t, reps);
        MPI_Send(&med, 1, MPI_DOUBLE, 0, 5, MPI_COMM_WORLD);
    } else if (g_rank == 0) {
        MPI_Recv(&med, 1, MPI_DOUBLE, peer, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    return med;
}

/* Time for `count` back-to-back sends of `size` bytes, closed by a one-byte reply. */
static double train(char *buf, int size, int peer, int reps, int count, double *t)
{
    MPI_Request reqs[TRAIN];
    char ack = 0;
    int i, k;
    for (i = -2; i < reps; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        if (g_rank == 0) {
            double t0 = MPI_Wtime();
            for (k = 0; k < count; k++)
                MPI_Isend(buf, size, MPI_BYTE, peer, 6, MPI_COMM_WORLD, &reqs[k]);
            MPI_Waitall(count, reqs, MPI_STATUSES_IGNORE);
            MPI_Recv(&ack, 1, MPI_BYTE, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (i >= 0)
                t[i] = MPI_Wtime() - t0;
        } else if (g_rank == peer) {
            for (k = 0; k < count; k++)  /* one buffer: the contents do not matter */
                MPI_Irecv(buf, size, MPI_BYTE, 0, 6, MPI_COMM_WORLD, &reqs[k]);
            MPI_Waitall(count, reqs, MPI_STATUSES_IGNORE);
            MPI_Send(&ack, 1, MPI_BYTE, 0, 7, MPI_COMM_WORLD);
        }
    }
    return g_rank == 0 ? median(t, reps) : 0.0;
}

/* Half round trip with every pair of ranks (2i, 2i+1) ping-ponging at once; per
 * repetition the slowest pair counts, as the slowest transfer ends a collective's step.
 * An odd last rank waits in the barrier. */
static double pingpong_loaded(char *buf, int size, int reps, double *t)
{
    int i, partner = g_rank ^ 1;
    double med;
    for (i = -3; i < reps; i++) {
        double dt = 0.0;
        MPI_Barrier(MPI_COMM_WORLD);
        if (partner < g_size) {
            double t0 = MPI_Wtime();
            if (g_rank % 2 == 0) {
                MPI_Send(buf, size, MPI_BYTE, partner, 9, MPI_COMM_WORLD);
                MPI_Recv(buf, size, MPI_BYTE, partner, 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(buf, size, MPI_BYTE, partner, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(buf, size, MPI_BYTE, partner, 10, MPI_COMM_WORLD);
            }
            dt = g_rank % 2 == 0 ? 0.5 * (MPI_Wtime() - t0) : 0.0;
        }
        if (i >= 0)
            t[i] = dt;
    }
    /* element-wise max over ranks: each repetition's slowest pair */
    MPI_Allreduce(MPI_IN_PLACE, t, reps, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    med = median(t, reps);
    return med;
}

/* Every rank sends `size` bytes to its right neighbour and receives as many from its left
 * one at once (MPI_Sendrecv around a ring): the step of rings, recursive doubling and
 * pairwise exchanges. Timed over a train of such steps, as a collective runs them, so that
 * the ranks' uneven exit from the barrier is paid once, not per step; per repetition the
 * slowest rank counts. */
static double exchange_loaded(char *buf, char *rbuf, int size, int reps, double *t)
{
    int i, k, right = (g_rank + 1) % g_size, left = (g_rank + g_size - 1) % g_size;
    for (i = -3; i < reps; i++) {
        double t0;
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        for (k = 0; k < TRAIN; k++)
            MPI_Sendrecv(buf, size, MPI_BYTE, right, 11, rbuf, size, MPI_BYTE, left, 11,
                         MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (i >= 0)
            t[i] = (MPI_Wtime() - t0) / TRAIN;
    }
    MPI_Allreduce(MPI_IN_PLACE, t, reps, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return median(t, reps);
}

/* MPI_Reduce_local on every rank at once; per repetition the slowest rank counts. */
static double reduce_local_loaded(double *in, double *inout, int count, int reps, double *t)
{
    int i;
    for (i = -2; i < reps; i++) {
        double t0;
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        MPI_Reduce_local(in, inout, count, MPI_DOUBLE, MPI_SUM);
        if (i >= 0)
            t[i] = MPI_Wtime() - t0;
    }
    MPI_Allreduce(MPI_IN_PLACE, t, reps, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return median(t, reps);
}

static double reduce_local(double *in, double *inout, int count, int reps, double *t)
{
    int i;
    for (i = -2; i < reps; i++) {
        double t0 = MPI_Wtime();
        MPI_Reduce_local(in, inout, count, MPI_DOUBLE, MPI_SUM);
        if (i >= 0)
            t[i] = MPI_Wtime() - t0;
    }
    return median(t, reps);
}

int main(int argc, char **argv)
{
    long max_bytes;
    int reps, size, peer;
    char *buf;
    double *t;

    if (argc == 2 && strcmp(argv[1], "--library") == 0) {
        char lib[MPI_MAX_LIBRARY_VERSION_STRING];
        int len = 0;
        MPI_Get_library_version(lib, &len);
        printf("%s\n", lib);
        return 0;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: modelbench MAX_BYTES REPS | modelbench --library\n");
        return 2;
    }
    max_bytes = atol(argv[1]);
    reps = atoi(argv[2]);
    if (max_bytes < 8 || max_bytes > (1L << 30) || reps < 1 || reps > 100000) {
        fprintf(stderr, "modelbench: MAX_BYTES must be 8..1G and REPS 1..100000\n");
        return 2;
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    buf = calloc((size_t)max_bytes, 1);
    t = calloc((size_t)reps, sizeof(double));
    if (!buf || !t) {
        fprintf(stderr, "modelbench: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (g_rank == 0) {
        char name[MPI_MAX_PROCESSOR_NAME];
        int len = 0;
        MPI_Get_processor_name(name, &len);
        printf("{\"event\":\"start\",\"np\":%d,\"host\":\"%s\"}\n", g_size, name);
        fflush(stdout);
    }
    for (peer = 1; peer < g_size; peer++) {
        int same = 1;
        char mine[MPI_MAX_PROCESSOR_NAME] = {0}, theirs[MPI_MAX_PROCESSOR_NAME] = {0};
        int len = 0;
        MPI_Get_processor_name(mine, &len);
        if (g_rank == peer)
            MPI_Send(mine, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, 8, MPI_COMM_WORLD);
        if (g_rank == 0) {
            MPI_Recv(theirs, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, peer, 8, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
            same = strcmp(mine, theirs) == 0;
        }
        for (size = 1; size <= max_bytes; size = size < 8 ? 8 : size * 2) {
            double pp = pingpong(buf, size, peer, reps, 3, t);
            double os = send_overhead(buf, size, peer, reps, t);
            double delay = 0.0, orr, t1, tk;
            if (g_rank == 0)
                delay = 4.0 * pp + 5e-6;  /* long enough for the message to land */
            MPI_Bcast(&delay, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
            orr = recv_overhead(buf, size, peer, reps, delay, t);
            t1 = train(buf, size, peer, reps, 1, t);
            tk = train(buf, size, peer, reps, TRAIN, t);
            if (g_rank == 0) {
                printf("{\"event\":\"p2p\",\"peer\":%d,\"same_node\":%d,\"size\":%d,"
                       "\"pingpong\":%.9e,\"send_overhead\":%.9e,\"recv_overhead\":%.9e,"
                       "\"gap\":%.9e,\"reps\":%d}\n",
                       peer, same, size, pp, os, orr, (tk - t1) / (TRAIN - 1), reps);
                fflush(stdout);
            }
        }
    }
    {
        int count;
        double *a = calloc((size_t)max_bytes / 8, sizeof(double));
        double *b = calloc((size_t)max_bytes / 8, sizeof(double));
        if (!a || !b)
            MPI_Abort(MPI_COMM_WORLD, 1);
        if (g_rank == 0) {
            for (count = 1; count * 8L <= max_bytes; count *= 2)
                printf("{\"event\":\"reduce_local\",\"size\":%d,\"time\":%.9e,"
                       "\"reps\":%d}\n", count * 8, reduce_local(a, b, count, reps, t), reps);
        }
        for (size = 1; size <= max_bytes; size = size < 8 ? 8 : size * 2) {
            double pp = pingpong_loaded(buf, size, reps, t);
            double ex = exchange_loaded(buf, (char *)a, size, reps, t);
            if (g_rank == 0)
                printf("{\"event\":\"p2p_loaded\",\"size\":%d,\"pingpong\":%.9e,"
                       "\"exchange\":%.9e,\"reps\":%d}\n", size, pp, ex, reps);
        }
        for (count = 1; count * 8L <= max_bytes; count *= 2) {
            double rl = reduce_local_loaded(a, b, count, reps, t);
            if (g_rank == 0)
                printf("{\"event\":\"reduce_local_loaded\",\"size\":%d,\"time\":%.9e,"
                       "\"reps\":%d}\n", count * 8, rl, reps);
        }
        free(a);
        free(b);
        if (g_rank == 0) {
            printf("{\"event\":\"done\"}\n");
            fflush(stdout);
        }
    }
    free(buf);
    free(t);
    MPI_Finalize();
    return 0;
}
