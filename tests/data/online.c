/* An application for tune online: CALLS (argv[1]) steps, each a stretch of work whose
 * length depends on the rank (a known imbalance: rank r works r * IMB microseconds,
 * argv[2]), then an MPI_Allreduce of 8 doubles and one of 8192 doubles on MPI_COMM_WORLD,
 * an MPI_Bcast of 4 KiB from rank 0, and every tenth step an MPI_Allreduce with a
 * user-defined operation (which the layer must pass through). Rare: an MPI_Reduce of 64
 * doubles, 20 calls in all (a group too small to explore). Rank 0 prints a checksum of
 * every result: integer-valued doubles, so any algorithm's order of additions gives the
 * same bits, and any wrong result changes it. argv[3] "multiple": MPI_THREAD_MULTIPLE;
 * "abort": rank 1 calls MPI_Abort halfway (an application that fails mid-run); "blocks":
 * each step also an MPI_Allgather in place of 16 ints a rank, an MPI_Alltoall of 8 ints to
 * each rank, and an MPI_Allreduce of 16 doubles on its half of the ranks (even and odd
 * ranks: a sub-communicator with a layout of its own). */
#define _POSIX_C_SOURCE 199309L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void work_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static void add_ints(void *in, void *inout, int *len, MPI_Datatype *t)
{
    (void)t;
    for (int i = 0; i < *len; i++)
        ((double *)inout)[i] += ((double *)in)[i];
}

int main(int argc, char **argv)
{
    int rank, size, calls = argc > 1 ? atoi(argv[1]) : 400;
    long imb = argc > 2 ? atol(argv[2]) : 50;
    static double small[8], rsmall[8], big[8192], rbig[8192], r64[64], rr64[64];
    static char block[4096];
    int *gath, *sendv, *recvv;
    int blocks = argc > 3 && !strcmp(argv[3], "blocks");
    double half[16], rhalf[16];
    MPI_Comm halves;
    double sum = 0;
    MPI_Op mine;

    if (argc > 3 && !strcmp(argv[3], "multiple")) {
        int got;
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &got);
    } else {
        MPI_Init(&argc, &argv);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Op_create(add_ints, 1, &mine);
    gath = malloc((size_t)size * 16 * sizeof *gath);
    sendv = malloc((size_t)size * 8 * sizeof *sendv);
    recvv = malloc((size_t)size * 8 * sizeof *recvv);
    if (!gath || !sendv || !recvv)
        MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &halves);
    for (int i = 0; i < calls; i++) {
        if (argc > 3 && !strcmp(argv[3], "abort") && i == calls / 2 && rank == 1)
            MPI_Abort(MPI_COMM_WORLD, 7);
        work_us(imb * rank);
        for (int j = 0; j < 8; j++)
            small[j] = (double)((rank + 1) * (j + i % 7));
        for (int j = 0; j < 8192; j++)
            big[j] = (double)((rank + j + i) % 13);
        MPI_Allreduce(small, rsmall, 8, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(big, rbig, 8192, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        if (rank == 0)
            memset(block, (i % 251) + 1, sizeof block);
        MPI_Bcast(block, (int)sizeof block, MPI_CHAR, 0, MPI_COMM_WORLD);
        sum += rsmall[i % 8] + rbig[(i * 31) % 8192] + block[i % 4096];
        if (i % 10 == 0) {
            MPI_Allreduce(small, rsmall, 8, MPI_DOUBLE, mine, MPI_COMM_WORLD);
            sum += rsmall[3];
        }
        if (blocks) {
            for (int j = 0; j < 16; j++)
                gath[rank * 16 + j] = rank * 100 + j + i;
            MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, gath, 16, MPI_INT, MPI_COMM_WORLD);
            for (int j = 0; j < size * 8; j++)
                sendv[j] = rank * 1000 + j + i;
            MPI_Alltoall(sendv, 8, MPI_INT, recvv, 8, MPI_INT, MPI_COMM_WORLD);
            for (int j = 0; j < 16; j++)
                half[j] = (double)(rank + j + i % 5);
            MPI_Allreduce(half, rhalf, 16, MPI_DOUBLE, MPI_SUM, halves);
            sum += gath[(i * 7) % (size * 16)] + recvv[(i * 3) % (size * 8)] + rhalf[i % 16];
        }
        if (i < 20) {
            for (int j = 0; j < 64; j++)
                r64[j] = (double)(rank * j);
            MPI_Reduce(r64, rr64, 64, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
            if (rank == 0)
                sum += rr64[i];
        }
    }
    if (rank == 0)
        printf("checksum %.17g\n", sum);
    MPI_Op_free(&mine);
    free(gath);
    free(sendv);
    free(recvv);
    MPI_Comm_free(&halves);
    MPI_Finalize();
    return 0;
}
