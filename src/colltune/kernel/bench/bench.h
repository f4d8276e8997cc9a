/* collbench's shared declarations: the plan, the collectives' table, synchronisation,
 * MPI_T and measuring, one source file each (collbench.c says what the kernel does). */
#ifndef COLLTUNE_BENCH_H
#define COLLTUNE_BENCH_H

#include <mpi.h>
#include <stddef.h>

#define MAX_NAME 256
#define MAX_ASSIGN 16
#define TAG_SYNC 30001
#define TAG_CTL 30002

#define TIMING_ISOLATED 1
#define TIMING_B2B 2
#define MAX_ARRIVAL_ROWS 64   /* rows of an arrival pattern a plan may carry */
#define MAX_ARRIVAL_RANKS 512 /* delays a row (a plan line holds 8 KiB) */
#define MAX_ARRIVAL_DELAY 10.0 /* seconds: a late rank's wait, at most */
#define LOOP_STRETCHES 2 /* per point, with `loop N` in the plan (bench_loop.c) */
enum { OBJ_COMPLETION, OBJ_MEAN, OBJ_ROOT, NOBJ };
extern const char *const mode_names[4]; /* isolated, back-to-back, loop, start */
extern const char *const obj_names[NOBJ];

/* SimGrid SMPI implements no MPI_T control variables: a plan that asks to write variables
 * is rejected there. Its configurations are chosen by name instead (a config's `select`),
 * inside the running simulation through SimGrid's own configuration (bench_mpit.c), or
 * at launch (smpirun --cfg=smpi/<coll>:<name>) where that is not available. */
#if defined(SMPI_H)
#define HAVE_MPIT_CVARS 0
#else
#define HAVE_MPIT_CVARS 1
#endif

/* ---- the plan (bench_plan.c) ---- */

typedef struct {
    char name[MAX_NAME];
    long long value;
} assign_t;

typedef struct {
    int cid;
    int nassign;
    assign_t assign[MAX_ASSIGN];
    int group; /* ranks per communicator (consecutive ranks); 0: MPI_COMM_WORLD's size */
    int baseline; /* the library default for its communicator: the cutoff's reference */
    char select[64]; /* SMPI: the algorithm's name in SimGrid's table ("" none) */
} config_t;

typedef struct {
    int cid;
    long long size;
} point_t;

typedef struct {
    char collective[64];
    int warmup;
    int min_reps;
    int max_reps;
    double rel_ci;
    double point_time;
    double floor_time; /* > 0: past this many seconds min_reps is no floor (0: see top) */
    unsigned long long seed;
    int dup_always; /* 0: configurations without variables run on MPI_COMM_WORLD */
    int ordered;    /* 1: a configuration's sizes smallest first, not shuffled */
    char pvars[64];  /* count rank 0's performance variables whose name starts so */
    int timing;      /* TIMING_* bits */
    int min_ticks;   /* a timed stretch lasts this many timer steps at least (0: off) */
    int window;      /* calls per back-to-back window, at most */
    double window_time; /* ... and fewer where the window would take longer (seconds) */
    int loop;        /* > 0: also LOOP_STRETCHES free-running stretches of this many calls */
    double loop_time; /* ... and fewer where a stretch would take longer (seconds) */
    int start;       /* > 0: also the point's first calls from its first, up to this many */
    double start_time; /* ... fewer once they have taken this long (seconds) */
    int objective;   /* OBJ_*: which statistic drives the stopping rule and "samples" */
    char datatype[16]; /* what reductions sum: double, float, int or char */
    double cutoff;   /* > 0: stop points this much slower than the baseline (see top) */
    /* arrival replay: `narrival` rows of `arrival_ranks` delays (seconds, by rank in the
     * measured communicator); an isolated repetition n waits row n % narrival's delay on
     * each rank before its call and is timed from that rank's own entry */
    int narrival, arrival_ranks;
    double *arrival;
    int nconfig;
    config_t *configs;
    int npoint;
    point_t *points;
} plan_t;

int read_plan(const char *path, plan_t *plan);
void rng_seed(unsigned long long seed);
void shuffle_ints(int *a, int n);

/* ---- synchronisation and control, point to point on MPI_COMM_WORLD (bench_sync.c) ---- */

extern int g_rank, g_size;
extern const char *g_prog; /* the program's name in its error messages */
void die(const char *msg);
void sync_barrier(void);
double ctl_max(double v);
void ctl_max_sum(double v, double *mx, double *sum);
int ctl_bcast(int v);
double timer_step(void);
void put_json_string(const char *s);

/* ---- MPI_T control and performance variables (bench_mpit.c) ---- */

void cvars_init(const plan_t *plan);
int cvars_apply(const config_t *cfg, char *why, size_t whylen);
/* SMPI: the config's algorithm selected by name in the running simulation */
int select_apply(const char *coll, const config_t *cfg, char *why, size_t whylen);
void cvars_close(void);
void pvars_init(const char *prefix);
void pvars_mark(void);
void pvars_print(void);
void pvars_close(void);
int list_cvars(const char *text);

/* ---- the collectives: buffers, the call, its check (bench_colls.c) ---- */

/* `size` is the per-rank block in bytes (the count a caller passes times the datatype
 * size). Reductions sum small integers in the plan's datatype (double unless it says
 * float, int or char), so sums are exact and can be checked bit for bit; the rest use
 * MPI_BYTE. */
typedef struct coll_ops coll_ops_t;
typedef struct {
    const coll_ops_t *ops;
    long long size;
    int p, r;  /* the communicator's size and this rank in it */
    int idle;  /* in no group (the ranks left over when groups do not divide the job) */
    int count; /* elements per block */
    void *sbuf, *rbuf;
    int *counts, *displs;
} bufs_t;

const coll_ops_t *coll_find(const char *name);
int coll_reduction(const coll_ops_t *ops); /* > 0: sizes count elements this long */
int coll_set_datatype(const char *name);   /* a reduction's element size, -1: unknown */
int bufs_alloc(bufs_t *b, const coll_ops_t *ops, long long size, MPI_Comm comm);
void bufs_free(bufs_t *b);
void bufs_fill(bufs_t *b);          /* rank-dependent inputs, cleared outputs */
int coll_call(bufs_t *b, MPI_Comm comm);
int bufs_check(const bufs_t *b);    /* 1: this rank's output is what it must be */
void corrupt_output(bufs_t *b);     /* test-only: a wrong answer */

/* ---- measuring one point (bench_measure.c, its loop: bench_loop.c) ---- */

typedef struct {
    char kind[16];
    char name[MAX_NAME];
    long long value;
} fault_t;

extern fault_t g_fault; /* COLLTUNE_TEST_FAULT, test-only */
extern double g_step;   /* what MPI_Wtime resolves (timer_step), slowest rank's */
int fault_hits(const config_t *cfg, const char *kind);
/* a slow point prints "tick" events this often: the launcher's watchdog is for hangs */
#define TICK_SECONDS 2.0
void tick_if_due(int cid, long long size, int n, double *t_tick);
/* `call` makes one call (the measuring point's, test-only faults included) */
int measure_loop(const plan_t *plan, bufs_t *b, MPI_Comm comm,
                 int (*call)(bufs_t *, MPI_Comm), double per_call, int active, int cid,
                 long long size, double out[NOBJ][LOOP_STRETCHES]);
int measure_start(const plan_t *plan, bufs_t *b, MPI_Comm comm,
                  int (*call)(bufs_t *, MPI_Comm), double first, int active, int cid,
                  long long size, double out[NOBJ]);
void measure_point(const plan_t *plan, const coll_ops_t *ops, const config_t *cfg,
                   long long size, MPI_Comm comm, int active);
void refs_free(void);

#endif
