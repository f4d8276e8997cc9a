/*
 * apploop: a collective called the way an application's time-step loop calls it, as an
 * independent check of the kernel (bench/agreement_bench.py).
 *
 * Nothing of the kernel is shared: MPI_COMM_WORLD (no duplicate), the library's own
 * MPI_Barrier once before the loop, the algorithm chosen at launch (environment), no MPI_T.
 * Per size: `iters` calls back to back, timed as a whole on every rank; rank 0 prints the
 * slowest rank's time per call and the mean over ranks, one JSON line per size.
 *
 * Usage: apploop COLLECTIVE ITERS SIZE [SIZE...]   (per-rank bytes, as OSU counts them)
 *
 * With APPLOOP_BARRIER=1 in the environment it times each call alone and calls
 * MPI_Barrier after it, as OSU's collective benchmarks do: an experiment that tells
 * whether a difference from OSU comes from that pattern.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int call(const char *coll, void *s, void *r, int n, MPI_Comm comm)
{
    if (!strcmp(coll, "allreduce"))
        return MPI_Allreduce(s, r, n / 8, MPI_DOUBLE, MPI_SUM, comm);
    if (!strcmp(coll, "reduce"))
        return MPI_Reduce(s, r, n / 8, MPI_DOUBLE, MPI_SUM, 0, comm);
    if (!strcmp(coll, "bcast"))
        return MPI_Bcast(s, n, MPI_BYTE, 0, comm);
    if (!strcmp(coll, "gather"))
        return MPI_Gather(s, n, MPI_BYTE, r, n, MPI_BYTE, 0, comm);
    if (!strcmp(coll, "allgather"))
        return MPI_Allgather(s, n, MPI_BYTE, r, n, MPI_BYTE, comm);
    if (!strcmp(coll, "alltoall"))
        return MPI_Alltoall(s, n, MPI_BYTE, r, n, MPI_BYTE, comm);
    return MPI_ERR_OTHER;
}

int main(int argc, char **argv)
{
    int rank, size, iters;
    const char *osu_style = getenv("APPLOOP_BARRIER");
    int barrier = osu_style && osu_style[0] == '1';
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 4) {
        if (rank == 0)
            fprintf(stderr, "usage: apploop COLLECTIVE ITERS SIZE...\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    iters = atoi(argv[2]);
    for (int a = 3; a < argc; a++) {
        int n = atoi(argv[a]);
        /* reductions count doubles: round up like the kernel does */
        int bytes = n < 8 ? 8 : (n + 7) / 8 * 8;
        size_t big = (size_t)bytes * (size_t)size;
        char *s = calloc(big, 1), *r = calloc(big, 1);
        double t0, local, mx, sum;
        if (!s || !r)
            MPI_Abort(MPI_COMM_WORLD, 3);
        /* written, not just allocated: untouched calloc pages all map to the zero page,
         * which made reading them unrealistically cheap (reduce at 1 MiB read 3x faster) */
        memset(r, 1, big);
        memset(s, 1, big);
        /* small integers held in doubles, as the kernel: no denormals, no overflow */
        for (size_t i = 0; i < big / sizeof(double); i++)
            ((double *)(void *)s)[i] = (double)(rank + 1 + (int)(i % 13));
        if (strcmp(argv[1], "allreduce") && strcmp(argv[1], "reduce"))
            bytes = n;
        for (int w = 0; w < 10; w++)
            call(argv[1], s, r, bytes, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        local = 0;
        t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++) {
            double t1 = MPI_Wtime();
            if (call(argv[1], s, r, bytes, MPI_COMM_WORLD) != MPI_SUCCESS)
                MPI_Abort(MPI_COMM_WORLD, 4);
            if (barrier) {
                local += MPI_Wtime() - t1;
                MPI_Barrier(MPI_COMM_WORLD);
            }
        }
        local = (barrier ? local : MPI_Wtime() - t0) / iters;
        MPI_Reduce(&local, &mx, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        MPI_Reduce(&local, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0)
            printf("{\"size\":%d,\"completion\":%.9g,\"mean\":%.9g}\n", n, mx, sum / size);
        fflush(stdout);
        free(s);
        free(r);
    }
    MPI_Finalize();
    return 0;
}
