/* Synchronisation and control among collbench's ranks, by point-to-point messages on
 * MPI_COMM_WORLD only: never a collective of the library under test. */
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"

int g_rank, g_size;
const char *g_prog = "collbench";

void die(const char *msg)
{
    fprintf(stderr, "%s: %s\n", g_prog, msg);
    MPI_Abort(MPI_COMM_WORLD, 2);
    exit(2);
}

void sync_barrier(void)
{
    /* dissemination barrier: ceil(log2 p) rounds of zero-byte exchanges */
    char s = 0, r = 0;
    for (int k = 1; k < g_size; k <<= 1) {
        int to = (g_rank + k) % g_size;
        int from = (g_rank - k + g_size) % g_size;
        MPI_Sendrecv(&s, 0, MPI_CHAR, to, TAG_SYNC, &r, 0, MPI_CHAR, from, TAG_SYNC,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
}

/* binomial-tree maximum of a double towards rank 0 */
double ctl_max(double v)
{
    for (int k = 1; k < g_size; k <<= 1) {
        if (g_rank & k) {
            MPI_Send(&v, 1, MPI_DOUBLE, g_rank - k, TAG_CTL, MPI_COMM_WORLD);
            break;
        }
        if (g_rank + k < g_size) {
            double o;
            MPI_Recv(&o, 1, MPI_DOUBLE, g_rank + k, TAG_CTL, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (o > v)
                v = o;
        }
    }
    return v;
}

/* binomial-tree maximum and sum of a double towards rank 0, in one pass */
void ctl_max_sum(double v, double *mx, double *sum)
{
    double acc[2] = {v, v};
    for (int k = 1; k < g_size; k <<= 1) {
        if (g_rank & k) {
            MPI_Send(acc, 2, MPI_DOUBLE, g_rank - k, TAG_CTL, MPI_COMM_WORLD);
            break;
        }
        if (g_rank + k < g_size) {
            double o[2];
            MPI_Recv(o, 2, MPI_DOUBLE, g_rank + k, TAG_CTL, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (o[0] > acc[0])
                acc[0] = o[0];
            acc[1] += o[1];
        }
    }
    *mx = acc[0];
    *sum = acc[1];
}

/* The step MPI_Wtime really takes: the least nonzero difference between successive
 * readings over up to 10 ms (MPI_Wtick is what the library claims; MVAPICH2 2.3.7 claims
 * less than the 2^-22 s it resolves). On a fine clock this is the cost of a reading. */
double timer_step(void)
{
    double best = 0, start = MPI_Wtime(), prev = start, now;
    int steps = 0;
    /* bounded in readings too: a simulated clock (SMPI) may never move; then 0, no batches */
    for (long i = 0; i < 1000000 && steps < 1000 && (now = MPI_Wtime()) - start < 0.01; i++) {
        if (now != prev) {
            if (best == 0 || now - prev < best)
                best = now - prev;
            prev = now;
            steps++;
        }
    }
    return best;
}

/* binomial-tree broadcast of an int from rank 0 */
int ctl_bcast(int v)
{
    int top = 1;
    while (top < g_size)
        top <<= 1;
    for (int k = top >> 1; k >= 1; k >>= 1) {
        if (g_rank % (2 * k) == 0 && g_rank + k < g_size)
            MPI_Send(&v, 1, MPI_INT, g_rank + k, TAG_CTL, MPI_COMM_WORLD);
        else if (g_rank % (2 * k) == k)
            MPI_Recv(&v, 1, MPI_INT, g_rank - k, TAG_CTL, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    return v;
}

/* a JSON string on standard output (rank 0's events) */
void put_json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}
