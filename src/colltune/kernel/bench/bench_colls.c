/* The collectives collbench measures, behind one table (as ReproMPI dispatches): each
 * entry says how long its buffers are, fills its inputs, calls the collective and checks
 * its output. A collective is one line in COLLS and the functions it names. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

enum { ONE, BLOCK, ALL }; /* a buffer's length: nothing to hold, a block, a block per rank */

struct coll_ops {
    const char *name;
    int reduction; /* sums of small integers in the plan's datatype: checked bit for bit */
    int slen, rlen; /* ONE | BLOCK | ALL */
    void (*fill)(bufs_t *b);
    int (*call)(bufs_t *b, MPI_Comm comm);
    int (*check)(const bufs_t *b);
};

/* the element types a reduction can sum (the plan's `datatype`). A library decides by the
 * bytes a call moves and by how many elements it holds, so a reduction of 8 one-byte
 * integers is another call than one of one double: OSU 7.4 sums chars unless told
 * otherwise, an application whatever it sums. "char" is MPI_UNSIGNED_CHAR: the same size
 * as MPI_CHAR (which MPI does not define sums for), and its sums wrap modulo 256, defined
 * in C and so checkable. Sums of small integers stay exact in float up to 2^24. */
typedef struct {
    const char *name;
    MPI_Datatype type;
    int size;
} dtype_t;

static dtype_t DTYPES[4];
static int g_dtype; /* index in DTYPES: the plan's, double unless it says otherwise */

static void dtypes_init(void)
{
    /* MPI's handles are not constant expressions in every library: set at run time */
    DTYPES[0] = (dtype_t){"double", MPI_DOUBLE, (int)sizeof(double)};
    DTYPES[1] = (dtype_t){"float", MPI_FLOAT, (int)sizeof(float)};
    DTYPES[2] = (dtype_t){"int", MPI_INT, (int)sizeof(int)};
    DTYPES[3] = (dtype_t){"char", MPI_UNSIGNED_CHAR, 1};
}

int coll_set_datatype(const char *name)
{
    dtypes_init();
    for (int i = 0; i < 4; i++)
        if (!strcmp(DTYPES[i].name, name)) {
            g_dtype = i;
            return DTYPES[i].size;
        }
    return -1;
}

static MPI_Datatype dt(void)
{
    if (!DTYPES[0].name)
        dtypes_init();
    return DTYPES[g_dtype].type;
}

static int dt_size(void)
{
    if (!DTYPES[0].name)
        dtypes_init();
    return DTYPES[g_dtype].size;
}

/* element i of a reduction's buffer, read or written in the plan's datatype */
static double get_elem(const void *buf, long long i)
{
    switch (g_dtype) {
    case 1:
        return ((const float *)buf)[i];
    case 2:
        return ((const int *)buf)[i];
    case 3:
        return ((const unsigned char *)buf)[i];
    default:
        return ((const double *)buf)[i];
    }
}

static void set_elem(void *buf, long long i, long long v)
{
    switch (g_dtype) {
    case 1:
        ((float *)buf)[i] = (float)v;
        break;
    case 2:
        ((int *)buf)[i] = (int)v;
        break;
    case 3:
        ((unsigned char *)buf)[i] = (unsigned char)(v & 0xff);
        break;
    default:
        ((double *)buf)[i] = (double)v;
    }
}

/* what a sum `v` of small integers reads as in the plan's datatype (chars wrap) */
static double as_elem(long long v)
{
    return g_dtype == 3 ? (double)(v & 0xff) : (double)v;
}

static unsigned char pat(int a, int b, long long i)
{
    return (unsigned char)((a * 31 + b * 7 + i) & 0xff);
}

/* ---- inputs: a rank-dependent pattern, outputs cleared ---- */

static void fill_nothing(bufs_t *b)
{
    (void)b;
}

static void fill_bcast(bufs_t *b)
{
    unsigned char *s = b->sbuf;
    for (long long i = 0; i < b->size; i++)
        s[i] = b->r == 0 ? pat(1, 2, i) : 0;
}

/* outputs cleared to -1 (255 in a char): an output left unwritten reads wrong at most
 * elements, whatever the datatype */
static void fill_sum(bufs_t *b)
{
    for (long long i = 0; i < b->count; i++) {
        set_elem(b->sbuf, i, b->r + 1 + i % 13);
        set_elem(b->rbuf, i, -1);
    }
}

static void fill_sum_scatter(bufs_t *b)
{
    for (long long i = 0; i < (long long)b->count * b->p; i++)
        set_elem(b->sbuf, i, b->r + 1 + i % 13);
    for (long long i = 0; i < b->count; i++)
        set_elem(b->rbuf, i, -1);
}

static void fill_gather(bufs_t *b)
{
    unsigned char *s = b->sbuf;
    for (long long i = 0; i < b->size; i++)
        s[i] = pat(b->r, 0, i);
    memset(b->rbuf, 0, (size_t)(b->size * b->p));
}

static void fill_scatter(bufs_t *b)
{
    unsigned char *s = b->sbuf;
    long long n = b->size;
    for (long long d = 0; d < b->p; d++)
        for (long long i = 0; i < n; i++)
            s[d * n + i] = b->r == 0 ? pat((int)d, 3, i) : 0;
    memset(b->rbuf, 0, (size_t)n);
}

static void fill_alltoall(bufs_t *b)
{
    unsigned char *s = b->sbuf;
    long long n = b->size;
    for (long long d = 0; d < b->p; d++)
        for (long long i = 0; i < n; i++)
            s[d * n + i] = pat(b->r, (int)d, i);
    memset(b->rbuf, 0, (size_t)(n * b->p));
}

/* ---- the calls ---- */

static int call_barrier(bufs_t *b, MPI_Comm comm)
{
    (void)b;
    return MPI_Barrier(comm);
}

static int call_bcast(bufs_t *b, MPI_Comm comm)
{
    return MPI_Bcast(b->sbuf, b->count, MPI_BYTE, 0, comm);
}

static int call_reduce(bufs_t *b, MPI_Comm comm)
{
    return MPI_Reduce(b->sbuf, b->rbuf, b->count, dt(), MPI_SUM, 0, comm);
}

static int call_allreduce(bufs_t *b, MPI_Comm comm)
{
    return MPI_Allreduce(b->sbuf, b->rbuf, b->count, dt(), MPI_SUM, comm);
}

static int call_scan(bufs_t *b, MPI_Comm comm)
{
    return MPI_Scan(b->sbuf, b->rbuf, b->count, dt(), MPI_SUM, comm);
}

static int call_exscan(bufs_t *b, MPI_Comm comm)
{
    return MPI_Exscan(b->sbuf, b->rbuf, b->count, dt(), MPI_SUM, comm);
}

static int call_reduce_scatter(bufs_t *b, MPI_Comm comm)
{
    return MPI_Reduce_scatter(b->sbuf, b->rbuf, b->counts, dt(), MPI_SUM, comm);
}

static int call_reduce_scatter_block(bufs_t *b, MPI_Comm comm)
{
    return MPI_Reduce_scatter_block(b->sbuf, b->rbuf, b->count, dt(), MPI_SUM, comm);
}

static int call_allgather(bufs_t *b, MPI_Comm comm)
{
    return MPI_Allgather(b->sbuf, b->count, MPI_BYTE, b->rbuf, b->count, MPI_BYTE, comm);
}

static int call_allgatherv(bufs_t *b, MPI_Comm comm)
{
    return MPI_Allgatherv(b->sbuf, b->count, MPI_BYTE, b->rbuf, b->counts, b->displs,
                          MPI_BYTE, comm);
}

static int call_gather(bufs_t *b, MPI_Comm comm)
{
    return MPI_Gather(b->sbuf, b->count, MPI_BYTE, b->rbuf, b->count, MPI_BYTE, 0, comm);
}

static int call_scatter(bufs_t *b, MPI_Comm comm)
{
    return MPI_Scatter(b->sbuf, b->count, MPI_BYTE, b->rbuf, b->count, MPI_BYTE, 0, comm);
}

static int call_alltoall(bufs_t *b, MPI_Comm comm)
{
    return MPI_Alltoall(b->sbuf, b->count, MPI_BYTE, b->rbuf, b->count, MPI_BYTE, comm);
}

static int call_alltoallv(bufs_t *b, MPI_Comm comm)
{
    return MPI_Alltoallv(b->sbuf, b->counts, b->displs, MPI_BYTE, b->rbuf, b->counts,
                         b->displs, MPI_BYTE, comm);
}

/* ---- the checks: 1 when this rank's output is what the collective must produce ---- */

static int check_nothing(const bufs_t *b)
{
    (void)b;
    return 1;
}

static int check_bcast(const bufs_t *b)
{
    const unsigned char *s = b->sbuf;
    for (long long i = 0; i < b->size; i++)
        if (s[i] != pat(1, 2, i))
            return 0;
    return 1;
}

/* the sum of ranks 0..upto-1's inputs (element i of rank q is q + 1 + i % 13) */
static int check_sum_upto(const bufs_t *b, long long upto, long long first)
{
    for (long long i = 0; i < b->count; i++)
        if (get_elem(b->rbuf, i) != as_elem(upto * (upto + 1) / 2 + upto * ((first + i) % 13)))
            return 0;
    return 1;
}

static int check_allreduce(const bufs_t *b)
{
    return check_sum_upto(b, b->p, 0);
}

static int check_reduce(const bufs_t *b)
{
    return b->r != 0 || check_allreduce(b);
}

static int check_scan(const bufs_t *b)
{
    return check_sum_upto(b, b->r + 1, 0);
}

static int check_exscan(const bufs_t *b)
{
    return b->r == 0 || check_sum_upto(b, b->r, 0); /* rank 0's buffer is undefined */
}

static int check_sum_scatter(const bufs_t *b)
{
    return check_sum_upto(b, b->p, (long long)b->r * b->count);
}

static int check_allgather(const bufs_t *b)
{
    const unsigned char *rb = b->rbuf;
    long long n = b->size;
    for (long long q = 0; q < b->p; q++)
        for (long long i = 0; i < n; i++)
            if (rb[q * n + i] != pat((int)q, 0, i))
                return 0;
    return 1;
}

static int check_gather(const bufs_t *b)
{
    return b->r != 0 || check_allgather(b);
}

static int check_scatter(const bufs_t *b)
{
    const unsigned char *rb = b->rbuf;
    for (long long i = 0; i < b->size; i++)
        if (rb[i] != pat(b->r, 3, i))
            return 0;
    return 1;
}

static int check_alltoall(const bufs_t *b)
{
    const unsigned char *rb = b->rbuf;
    long long n = b->size;
    for (long long q = 0; q < b->p; q++)
        for (long long i = 0; i < n; i++)
            if (rb[q * n + i] != pat((int)q, b->r, i))
                return 0;
    return 1;
}

static const coll_ops_t COLLS[] = {
    {"allgather", 0, BLOCK, ALL, fill_gather, call_allgather, check_allgather},
    {"allgatherv", 0, BLOCK, ALL, fill_gather, call_allgatherv, check_allgather},
    {"allreduce", 1, BLOCK, BLOCK, fill_sum, call_allreduce, check_allreduce},
    {"alltoall", 0, ALL, ALL, fill_alltoall, call_alltoall, check_alltoall},
    {"alltoallv", 0, ALL, ALL, fill_alltoall, call_alltoallv, check_alltoall},
    {"barrier", 0, ONE, ONE, fill_nothing, call_barrier, check_nothing},
    {"bcast", 0, BLOCK, ONE, fill_bcast, call_bcast, check_bcast},
    {"exscan", 1, BLOCK, BLOCK, fill_sum, call_exscan, check_exscan},
    {"gather", 0, BLOCK, ALL, fill_gather, call_gather, check_gather},
    {"reduce", 1, BLOCK, BLOCK, fill_sum, call_reduce, check_reduce},
    {"reduce_scatter", 1, ALL, BLOCK, fill_sum_scatter, call_reduce_scatter,
     check_sum_scatter},
    {"reduce_scatter_block", 1, ALL, BLOCK, fill_sum_scatter, call_reduce_scatter_block,
     check_sum_scatter},
    {"scan", 1, BLOCK, BLOCK, fill_sum, call_scan, check_scan},
    {"scatter", 0, ALL, BLOCK, fill_scatter, call_scatter, check_scatter},
};

const coll_ops_t *coll_find(const char *name)
{
    for (size_t i = 0; i < sizeof(COLLS) / sizeof(COLLS[0]); i++)
        if (!strcmp(COLLS[i].name, name))
            return &COLLS[i];
    return NULL;
}

int coll_reduction(const coll_ops_t *ops)
{
    return ops->reduction ? dt_size() : 0;
}

static void *buffer(int len, long long size, int p, int reduction)
{
    size_t blk = (size_t)size, pad = reduction ? (size_t)dt_size() : 1;
    return malloc((len == ONE ? 0 : len == BLOCK ? blk : blk * (size_t)p) + pad);
}

int bufs_alloc(bufs_t *b, const coll_ops_t *ops, long long size, MPI_Comm comm)
{
    memset(b, 0, sizeof(*b));
    b->ops = ops;
    b->size = size;
    b->idle = comm == MPI_COMM_NULL;
    b->p = 1;
    if (!b->idle) {
        MPI_Comm_size(comm, &b->p);
        MPI_Comm_rank(comm, &b->r);
    }
    b->count = (int)(ops->reduction ? size / dt_size() : size);
    b->counts = calloc((size_t)b->p, sizeof(int));
    b->displs = calloc((size_t)b->p, sizeof(int));
    if (!b->counts || !b->displs)
        return -1;
    for (int i = 0; i < b->p; i++) {
        b->counts[i] = b->count;
        b->displs[i] = i * b->count;
    }
    b->sbuf = buffer(ops->slen, size, b->p, ops->reduction);
    b->rbuf = buffer(ops->rlen, size, b->p, ops->reduction);
    return (b->sbuf && b->rbuf) ? 0 : -1;
}

void bufs_free(bufs_t *b)
{
    free(b->sbuf);
    free(b->rbuf);
    free(b->counts);
    free(b->displs);
}

void bufs_fill(bufs_t *b)
{
    b->ops->fill(b);
}

int coll_call(bufs_t *b, MPI_Comm comm)
{
    return b->idle ? MPI_SUCCESS : b->ops->call(b, comm);
}

int bufs_check(const bufs_t *b)
{
    return b->idle || b->ops->check(b);
}

void corrupt_output(bufs_t *b)
{
    if (b->idle)
        return;
    if (!strcmp(b->ops->name, "bcast") && b->r != 0 && b->size > 0)
        ((unsigned char *)b->sbuf)[0] ^= 0xff;
    else if (b->ops->reduction && b->count > 0)
        set_elem(b->rbuf, 0, (long long)get_elem(b->rbuf, 0) + 1);
    else if (b->size > 0)
        ((unsigned char *)b->rbuf)[0] ^= 0xff;
}
