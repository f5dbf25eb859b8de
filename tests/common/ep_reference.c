/*
 * ep_reference.c - CPU reference of dispatch and combine (see ep_reference.h for the contract).
 *
 * Written for obviousness, not speed: dispatch walks destination rank, local expert, source rank,
 * source token in exactly the order the layout promises, so the order is visible in the loop
 * nest; combine walks the same fixed order the kernels must use.  Number conversions are done on
 * bits, never through the host FPU's conversion instructions, so the results do not depend on the
 * machine.
 */
#include "ep_reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------- */
/* Number formats                                                                             */

static uint32_t f32_bits(float f)
{
    uint32_t u;

    memcpy(&u, &f, sizeof(u));
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;

    memcpy(&f, &u, sizeof(f));
    return f;
}

uint16_t eep_ref_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);

    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return 0x7fff;
    }
    /* Round to nearest even on the 16 bits dropped; an overflow carries into the exponent and
       ends as infinity, as it should. */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float eep_ref_bf16_to_f32(uint16_t b)
{
    return bits_f32((uint32_t)b << 16);
}

uint8_t eep_ref_f32_to_e4m3(float f)
{
    uint32_t u    = f32_bits(f);
    uint8_t  sign = (uint8_t)((u >> 31) << 7);
    float    a    = fabsf(f);
    int      exp;
    float    r;

    if (isnan(f)) {
        return 0x7f;
    }
    if (a > 448.0f) {
        return sign | 0x7e; /* saturate (infinity included) */
    }
    if (a < 0.015625f) {
        /* Subnormal range (below 2^-6): steps of 2^-9; scaling by 2^9 is exact. */
        r = nearbyintf(ldexpf(a, 9)); /* default rounding mode: to nearest even */
        return sign | (uint8_t)r;     /* r == 8 encodes 2^-6 (exponent 1, mantissa 0): right */
    }
    frexpf(a, &exp);                    /* a = m * 2^exp, m in [0.5, 1) */
    exp -= 1;                           /* a = 1.xxx * 2^exp */
    r = nearbyintf(ldexpf(a, 3 - exp)); /* in [8, 16] */
    if (r >= 16.0f) {
        r = 8.0f;
        exp++;
    }
    /* a <= 448 keeps (exp, r) at or below (8, 14): never the NaN pattern. */
    return sign | (uint8_t)((exp + 7) << 3) | (uint8_t)((int)r - 8);
}

float eep_ref_e4m3_to_f32(uint8_t b)
{
    int   exp  = (b >> 3) & 0xf;
    int   mant = b & 0x7;
    float v;

    if (exp == 0xf && mant == 0x7) {
        return nanf("");
    }
    v = exp == 0 ? ldexpf((float)mant, -9) : ldexpf(1.0f + (float)mant / 8.0f, exp - 7);
    return (b & 0x80) ? -v : v;
}

void eep_ref_quantize_row(const uint16_t *x, int hidden, uint8_t *q, float *scales)
{
    int blk, i;

    for (blk = 0; blk < hidden / EEP_EP_FP8_BLOCK; blk++) {
        const uint16_t *in   = x + blk * EEP_EP_FP8_BLOCK;
        float           amax = 0.0f, scale;

        for (i = 0; i < EEP_EP_FP8_BLOCK; i++) {
            amax = fmaxf(amax, fabsf(eep_ref_bf16_to_f32(in[i])));
        }
        scale       = amax > 0.0f ? amax / 448.0f : 1.0f;
        scales[blk] = scale;
        for (i = 0; i < EEP_EP_FP8_BLOCK; i++) {
            q[blk * EEP_EP_FP8_BLOCK + i] = eep_ref_f32_to_e4m3(eep_ref_bf16_to_f32(in[i]) / scale);
        }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Inputs                                                                                     */

uint64_t eep_ref_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 24 random bits. */
static float rand_unit(uint64_t *state)
{
    return (float)(eep_ref_rand(state) >> 40) * (1.0f / 16777216.0f);
}

void eep_ref_gen_init(eep_ref_gen_t *gen, uint64_t seed)
{
    memset(gen, 0, sizeof(*gen));
    gen->seed           = seed;
    gen->hotspot_expert = -1;
    gen->silent_rank    = -1;
    gen->masked_rank    = -1;
}

void eep_ref_input_free(eep_ref_input_t *in)
{
    if (in == NULL) {
        return;
    }
    free(in->x);
    free(in->x_scales);
    free(in->topk_idx);
    free(in->topk_weights);
    memset(in, 0, sizeof(*in));
}

static int gen_num_tokens(const eep_ep_shape_t *s, const eep_ref_gen_t *gen, int rank)
{
    int t;

    if (rank == gen->silent_rank) {
        return 0;
    }
    if (gen->num_tokens > 0) {
        return gen->num_tokens < s->max_tokens ? gen->num_tokens : s->max_tokens;
    }
    t = gen->tokens_mode == 1 ? s->max_tokens - rank : s->max_tokens;
    return t < 1 ? 1 : t;
}

/* K distinct experts (or -1) for one token. */
static void gen_topk(const eep_ep_shape_t *s, const eep_ref_gen_t *gen, int masked, uint64_t *st,
                     int64_t *idx, float *w)
{
    int k, j;

    for (k = 0; k < s->num_topk; k++) {
        int64_t e;
        int     dup;

        w[k] = 0.0625f + rand_unit(st); /* never 0: a lost weight must show */
        if (masked || (gen->hotspot_only && gen->hotspot_expert >= 0 && k > 0) ||
            (gen->masked_fraction > 0.0 && rand_unit(st) < gen->masked_fraction)) {
            idx[k] = -1;
            continue;
        }
        if (k == 0 && gen->hotspot_expert >= 0) {
            idx[k] = gen->hotspot_expert;
            continue;
        }
        do {
            e   = (int64_t)(eep_ref_rand(st) % (uint64_t)s->num_experts);
            dup = e == gen->hotspot_expert;
            for (j = 0; j < k && !dup; j++) {
                dup = idx[j] == e;
            }
        } while (dup);
        idx[k] = e;
    }
}

eep_status_t eep_ref_input_generate(const eep_ep_shape_t *s, const eep_ref_gen_t *gen, int rank,
                                    eep_ref_input_t *in_p)
{
    eep_ref_input_t in   = { 0 };
    size_t          elem = eep_ep_elem_bytes(s->dtype);
    uint16_t       *row  = NULL;
    uint64_t        st;
    int             t, h, fp8 = s->dtype == EEP_DTYPE_FP8_E4M3;

    if (eep_ep_shape_check(s, NULL) != EEP_OK || rank < 0 || rank >= s->world) {
        return EEP_ERR_INVALID_ARG;
    }
    st            = gen->seed ^ (0x5851f42d4c957f2dull * (uint64_t)(rank + 1));
    in.num_tokens = gen_num_tokens(s, gen, rank);
    /* +1 so that zero tokens still allocate (NULL would look like a failure). */
    in.x            = malloc((size_t)in.num_tokens * (size_t)s->hidden * elem + 1);
    in.topk_idx     = malloc((size_t)in.num_tokens * (size_t)s->num_topk * sizeof(int64_t) + 1);
    in.topk_weights = malloc((size_t)in.num_tokens * (size_t)s->num_topk * sizeof(float) + 1);
    in.x_scales     = fp8 ? malloc((size_t)in.num_tokens * (size_t)(s->hidden / EEP_EP_FP8_BLOCK) *
                                       sizeof(float) +
                                   1)
                          : NULL;
    row             = malloc((size_t)s->hidden * sizeof(uint16_t));
    if (in.x == NULL || in.topk_idx == NULL || in.topk_weights == NULL || row == NULL ||
        (fp8 && in.x_scales == NULL)) {
        free(row);
        eep_ref_input_free(&in);
        return EEP_ERR_NO_MEMORY;
    }
    for (t = 0; t < in.num_tokens; t++) {
        /* Values in [-2, 2), bf16-exact, so bf16 inputs and fp8 sources start from the same data;
           the token index is folded in so no two tokens are alike. */
        for (h = 0; h < s->hidden; h++) {
            row[h] = eep_ref_f32_to_bf16(4.0f * rand_unit(&st) - 2.0f);
        }
        if (fp8) {
            eep_ref_quantize_row(row, s->hidden, in.x + (size_t)t * (size_t)s->hidden,
                                 in.x_scales + (size_t)t * (size_t)(s->hidden / EEP_EP_FP8_BLOCK));
        } else {
            memcpy(in.x + (size_t)t * (size_t)s->hidden * 2, row, (size_t)s->hidden * 2);
        }
        gen_topk(s, gen,
                 rank == gen->masked_rank ||
                     (gen->drop_every > 0 && t % gen->drop_every == gen->drop_every - 1),
                 &st, in.topk_idx + (size_t)t * (size_t)s->num_topk,
                 in.topk_weights + (size_t)t * (size_t)s->num_topk);
    }
    free(row);
    *in_p = in;
    return EEP_OK;
}

void eep_ref_topk_to_i32(const eep_ref_input_t *in, int num_topk, int32_t *out)
{
    size_t i, n = (size_t)in->num_tokens * (size_t)num_topk;

    for (i = 0; i < n; i++) {
        out[i] = (int32_t)in->topk_idx[i];
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Dispatch                                                                                   */

void eep_ref_recv_free(eep_ref_recv_t *r)
{
    if (r == NULL) {
        return;
    }
    free(r->expert_counts);
    free(r->expert_offsets);
    free(r->tokens_from);
    free(r->x);
    free(r->x_scales);
    free(r->topk_idx);
    free(r->topk_weights);
    free(r->src_rank);
    free(r->src_token);
    free(r->src_lane);
    memset(r, 0, sizeof(*r));
}

/* An id outside [-1, E) or repeated in one token: what the kernel flags into the fault page. */
static int check_ids(const eep_ep_shape_t *s, const eep_ref_input_t *inputs, int *bad_rank_p,
                     int *bad_token_p)
{
    int r, t, k, j;

    for (r = 0; r < s->world; r++) {
        for (t = 0; t < inputs[r].num_tokens; t++) {
            const int64_t *idx = inputs[r].topk_idx + (size_t)t * (size_t)s->num_topk;

            for (k = 0; k < s->num_topk; k++) {
                int bad = idx[k] < -1 || idx[k] >= s->num_experts;

                for (j = 0; j < k && !bad; j++) {
                    bad = idx[k] >= 0 && idx[j] == idx[k];
                }
                if (bad) {
                    if (bad_rank_p != NULL) {
                        *bad_rank_p = r;
                    }
                    if (bad_token_p != NULL) {
                        *bad_token_p = t;
                    }
                    return 0;
                }
            }
        }
    }
    return 1;
}

/* The rank that holds global expert @p g (eep_ep_expert_place), and its slot there. */
static int rank_of(const eep_ep_shape_t *s, int64_t g, int *slot_p)
{
    int r, j;

    eep_ep_expert_place(s, (int)g, &r, &j);
    if (slot_p != NULL) {
        *slot_p = j;
    }
    return r;
}

/* The top-k lane of token t (of input in) holding expert e, or -1. */
static int lane_of(const eep_ep_shape_t *s, const eep_ref_input_t *in, int t, int64_t e)
{
    const int64_t *idx = in->topk_idx + (size_t)t * (size_t)s->num_topk;
    int            k;

    for (k = 0; k < s->num_topk; k++) {
        if (idx[k] == e) {
            return k;
        }
    }
    return -1;
}

static eep_status_t dispatch_one(const eep_ep_shape_t *s, const eep_ref_input_t *inputs, int dst,
                                 eep_ref_recv_t *out)
{
    eep_ref_recv_t r         = { 0 };
    size_t         row_bytes = (size_t)s->hidden * eep_ep_elem_bytes(s->dtype);
    size_t   nsc   = s->dtype == EEP_DTYPE_FP8_E4M3 ? (size_t)(s->hidden / EEP_EP_FP8_BLOCK) : 0;
    size_t   K     = (size_t)s->num_topk;
    int32_t *local = malloc(((size_t)eep_ep_local_experts(s) + 1) * sizeof(int32_t));
    int      El    = local != NULL ? eep_ep_rank_experts(s, dst, local) : 0; /* ids by slot */
    int      e, src, t, k;
    int64_t  row, rows;

    r.num_local      = El;
    r.expert_counts  = calloc((size_t)El + 1, sizeof(int32_t));
    r.expert_offsets = calloc((size_t)El + 1, sizeof(int64_t));
    r.tokens_from    = calloc((size_t)s->world, sizeof(int32_t));
    if (local == NULL || r.expert_counts == NULL || r.expert_offsets == NULL ||
        r.tokens_from == NULL) {
        goto err_free;
    }
    /* Counts first, so the outputs are allocated at their exact size. */
    for (src = 0; src < s->world; src++) {
        for (t = 0; t < inputs[src].num_tokens; t++) {
            int hit = 0;

            for (e = 0; e < El; e++) {
                if (lane_of(s, &inputs[src], t, local[e]) >= 0) {
                    r.expert_counts[e]++;
                    hit = 1;
                }
            }
            r.tokens_from[src] += hit;
        }
    }
    rows           = eep_ep_expert_offsets(r.expert_counts, El, s->alignment, r.expert_offsets);
    r.num_rows     = rows;
    r.x            = calloc((size_t)rows * row_bytes + 1, 1);
    r.x_scales     = nsc ? calloc((size_t)rows * nsc + 1, sizeof(float)) : NULL;
    r.topk_idx     = malloc(((size_t)rows * K + 1) * sizeof(int32_t));
    r.topk_weights = calloc((size_t)rows * K + 1, sizeof(float));
    r.src_rank     = malloc(((size_t)rows + 1) * sizeof(int32_t));
    r.src_token    = malloc(((size_t)rows + 1) * sizeof(int32_t));
    r.src_lane     = malloc(((size_t)rows + 1) * sizeof(int32_t));
    if (r.x == NULL || (nsc && r.x_scales == NULL) || r.topk_idx == NULL ||
        r.topk_weights == NULL || r.src_rank == NULL || r.src_token == NULL || r.src_lane == NULL) {
        goto err_free;
    }
    /* Padding rows stay as initialised here: x, scales, weights 0; ids and sources -1. */
    for (row = 0; row < rows; row++) {
        r.src_rank[row] = r.src_token[row] = r.src_lane[row] = -1;
        for (k = 0; k < (int)K; k++) {
            r.topk_idx[(size_t)row * K + (size_t)k] = -1;
        }
    }
    /* The layout's order, spelled out: local expert slot, then source rank, then source token. */
    for (e = 0; e < El; e++) {
        row = r.expert_offsets[e];
        for (src = 0; src < s->world; src++) {
            const eep_ref_input_t *in = &inputs[src];

            for (t = 0; t < in->num_tokens; t++) {
                int lane = lane_of(s, in, t, local[e]);

                if (lane < 0) {
                    continue;
                }
                memcpy(r.x + (size_t)row * row_bytes, in->x + (size_t)t * row_bytes, row_bytes);
                if (nsc) {
                    memcpy(r.x_scales + (size_t)row * nsc, in->x_scales + (size_t)t * nsc,
                           nsc * sizeof(float));
                }
                for (k = 0; k < (int)K; k++) {
                    int64_t g    = in->topk_idx[(size_t)t * K + (size_t)k];
                    int     slot = -1;
                    int     on   = g >= 0 && rank_of(s, g, &slot) == dst;

                    r.topk_idx[(size_t)row * K + (size_t)k] = on ? (int32_t)slot : -1;
                    r.topk_weights[(size_t)row * K + (size_t)k] =
                        on ? in->topk_weights[(size_t)t * K + (size_t)k] : 0.0f;
                }
                r.src_rank[row]  = src;
                r.src_token[row] = t;
                r.src_lane[row]  = lane;
                row++;
            }
        }
    }
    free(local);
    *out = r;
    return EEP_OK;

err_free:
    free(local);
    eep_ref_recv_free(&r);
    return EEP_ERR_NO_MEMORY;
}

eep_status_t eep_ref_dispatch(const eep_ep_shape_t *s, const eep_ref_input_t *inputs,
                              eep_ref_recv_t *recv, int *bad_rank_p, int *bad_token_p)
{
    eep_status_t status;
    int          r, i;

    if (eep_ep_shape_check(s, NULL) != EEP_OK) {
        return EEP_ERR_INVALID_ARG;
    }
    if (!check_ids(s, inputs, bad_rank_p, bad_token_p)) {
        return EEP_ERR_INVALID_ARG;
    }
    for (r = 0; r < s->world; r++) {
        status = dispatch_one(s, inputs, r, &recv[r]);
        if (status != EEP_OK) {
            for (i = 0; i < r; i++) {
                eep_ref_recv_free(&recv[i]);
            }
            return status;
        }
    }
    return EEP_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Combine                                                                                    */

/* Rows of (source @p src, token t, lane k) on every rank: row_of[r * T * K + t * K + k], -1. */
static int32_t *eep_ref_rows_of(const eep_ep_shape_t *s, const eep_ref_recv_t *recv, int src)
{
    size_t   K = (size_t)s->num_topk, T = (size_t)s->max_tokens;
    int32_t *row_of = malloc((size_t)s->world * T * K * sizeof(int32_t) + 1);
    int64_t  row;
    int      r;

    if (row_of == NULL) {
        return NULL;
    }
    memset(row_of, 0xff, (size_t)s->world * T * K * sizeof(int32_t));
    for (r = 0; r < s->world; r++) {
        for (row = 0; row < recv[r].num_rows; row++) {
            if (recv[r].src_rank[row] == src) {
                row_of[(size_t)r * T * K + (size_t)recv[r].src_token[row] * K +
                       (size_t)recv[r].src_lane[row]] = (int32_t)row;
            }
        }
    }
    return row_of;
}

/* The kernel's dot (kernels/ep/combine.cuh, eep_epc_dots): 32 lanes' fmaf sums, a butterfly. */
static float eep_ref_dot(const uint16_t *a, const uint16_t *b, int hidden)
{
    float lanes[32], next[32];
    int   l, v, j, x;

    for (l = 0; l < 32; l++) {
        lanes[l] = 0.0f;
        for (v = l; v < hidden / 8; v += 32) {
            for (j = 0; j < 8; j++) {
                lanes[l] = fmaf(eep_ref_bf16_to_f32(a[v * 8 + j]),
                                eep_ref_bf16_to_f32(b[v * 8 + j]), lanes[l]);
            }
        }
    }
    for (x = 16; x >= 1; x /= 2) {
        for (l = 0; l < 32; l++) {
            next[l] = lanes[l] + lanes[l ^ x];
        }
        memcpy(lanes, next, sizeof(lanes));
    }
    return lanes[0];
}

eep_status_t eep_ref_topk_grad(const eep_ep_shape_t *s, const eep_ref_input_t *inputs,
                               const eep_ref_recv_t *recv, const uint16_t *const *y,
                               const uint16_t *const *g, float *const *grad)
{
    size_t K = (size_t)s->num_topk, T = (size_t)s->max_tokens, H = (size_t)s->hidden;
    int    src, t, k, r;

    for (src = 0; src < s->world; src++) {
        int32_t *row_of = eep_ref_rows_of(s, recv, src);

        if (row_of == NULL) {
            return EEP_ERR_NO_MEMORY;
        }
        for (t = 0; t < inputs[src].num_tokens; t++) {
            const int64_t *idx = inputs[src].topk_idx + (size_t)t * K;

            for (k = 0; k < (int)K; k++) {
                float total = 0.0f;

                /* the kernel adds every destination rank's lane k in rank order: 0 but on the
                   expert's rank (0 + d and d + 0 are d) */
                for (r = 0; r < s->world && idx[k] >= 0; r++) {
                    if (rank_of(s, idx[k], NULL) == r) {
                        int32_t row = row_of[(size_t)r * T * K + (size_t)t * K + (size_t)k];

                        total += eep_ref_dot(y[r] + (size_t)row * H, g[r] + (size_t)row * H,
                                             (int)H);
                    }
                }
                grad[src][(size_t)t * K + (size_t)k] = total;
            }
        }
        free(row_of);
    }
    return EEP_OK;
}

eep_status_t eep_ref_combine_src(const eep_ep_shape_t *s, const eep_ref_input_t *inputs,
                                 const eep_ref_recv_t *recv, const uint16_t *const *y, int src,
                                 uint16_t *out)
{
    return eep_ref_combine_src_ex(s, inputs, recv, y, src, 1, out);
}

eep_status_t eep_ref_combine_src_ex(const eep_ep_shape_t *s, const eep_ref_input_t *inputs,
                                    const eep_ref_recv_t *recv, const uint16_t *const *y, int src,
                                    int weighted, uint16_t *out)
{
    size_t   K = (size_t)s->num_topk, H = (size_t)s->hidden, T = (size_t)s->max_tokens;
    int32_t *row_of; /* [rank r][t * K + k]: r's row for (src, token t, lane k) */
    float   *total = malloc(H * sizeof(float)), *partial = malloc(H * sizeof(float));
    int      r, t, k;
    size_t   h;
    int64_t  row;

    row_of = malloc((size_t)s->world * T * K * sizeof(int32_t) + 1);
    if (row_of == NULL || total == NULL || partial == NULL) {
        free(row_of);
        free(total);
        free(partial);
        return EEP_ERR_NO_MEMORY;
    }
    memset(row_of, 0xff, (size_t)s->world * T * K * sizeof(int32_t));
    for (r = 0; r < s->world; r++) {
        for (row = 0; row < recv[r].num_rows; row++) {
            if (recv[r].src_rank[row] == src) {
                row_of[(size_t)r * T * K + (size_t)recv[r].src_token[row] * K +
                       (size_t)recv[r].src_lane[row]] = (int32_t)row;
            }
        }
    }
    for (t = 0; t < inputs[src].num_tokens; t++) {
        const int64_t *idx = inputs[src].topk_idx + (size_t)t * K;

        for (h = 0; h < H; h++) {
            total[h] = 0.0f;
        }
        for (r = 0; r < s->world; r++) {
            int hit = 0;

            for (h = 0; h < H; h++) {
                partial[h] = 0.0f;
            }
            for (k = 0; k < (int)K; k++) {
                const uint16_t *yr;
                float           w;

                if (idx[k] < 0 || rank_of(s, idx[k], NULL) != r) {
                    continue;
                }
                row = row_of[(size_t)r * T * K + (size_t)t * K + (size_t)k];
                /* The expert rank weighs with the weight it received. */
                w  = weighted ? recv[r].topk_weights[(size_t)row * K + (size_t)k] : 1.0f;
                yr = y[r] + (size_t)row * H;
                for (h = 0; h < H; h++) {
                    partial[h] = fmaf(w, eep_ref_bf16_to_f32(yr[h]), partial[h]);
                }
                hit = 1;
            }
            if (hit) {
                for (h = 0; h < H; h++) {
                    total[h] += eep_ref_bf16_to_f32(eep_ref_f32_to_bf16(partial[h]));
                }
            }
        }
        for (h = 0; h < H; h++) {
            out[(size_t)t * H + h] = eep_ref_f32_to_bf16(total[h]);
        }
    }
    free(row_of);
    free(total);
    free(partial);
    return EEP_OK;
}

eep_status_t eep_ref_combine(const eep_ep_shape_t *s, const eep_ref_input_t *inputs,
                             const eep_ref_recv_t *recv, const uint16_t *const *y,
                             uint16_t *const *out)
{
    return eep_ref_combine_ex(s, inputs, recv, y, 1, out);
}

eep_status_t eep_ref_combine_ex(const eep_ep_shape_t *s, const eep_ref_input_t *inputs,
                                const eep_ref_recv_t *recv, const uint16_t *const *y, int weighted,
                                uint16_t *const *out)
{
    eep_status_t status;
    int          src;

    for (src = 0; src < s->world; src++) {
        status = eep_ref_combine_src_ex(s, inputs, recv, y, src, weighted, out[src]);
        if (status != EEP_OK) {
            return status;
        }
    }
    return EEP_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Rank-major layout                                                                          */

static int eep_ref_slot_of(const eep_ep_shape_t *s, int64_t g)
{
    int slot;

    (void)rank_of(s, g, &slot);
    return slot;
}

eep_status_t eep_ref_rank_major(const eep_ep_shape_t *s, const eep_ref_input_t *inputs, int rank,
                                eep_ref_recv_t *rm)
{
    eep_ep_wire_t w;
    const int     El = eep_ep_rank_experts(s, rank, NULL), K = s->num_topk, W = s->world;
    int64_t       rows = 0, row;
    int           src, t, k;
    /* lane k of a token is local here when its expert lives on this rank; its local id the slot */
#define EEP_REF_LOCAL(g)   ((g) >= 0 && rank_of(s, (g), NULL) == rank)
#define EEP_REF_SLOT_OF(g) eep_ref_slot_of(s, (g))

    eep_ep_wire_layout(s, &w);
    memset(rm, 0, sizeof(*rm));
    for (src = 0; src < W; src++) {
        for (t = 0; t < inputs[src].num_tokens; t++) {
            for (k = 0; k < K; k++) {
                const int64_t e = inputs[src].topk_idx[(size_t)t * K + k];

                if (EEP_REF_LOCAL(e)) {
                    rows++;
                    break;
                }
            }
        }
    }
    rm->num_local      = El;
    rm->num_rows       = rows;
    rm->expert_counts  = calloc((size_t)El + 1, sizeof(int32_t));
    rm->expert_offsets = calloc((size_t)W + 1, sizeof(int64_t));
    rm->tokens_from    = calloc((size_t)W, sizeof(int32_t));
    rm->x              = calloc((size_t)rows * w.hidden_bytes + 1, 1);
    rm->x_scales       = calloc((size_t)rows * w.scale_bytes / 4 + 1, sizeof(float));
    rm->topk_idx       = calloc((size_t)rows * K + 1, sizeof(int32_t));
    rm->topk_weights   = calloc((size_t)rows * K + 1, sizeof(float));
    rm->src_rank       = calloc((size_t)rows + 1, sizeof(int32_t));
    rm->src_token      = calloc((size_t)rows + 1, sizeof(int32_t));
    rm->src_lane       = calloc((size_t)rows + 1, sizeof(int32_t));
    if (rm->expert_counts == NULL || rm->expert_offsets == NULL || rm->tokens_from == NULL ||
        rm->x == NULL || rm->x_scales == NULL || rm->topk_idx == NULL || rm->topk_weights == NULL ||
        rm->src_rank == NULL || rm->src_token == NULL || rm->src_lane == NULL) {
        eep_ref_recv_free(rm);
        return EEP_ERR_NO_MEMORY;
    }
    row = 0;
    for (src = 0; src < W; src++) {
        rm->expert_offsets[src] = row;
        for (t = 0; t < inputs[src].num_tokens; t++) {
            const int64_t *idx   = inputs[src].topk_idx + (size_t)t * K;
            int            first = -1;

            for (k = 0; k < K; k++) {
                if (EEP_REF_LOCAL(idx[k])) {
                    first = first < 0 ? k : first;
                }
            }
            if (first < 0) {
                continue;
            }
            memcpy(rm->x + (size_t)row * w.hidden_bytes, inputs[src].x + (size_t)t * w.hidden_bytes,
                   w.hidden_bytes);
            if (w.scale_bytes != 0) {
                memcpy((uint8_t *)rm->x_scales + (size_t)row * w.scale_bytes,
                       (const uint8_t *)inputs[src].x_scales + (size_t)t * w.scale_bytes,
                       w.scale_bytes);
            }
            for (k = 0; k < K; k++) {
                const int local = EEP_REF_LOCAL(idx[k]);
                const int slot  = local ? EEP_REF_SLOT_OF(idx[k]) : -1;

                rm->topk_idx[(size_t)row * K + k]     = slot;
                rm->topk_weights[(size_t)row * K + k] = local ? inputs[src]
                                                                    .topk_weights[(size_t)t * K + k]
                                                              : 0.0f;
                if (local) {
                    rm->expert_counts[slot]++;
                }
            }
            rm->src_rank[row]  = src;
            rm->src_token[row] = t;
            rm->src_lane[row]  = first;
            rm->tokens_from[src]++;
            row++;
        }
    }
    rm->expert_offsets[W] = row;
    return EEP_OK;
#undef EEP_REF_LOCAL
#undef EEP_REF_SLOT_OF
}

eep_status_t eep_ref_combine_rank_major(const eep_ep_shape_t *s, const eep_ref_input_t *inputs,
                                        const eep_ref_recv_t *rm, const uint16_t *const *y,
                                        uint16_t *const *out)
{
    const size_t H = (size_t)s->hidden, T = (size_t)s->max_tokens;
    const int    W      = s->world;
    int64_t     *row_of = malloc((size_t)W * T * sizeof(int64_t) + 1); /* [r][t] for one src */
    float       *total  = malloc(H * sizeof(float));
    int          src, r;

    if (row_of == NULL || total == NULL) {
        free(row_of);
        free(total);
        return EEP_ERR_NO_MEMORY;
    }
    for (src = 0; src < W; src++) {
        int64_t row;
        int     t;

        for (size_t i = 0; i < (size_t)W * T; i++) {
            row_of[i] = -1;
        }
        for (r = 0; r < W; r++) {
            for (row = 0; row < rm[r].num_rows; row++) {
                if (rm[r].src_rank[row] == src) {
                    row_of[(size_t)r * T + (size_t)rm[r].src_token[row]] = row;
                }
            }
        }
        for (t = 0; t < inputs[src].num_tokens; t++) {
            size_t h;

            for (h = 0; h < H; h++) {
                total[h] = 0.0f;
            }
            for (r = 0; r < W; r++) {
                row = row_of[(size_t)r * T + (size_t)t];
                for (h = 0; row >= 0 && h < H; h++) {
                    total[h] += eep_ref_bf16_to_f32(y[r][(size_t)row * H + h]);
                }
            }
            for (h = 0; h < H; h++) {
                out[src][(size_t)t * H + h] = eep_ref_f32_to_bf16(total[h]);
            }
        }
    }
    free(row_of);
    free(total);
    return EEP_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Degraded mode                                                                              */

/* Whether source rank @p src reaches rank @p dst (degraded mode): both alive, and with
   forwarding (@p L > 1) across nodes the forwarder, dst's node's rank with src's local index. */
static int degrade_reaches(uint64_t dead_mask, int L, int src, int dst)
{
    if (((dead_mask >> src) & 1u) || ((dead_mask >> dst) & 1u)) {
        return 0;
    }
    return L <= 1 || src / L == dst / L || !((dead_mask >> ((dst / L) * L + src % L)) & 1u);
}

static eep_status_t degrade_one(const eep_ep_shape_t *s, const eep_ref_input_t *in, int rank,
                                int dead, uint64_t dead_mask, int L, eep_ref_input_t *out,
                                uint8_t *dropped, int32_t *n_dropped_p)
{
    const size_t    K = (size_t)s->num_topk, T = dead ? 0 : (size_t)in->num_tokens;
    const size_t    xb = (size_t)s->hidden * eep_ep_elem_bytes(s->dtype);
    const size_t    sb = (size_t)(s->hidden / EEP_EP_FP8_BLOCK) * sizeof(float);
    eep_ref_input_t o  = { 0 };
    int32_t         n  = 0;

    o.num_tokens   = (int)T;
    o.x            = malloc(T * xb + 1);
    o.topk_idx     = malloc(T * K * sizeof(int64_t) + 1);
    o.topk_weights = malloc(T * K * sizeof(float) + 1);
    o.x_scales     = in->x_scales != NULL ? malloc(T * sb + 1) : NULL;
    if (o.x == NULL || o.topk_idx == NULL || o.topk_weights == NULL ||
        (in->x_scales != NULL && o.x_scales == NULL)) {
        eep_ref_input_free(&o);
        return EEP_ERR_NO_MEMORY;
    }
    memcpy(o.x, in->x, T * xb);
    if (o.x_scales != NULL) {
        memcpy(o.x_scales, in->x_scales, T * sb);
    }
    memcpy(o.topk_weights, in->topk_weights, T * K * sizeof(float));
    for (size_t i = 0; i < T * K; i++) {
        const int64_t g    = in->topk_idx[i];
        const int     drop = g >= 0 && !degrade_reaches(dead_mask, L, rank, rank_of(s, g, NULL));

        o.topk_idx[i] = drop ? -1 : g;
        if (dropped != NULL) {
            dropped[i] = (uint8_t)drop;
        }
        n += drop;
    }
    *n_dropped_p = n;
    *out         = o;
    return EEP_OK;
}

eep_status_t eep_ref_degrade(const eep_ep_shape_t *s, const eep_ref_input_t *inputs,
                             uint64_t dead_mask, eep_ref_input_t *out, uint8_t *const *dropped,
                             int32_t *n_dropped)
{
    return eep_ref_degrade_lsa(s, inputs, dead_mask, 1, out, dropped, n_dropped);
}

eep_status_t eep_ref_degrade_lsa(const eep_ep_shape_t *s, const eep_ref_input_t *inputs,
                                 uint64_t dead_mask, int L, eep_ref_input_t *out,
                                 uint8_t *const *dropped, int32_t *n_dropped)
{
    int r;

    if (eep_ep_shape_check(s, NULL) != EEP_OK || s->world > 64 || L < 1 || s->world % L != 0 ||
        (s->world < 64 && (dead_mask >> s->world) != 0) ||
        (s->world < 64 && dead_mask == (1ull << s->world) - 1u) || dead_mask == ~0ull) {
        return EEP_ERR_INVALID_ARG;
    }
    if (!check_ids(s, inputs, NULL, NULL)) {
        return EEP_ERR_INVALID_ARG; /* the kernels check the ids as given, before dropping */
    }
    for (r = 0; r < s->world; r++) {
        const int    dead = (int)((dead_mask >> r) & 1u);
        int32_t      n    = 0;
        eep_status_t status;

        status = degrade_one(s, &inputs[r], r, dead, dead_mask, L, &out[r],
                             dropped != NULL && !dead ? dropped[r] : NULL, &n);
        if (status != EEP_OK) {
            while (r-- > 0) {
                eep_ref_input_free(&out[r]);
            }
            return status;
        }
        if (n_dropped != NULL) {
            n_dropped[r] = n;
        }
    }
    return EEP_OK;
}
