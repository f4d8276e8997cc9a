/* collonline's shared declarations (collonline.c says what the layer does): the wrapped
 * collectives, one call's routing and timing, the start and end. Hidden, as collprof's:
 * a preloaded library's internal names must never bind to an application's own. */
#ifndef COLLTUNE_ONLINE_H
#define COLLTUNE_ONLINE_H

#include <mpi.h>
#include <stddef.h>
#include <stdio.h>

#pragma GCC visibility push(hidden)

enum { O_ALLREDUCE, O_BCAST, O_REDUCE, O_ALLGATHER, O_ALLTOALL, O_BARRIER, N_OCOLL };

#define MAXV 6 /* control variables a candidate writes */
#define MAXC 40      /* configurations of a collective, the default (0) included */
#define NBUCKET 48   /* size buckets: floor(log2(bytes)) + 1 */
#define MAXB 256     /* calls in a batch at most */
#define KEEP 512     /* times kept per configuration and group */
#define MAXSKIP 16384 /* skip lines: the store's, and the cost model's per size and bucket */
#define MAXPRIOR 8192 /* prior lines: what earlier runs of the command gave a candidate */

/* one candidate of the plan */
typedef struct {
    int id; /* the plan's: the algorithm's number with the library's own parameters */
    long long below; /* a segment size: only tried on calls of more bytes (0: always) */
    int nvar;
    char name[MAXV][96];
    long long value[MAXV];
    /* "call": the handles, made at the first call (0: not yet, 1: made, -1: refused) */
    int ready;
    MPI_T_cvar_handle h[MAXV];
    MPI_Datatype type[MAXV];
    int idx[MAXV]; /* the library's own index of each variable (the plan's `vars`) */
    long long old[MAXV];
} cand_t;

typedef struct group_s group_t;
typedef struct comm_st comm_st;

typedef struct {
    int c, id, np, bucket;
} skip_t;

/* what earlier runs of the same command gave a candidate in a group of that communicator
 * size and bucket: its calls, and its median over the library's choice (each launch's
 * own ratio, combined: two launches' times are never compared) */
typedef struct {
    int c, id, np, bucket, calls;
    double ratio;
} prior_t;

/* the finalist of an ended halving whose gain the earlier runs could not yet confirm */
typedef skip_t final_t;

typedef struct {
    double share, drop, flush;
    long long min_calls;
    int batch, samples, first, per_call;
    char vars[32]; /* the library's own variable API, instead of MPI_T ("": MPI_T) */
    cand_t cand[N_OCOLL][MAXC]; /* [0]: the library's own choice */
    int ncand[N_OCOLL];
    skip_t skip[MAXSKIP];
    int nskip;
    prior_t prior[MAXPRIOR];
    int nprior;
    final_t final[NBUCKET * N_OCOLL * 4];
    int nfinal;
    char dir[4096];
} plan_t;

struct group_s {
    long long calls, bytes;
    int current;                  /* what runs outside exploration */
    int done;                     /* exploration over: `current` for the rest of the run */
    long long slot;               /* exploration calls scheduled */
    int target;                   /* this round's calls per candidate still in question */
    int sched[MAXC], dropped[MAXC], pruned[MAXC], wrong[MAXC];
    int halved[MAXC];             /* out at a round's end: not among the faster half */
    int unfit[MAXC];              /* never tried here: its segment holds the whole call */
    int n[MAXC];                  /* times kept per configuration */
    int pn[MAXC];                 /* calls earlier runs gave it (the plan's `prior`) ... */
    double pr[MAXC];              /* ... and its median over the library's choice there */
    double *t[MAXC];
    double bt[MAXB];              /* the batch: this rank's time per call ... */
    int bc[MAXB];                 /* ... and the configuration it ran */
    int nb;
    long long used[MAXC];         /* calls per configuration */
    unsigned long long digest;    /* of the sequence of configurations */
};

struct comm_st {
    MPI_Comm comm, priv;
    int size, rank, seq, world_rank;
    int nodes, ppn; /* its layout (rank 0's): hosts, and its ranks on the fullest one */
    int lead, lead_seq; /* its name: its rank 0's world rank, and that rank's `seq` of it */
    MPI_Comm cand[N_OCOLL][MAXC];
    int made[N_OCOLL][MAXC];
    group_t *g[N_OCOLL][NBUCKET];
    struct comm_st *next;
};

extern plan_t P;
extern const char *const NAMES[N_OCOLL];
extern comm_st *g_comms; /* every communicator the application called a collective on */

/* one call: its communicator's state, its group, collective and configuration */
typedef struct {
    comm_st *s;
    group_t *g;
    int c, k;
    int written; /* "call": the candidate's variables are written, restore after */
    int check;   /* a candidate's first call in its group: checked (online_check.c) */
    int warm;    /* one of its group's first min_calls: the library's choice, not timed */
    double entry; /* when the wrapper was entered (0: the layer is off) */
} call_t;

/* a checked call's copy of its input, and the library's own answer to compare with */
typedef struct {
    void *in, *ref;
} check_t;

extern int in_fortran; /* a Fortran entry routed this call: the C wrappers pass through */
/* seconds this rank spent in the layer's own work (everything its wrappers did but the
 * application's calls: MPI_T, duplicates, reductions, checks, files), in its schedule */
extern double g_overhead;

/* the communicator this call runs on: the application's, or a candidate's duplicate */
MPI_Comm route(int c, MPI_Comm comm, long long bytes, int ok, call_t *call);
/* a candidate refused this call (error `rc`): dropped; 1: make the call again */
int refused_call(call_t *call, int rc);
/* "call": the library's own variables back, right after the candidate's call (before a
 * check's reference call, which must run the library's choice) */
void restore(call_t *call);
void timed(call_t *call, double t0, double t1); /* its time, into the group's batch */
int builtin_op(MPI_Op op);
long long tbytes(int count, MPI_Datatype t);
void start(void);                 /* after the library's MPI_Init */
void refuse_threads(int required); /* MPI_THREAD_MULTIPLE stops the job */
void finish(void);                /* before the library's MPI_Finalize; once */
void fail(const char *why);       /* said, and the job aborted */
/* online_state.c: the plan's and the directory's paths, taken out of the environment at
 * MPI_Init with the layer out of LD_PRELOAD (take_settings, once) */
extern char g_plan_path[4096], g_dir[4096];
void take_settings(void);
/* online_files.c: this process claims world rank `rank`'s place in g_dir (0: another
 * did, it stays inert), and records the library it runs (library.RANK) */
int claim_rank(int rank);
void write_library(void);

void wrong_answer(call_t *call); /* a check found it wrong: dropped for the group, said */
/* online_halving.c: a reduced batch's times kept, and the halving's next round */
void keep_batch(group_t *g, int ncand);

/* online_plan.c: the plan read (COLLTUNE_ONLINE_PLAN), and a new group's candidates: those
 * the plan skips for its communicator size and bucket, and what earlier runs gave the
 * others */
void read_plan(const char *path);
void prune(group_t *g, int c, int np, int bucket);

/* online_check.c: a candidate's first call checked against the library's choice. Whether
 * a type is plain bytes (predefined, no gaps), and a reduction checkable; `check_prepare`:
 * every rank agrees (`can`: this one can) and keeps a copy of its `in_n` input bytes, 1 if
 * checked; after the reference call into ck->ref, `check_verdict` compares `n` bytes of
 * `out` (NULL: nothing here), agreed on every rank */
int plain_type(MPI_Datatype t);
int checkable_op(MPI_Datatype t, MPI_Op op);
int check_prepare(call_t *call, int can, const void *in, size_t in_n, size_t out_n,
                  check_t *ck);
void check_verdict(call_t *call, check_t *ck, void *out, size_t n, MPI_Datatype t, MPI_Op op);

/* online_mpit.c. Open MPI: the duplicate of `comm` that runs candidate `cd`, made with its
 * control variables written, every value restored after; `refused`: a variable the library
 * would not take (the duplicate runs its choice; the caller drops the candidate) */
MPI_Comm make_candidate(const cand_t *cd, MPI_Comm comm, int *refused);
/* MPICH: `cd` written for the next call (0: refused, the library's choice runs);
 * `unset_candidate` restores what it replaced */
int set_candidate(cand_t *cd);
void unset_candidate(cand_t *cd);
void close_mpit(void); /* at the end, if opened */

/* online_files.c: a file of this rank's in `dir` (a private directory of this user, or
 * NULL, said), written as `tmp` and made whole by `publish` */
FILE *create_private(const char *dir, const char *name, char *tmp, size_t n);
void publish(FILE *f, const char *tmp);
/* this rank's schedule and, where it is a communicator's rank 0, its evidence; `partial`:
 * while the run goes on (only the batches already reduced) */
void write_files(int partial);

#pragma GCC visibility pop

#endif
