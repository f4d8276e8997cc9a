/* collonline's check of results, as the kernel checks its points: a candidate's first call
 * in each group is made again with the library's own choice, on the private duplicate, from
 * a copy of the call's input, and every rank compares. A candidate that answered wrong on
 * any rank is dropped for the group on every rank (the verdict is reduced), said once, and
 * the application keeps the library's answer, so its results stay its own.
 *
 * Checked: calls from C whose datatypes are predefined and without gaps (extent == size),
 * so their buffers are plain bytes. Sums and products of float and double are compared
 * with a tolerance (another algorithm adds in another order); of other floating types
 * they are not checked. Every rank must agree a call is checked before the reference call
 * is made, or a rank alone would wait in it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "online.h"

static int sum_or_prod(MPI_Op op)
{
    return op == MPI_SUM || op == MPI_PROD;
}

static int is_real(MPI_Datatype t)
{
    return t == MPI_FLOAT || t == MPI_DOUBLE || t == MPI_LONG_DOUBLE
           || t == MPI_C_FLOAT_COMPLEX || t == MPI_C_DOUBLE_COMPLEX
           || t == MPI_C_LONG_DOUBLE_COMPLEX;
}

int plain_type(MPI_Datatype t)
{
    int ni, na, nd, comb, size;
    MPI_Aint lb, extent;
    if (t == MPI_DATATYPE_NULL || PMPI_Type_get_envelope(t, &ni, &na, &nd, &comb) != MPI_SUCCESS
        || comb != MPI_COMBINER_NAMED)
        return 0;
    PMPI_Type_size(t, &size);
    PMPI_Type_get_extent(t, &lb, &extent);
    return lb == 0 && extent == size;
}

int checkable_op(MPI_Datatype t, MPI_Op op)
{
    /* a reduction's result in another order differs in its last bits: compared with a
     * tolerance where the layer knows the type's numbers, not checked where it does not */
    return !sum_or_prod(op) || !is_real(t) || t == MPI_FLOAT || t == MPI_DOUBLE;
}

int check_prepare(call_t *call, int can, const void *in, size_t in_n, size_t out_n,
                  check_t *ck)
{
    int all = 0;
    ck->in = malloc(in_n ? in_n : 1);
    ck->ref = calloc(out_n ? out_n : 1, 1);
    if (!ck->in || !ck->ref)
        can = 0;
    else if (in && in_n)
        memcpy(ck->in, in, in_n);
    /* MPICH: the candidate's variables are written for the call; the agreement runs the
     * library's own choice (a candidate that does not apply to it could abort the job) */
    if (call->written)
        unset_candidate(&P.cand[call->c][call->k]);
    PMPI_Allreduce(&can, &all, 1, MPI_INT, MPI_MIN, call->s->priv);
    if (call->written)
        call->written = set_candidate(&P.cand[call->c][call->k]);
    if (!all) {
        free(ck->in);
        free(ck->ref);
        ck->in = ck->ref = NULL;
    }
    return all;
}

/* whether `out` differs from `ref`: bit for bit, or within a sum's rounding */
static int differs(const void *out, const void *ref, size_t n, MPI_Datatype t, MPI_Op op)
{
    if (!sum_or_prod(op) || !(t == MPI_FLOAT || t == MPI_DOUBLE))
        return memcmp(out, ref, n) != 0;
    size_t m = n / (t == MPI_FLOAT ? sizeof(float) : sizeof(double));
    double scale = 0;
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < m; i++) {
            double a = t == MPI_FLOAT ? ((const float *)out)[i] : ((const double *)out)[i];
            double b = t == MPI_FLOAT ? ((const float *)ref)[i] : ((const double *)ref)[i];
            if (pass == 0) { /* the largest magnitude: the scale a sum's rounding is of */
                if (isfinite(b) && fabs(b) > scale)
                    scale = fabs(b);
                continue;
            }
            if (isnan(a) && isnan(b))
                continue;
            double eps = t == MPI_FLOAT ? 1e-4 : 1e-9;
            if (!(fabs(a - b) <= eps * fmax(fabs(a), fabs(b)) + eps * 1e-3 * scale))
                return 1;
        }
    return 0;
}

/* test-only (COLLTUNE_TEST_FAULT=wrong:COLL=ID): that candidate's answer is spoiled on the
 * communicator's rank 1, as the kernel's fault switch spoils a point's */
static void spoil(const call_t *call, void *out, size_t n)
{
    const char *f = getenv("COLLTUNE_TEST_FAULT");
    char want[64];
    snprintf(want, sizeof want, "wrong:%s=%d", NAMES[call->c], P.cand[call->c][call->k].id);
    if (f && !strcmp(f, want) && call->s->rank == 1 && out && n) /* a double's exponent */
        ((unsigned char *)out)[(n < 8 ? n : 8) - 1] ^= 0x40;
}

void check_verdict(call_t *call, check_t *ck, void *out, size_t n, MPI_Datatype t, MPI_Op op)
{
    spoil(call, out, n);
    int bad = out && n && differs(out, ck->ref, n, t, op), any = 0;
    PMPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, call->s->priv);
    if (bad) /* the application gets the library's answer */
        memcpy(out, ck->ref, n);
    if (any)
        wrong_answer(call);
    free(ck->in);
    free(ck->ref);
    ck->in = ck->ref = NULL;
}
