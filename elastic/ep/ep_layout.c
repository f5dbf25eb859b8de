/*
 * ep_layout.c - sizes, offsets and the SM model of dispatch/combine.
 *
 * Pure arithmetic on a shape, so the host runtime, the CPU reference and the benchmark agree by
 * construction.  Every buffer is sized for the worst case of the shape (max_tokens_per_rank from
 * every rank), never for a call: a call then needs no allocation and no flow control.
 */
#include "elastic/ep/ep_layout.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "elastic/ep/ep_knobs.h"
#include "kernels/ep/ep_params.h"
#include "kernels/ep/ll_line.cuh" /* the line geometry (its device code needs __CUDACC__) */

/* The host sizes rows and records with the kernels' line geometry. */
_Static_assert(EEP_EP_COMBINE_LINE_BYTES == EEP_LL_LINE_BYTES, "a line's bytes, host and kernels");
_Static_assert(EEP_EP_COMBINE_LINE_DATA == EEP_LL_DATA_SLOTS * 16, "a line's data bytes");

#define EEP_EP_MAX_WORLD     1024
#define EEP_EP_MAX_ALIGNMENT 4096
#define EEP_EP_REGION_ALIGN  256
#define EEP_EP_WINDOW_ALIGN  (2u << 20)

size_t eep_ep_elem_bytes(eep_dtype_t dtype)
{
    switch (dtype) {
    case EEP_DTYPE_BF16:
        return 2;
    case EEP_DTYPE_FP8_E4M3:
        return 1;
    }
    return 0;
}

int64_t eep_ep_align_up(int64_t value, int64_t align)
{
    return (value + align - 1) / align * align;
}

eep_ep_shape_t eep_ep_shape_product(int world)
{
    const eep_ep_shape_t s = { .world       = world,
                               .max_tokens  = 4096,
                               .hidden      = 7168,
                               .num_topk    = 8,
                               .num_experts = 256,
                               .alignment   = 128,
                               .dtype       = EEP_DTYPE_BF16 };

    return s;
}

int eep_ep_local_experts(const eep_ep_shape_t *shape)
{
    if (shape->placement != NULL) {
        return shape->local_max;
    }
    return (shape->num_experts + shape->world - 1) / shape->world;
}

/* The default placement (eep_placement_default's formula): the first expert of rank r. */
static int eep_ep_default_first(const eep_ep_shape_t *s, int r)
{
    return (int)(((int64_t)r * s->num_experts + s->world - 1) / s->world);
}

void eep_ep_expert_place(const eep_ep_shape_t *s, int e, int *rank_p, int *slot_p)
{
    int r;

    if (s->placement != NULL) {
        *rank_p = s->placement[e].rank;
        *slot_p = s->placement[e].slot;
        return;
    }
    r       = (int)(((int64_t)e * s->world) / s->num_experts);
    *rank_p = r;
    *slot_p = e - eep_ep_default_first(s, r);
}

int eep_ep_rank_experts(const eep_ep_shape_t *s, int rank, int32_t *ids_p)
{
    int e, n = 0;

    if (s->placement == NULL) {
        const int first = eep_ep_default_first(s, rank), end = eep_ep_default_first(s, rank + 1);

        for (e = first; ids_p != NULL && e < end; e++) {
            ids_p[e - first] = e;
        }
        return end - first;
    }
    for (e = 0; e < s->num_experts; e++) {
        if (s->placement[e].rank == rank) {
            if (ids_p != NULL) {
                ids_p[s->placement[e].slot] = e;
            }
            n++;
        }
    }
    return n;
}

int eep_ep_place_even(const eep_ep_shape_t *s)
{
    return s->placement == NULL && s->num_experts % s->world == 0;
}

void eep_ep_place_table(const eep_ep_shape_t *s, uint32_t *table_p)
{
    int e, r, j;

    for (e = 0; e < s->num_experts; e++) {
        eep_ep_expert_place(s, e, &r, &j);
        table_p[e] = ((uint32_t)r << 16) | (uint32_t)j;
    }
}

eep_status_t eep_ep_shape_place(eep_ep_shape_t *s, const eep_expert_place_t *placement)
{
    eep_expert_place_t *def;
    int                *counts;
    eep_status_t        status;
    int                 r, most = 0, same;

    if (placement == NULL) {
        s->placement = NULL;
        s->local_max = 0;
        return EEP_OK;
    }
    if (s->world < 1 || s->world > EEP_MAX_RANKS || s->num_experts < 1 ||
        s->num_experts > EEP_EP_MAX_EXPERTS) {
        return EEP_ERR_INVALID_ARG;
    }
    counts = malloc((size_t)s->world * sizeof(int));
    def    = malloc((size_t)s->num_experts * sizeof(*def));
    if (counts == NULL || def == NULL) {
        free(counts);
        free(def);
        return EEP_ERR_NO_MEMORY;
    }
    status = eep_placement_check(placement, s->num_experts, s->world, counts);
    if (status == EEP_OK) {
        for (r = 0; r < s->world; r++) {
            most = counts[r] > most ? counts[r] : most;
        }
        same = eep_placement_default(s->num_experts, s->world, def) == EEP_OK &&
               memcmp(def, placement, (size_t)s->num_experts * sizeof(*def)) == 0;
        s->placement = same ? NULL : placement;
        s->local_max = same ? 0 : most;
    }
    free(counts);
    free(def);
    return status;
}

int eep_ep_lines(const eep_ep_shape_t *shape)
{
    return (shape->max_tokens <= EEP_EP_DISPATCH_LINES_MAX_TOKENS ? EEP_EPK_LINES_DISPATCH : 0) |
           (shape->max_tokens <= EEP_EP_COMBINE_LINES_MAX_TOKENS ? EEP_EPK_LINES_COMBINE : 0);
}

static int eep_ep_is_pow2(int v)
{
    return v > 0 && (v & (v - 1)) == 0;
}

eep_status_t eep_ep_shape_check(const eep_ep_shape_t *s, const char **why_p)
{
    const char *why  = NULL;
    size_t      elem = eep_ep_elem_bytes(s->dtype);

    if (elem == 0) {
        why = "dtype";
    } else if (s->world < 1 || s->world > EEP_EP_MAX_WORLD) {
        why = "world";
    } else if (s->max_tokens < 1) {
        why = "max_tokens_per_rank";
    } else if (s->hidden <= 0 || ((size_t)s->hidden * elem) % 16 != 0) {
        why = "hidden";
    } else if (s->dtype == EEP_DTYPE_FP8_E4M3 && s->hidden % EEP_EP_FP8_BLOCK != 0) {
        why = "hidden";
    } else if (s->num_topk < 1 || s->num_topk > EEP_EP_MAX_TOPK) {
        why = "num_topk";
    } else if (s->num_experts < 1 || s->num_experts > EEP_EP_MAX_EXPERTS ||
               s->num_topk > s->num_experts) {
        why = "num_experts";
    } else if (s->placement != NULL && s->local_max < 1) {
        why = "placement"; /* not set by eep_ep_shape_place */
    } else if (eep_ep_local_experts(s) > EEP_EP_MAX_LOCAL_EXPERTS) {
        why = "num_experts"; /* too many on one rank */
    } else if (!eep_ep_is_pow2(s->alignment) || s->alignment > EEP_EP_MAX_ALIGNMENT) {
        why = "expert_alignment";
    }
    if (why == NULL && eep_ep_rows_max(s) > INT32_MAX) {
        /* Kernels index rows with 32-bit integers. */
        why = "max_tokens_per_rank";
    }
    if (why != NULL) {
        if (why_p != NULL) {
            *why_p = why;
        }
        return EEP_ERR_INVALID_ARG;
    }
    return EEP_OK;
}

/* A record of @p hidden_bytes data bytes, @p scale_bytes of scales and K metadata lanes. */
static void eep_ep_wire_of(size_t hidden_bytes, size_t scale_bytes, int num_topk,
                           eep_ep_wire_t *wire_p)
{
    eep_ep_wire_t w;

    w.hidden_bytes = hidden_bytes;
    w.scale_bytes  = scale_bytes;
    /* K ids, K weights, the source token, K positions (the token's rank among this source's
       tokens for each of its experts: the receiver places rows without a scan) */
    w.meta_bytes = (size_t)num_topk * (2 * sizeof(int32_t) + sizeof(float)) + sizeof(int32_t);
    w.scale_off  = (size_t)eep_ep_align_up((int64_t)w.hidden_bytes, EEP_EP_WIRE_ALIGN);
    w.meta_off   = w.scale_off + (size_t)eep_ep_align_up((int64_t)w.scale_bytes, EEP_EP_WIRE_ALIGN);
    /* then the tag (u64): the receiver copies a record once its tag holds the call's sequence,
       so rows are placed while the rest still travels (no "all landed" signal) */
    w.tag_off     = w.meta_off + (size_t)eep_ep_align_up((int64_t)w.meta_bytes, 8);
    w.meta_bytes  = w.tag_off + 8 - w.meta_off;
    w.token_bytes = w.meta_off + (size_t)eep_ep_align_up((int64_t)w.meta_bytes, EEP_EP_WIRE_ALIGN);
    *wire_p       = w;
}

void eep_ep_wire_layout(const eep_ep_shape_t *s, eep_ep_wire_t *wire_p)
{
    eep_ep_wire_of(
        (size_t)s->hidden * eep_ep_elem_bytes(s->dtype),
        s->dtype == EEP_DTYPE_FP8_E4M3 ? (size_t)(s->hidden / EEP_EP_FP8_BLOCK) * sizeof(float) : 0,
        s->num_topk, wire_p);
}

/* A combine row's data bytes: the bf16 channels, or the 16-byte vectors of K fp32 top-k
   gradients (eep_ep_combine_topk_grad_body), whichever is larger. */
static size_t eep_ep_crow_data(const eep_ep_shape_t *s)
{
    size_t data = (size_t)s->hidden * 2, tg = (size_t)(s->num_topk + 3) / 4 * 16;

    return data > tg ? data : tg;
}

int eep_ep_envelope_equal(const eep_ep_envelope_t *a, const eep_ep_envelope_t *b)
{
    return a->world == b->world && a->max_tokens == b->max_tokens && a->num_topk == b->num_topk &&
           a->num_local == b->num_local && a->hidden_bytes == b->hidden_bytes &&
           a->scale_bytes == b->scale_bytes && a->crow_data == b->crow_data;
}

void eep_ep_envelope_of(const eep_ep_shape_t *s, eep_ep_envelope_t *env_p)
{
    eep_ep_wire_t w;

    eep_ep_wire_layout(s, &w);
    env_p->world        = s->world;
    env_p->max_tokens   = s->max_tokens;
    env_p->num_topk     = s->num_topk;
    env_p->num_local    = eep_ep_local_experts(s);
    env_p->hidden_bytes = w.hidden_bytes;
    env_p->scale_bytes  = w.scale_bytes;
    env_p->crow_data    = eep_ep_crow_data(s);
}

#define EEP_EP_MAX(a, b) ((a) > (b) ? (a) : (b))

eep_status_t eep_ep_envelope_add(eep_ep_envelope_t *env, const eep_ep_shape_t *s,
                                 const char **why_p)
{
    eep_ep_envelope_t one;
    const char       *why = NULL;

    if (eep_ep_shape_check(s, &why) != EEP_OK) {
        /* why is set */
    } else if (s->world != env->world) {
        why = "world";
    } else if (s->max_tokens != env->max_tokens) {
        why = "max_tokens_per_rank";
    }
    if (why != NULL) {
        if (why_p != NULL) {
            *why_p = why;
        }
        return EEP_ERR_INVALID_ARG;
    }
    eep_ep_envelope_of(s, &one);
    env->num_topk     = EEP_EP_MAX(env->num_topk, one.num_topk);
    env->num_local    = EEP_EP_MAX(env->num_local, one.num_local);
    env->hidden_bytes = EEP_EP_MAX(env->hidden_bytes, one.hidden_bytes);
    env->scale_bytes  = EEP_EP_MAX(env->scale_bytes, one.scale_bytes);
    env->crow_data    = EEP_EP_MAX(env->crow_data, one.crow_data);
    return EEP_OK;
}

const char *eep_ep_envelope_misfit(const eep_ep_envelope_t *env, const eep_ep_shape_t *s,
                                   int combine_only)
{
    eep_ep_envelope_t one;

    if (s->world != env->world) {
        return "world";
    }
    if (s->max_tokens != env->max_tokens) {
        return "max_tokens_per_rank";
    }
    eep_ep_envelope_of(s, &one);
    if (one.num_topk > env->num_topk) {
        return "num_topk";
    }
    if (one.num_local > env->num_local) {
        return "num_experts";
    }
    if (one.crow_data > env->crow_data) {
        return "hidden (combine row)";
    }
    if (!combine_only && one.hidden_bytes > env->hidden_bytes) {
        return "hidden (record bytes)";
    }
    if (!combine_only && one.scale_bytes > env->scale_bytes) {
        return "dtype (fp8 scales)";
    }
    return NULL;
}

void eep_ep_envelope_record(const eep_ep_envelope_t *env, eep_ep_wire_t *wire_p)
{
    eep_ep_wire_t w;
    size_t        lines, shift;

    eep_ep_wire_of(env->hidden_bytes, env->scale_bytes, env->num_topk, &w);
    if (env->max_tokens <= EEP_EP_DISPATCH_LINES_MAX_TOKENS) {
        /* the hidden bytes as flagged lines of 7 x 16 bytes (kernels/ep/ll_line.cuh), the record
           a whole number of lines so that every record starts on one */
        lines = (w.hidden_bytes + EEP_EP_COMBINE_LINE_DATA - 1) / EEP_EP_COMBINE_LINE_DATA;
        shift = lines * EEP_EP_COMBINE_LINE_BYTES - w.scale_off;
        w.scale_off += shift;
        w.meta_off += shift;
        w.tag_off += shift;
        w.token_bytes = (size_t)eep_ep_align_up((int64_t)(w.token_bytes + shift),
                                                EEP_EP_COMBINE_LINE_BYTES);
    }
    *wire_p = w;
}

void eep_ep_record_layout(const eep_ep_shape_t *s, eep_ep_wire_t *wire_p)
{
    eep_ep_envelope_t env;

    eep_ep_envelope_of(s, &env);
    eep_ep_envelope_record(&env, wire_p);
}

static int64_t eep_ep_rows_max_raw(int64_t world, int64_t max_tokens, int64_t num_topk,
                                   int64_t num_local, int64_t alignment)
{
    int64_t pairs = world * max_tokens * (num_topk < num_local ? num_topk : num_local);

    /* Each padded group adds at most alignment - 1 rows and the total is a multiple of it. */
    return (pairs + num_local * (alignment - 1)) / alignment * alignment;
}

int64_t eep_ep_rows_max(const eep_ep_shape_t *s)
{
    if (s->world < 1 || s->num_experts < 1 || s->max_tokens < 1 || s->num_topk < 1 ||
        !eep_ep_is_pow2(s->alignment) || (s->placement != NULL && s->local_max < 1)) {
        return -1;
    }
    return eep_ep_rows_max_raw(s->world, s->max_tokens, s->num_topk, eep_ep_local_experts(s),
                               s->alignment);
}

int64_t eep_ep_recv_rows_max_placed(int world, int max_tokens_per_rank, int num_topk,
                                    int num_experts, int expert_alignment,
                                    const eep_expert_place_t *placement)
{
    eep_ep_shape_t s = {
        .world       = world,
        .max_tokens  = max_tokens_per_rank,
        .hidden      = 0,
        .num_topk    = num_topk,
        .num_experts = num_experts,
        .alignment   = expert_alignment,
        .dtype       = EEP_DTYPE_BF16,
    };

    if (eep_ep_shape_place(&s, placement) != EEP_OK) {
        return -1;
    }
    return eep_ep_rows_max(&s);
}

int64_t eep_ep_recv_rows_max(int world, int max_tokens_per_rank, int num_topk, int num_experts,
                             int expert_alignment)
{
    /* a NULL placement is the default policy's */
    return eep_ep_recv_rows_max_placed(world, max_tokens_per_rank, num_topk, num_experts,
                                       expert_alignment, NULL);
}

void eep_ep_envelope_sizes(const eep_ep_envelope_t *env, eep_ep_buffer_sizes_t *sizes_p)
{
    eep_ep_buffer_sizes_t z;
    eep_ep_wire_t         wire;
    size_t                regions, off;
    int64_t count_words = 3 + env->num_local; /* a count slot: 3 header words, one per expert */

    eep_ep_envelope_record(env, &wire);
    z.count_slot_bytes    = (size_t)eep_ep_align_up(count_words * (int64_t)sizeof(uint64_t),
                                                    EEP_EP_COUNT_SLOT_ALIGN);
    z.counts_bytes        = (size_t)env->world * EEP_EP_PARITIES * z.count_slot_bytes;
    z.allocator_bytes     = (size_t)eep_ep_align_up((int64_t)env->world * 4, EEP_EP_REGION_ALIGN);
    z.dispatch_recv_bytes = (size_t)EEP_EP_PARITIES * (size_t)env->world * (size_t)env->max_tokens *
                            wire.token_bytes;
    regions              = (size_t)(env->world < env->num_topk ? env->world : env->num_topk);
    z.combine_row_bytes  = env->max_tokens <= EEP_EP_COMBINE_LINES_MAX_TOKENS
                               ? (env->crow_data + EEP_EP_COMBINE_LINE_DATA - 1) /
                                    EEP_EP_COMBINE_LINE_DATA * EEP_EP_COMBINE_LINE_BYTES
                               : env->crow_data + EEP_EP_COMBINE_TAG_BYTES;
    z.combine_recv_bytes = (size_t)EEP_EP_PARITIES * regions * (size_t)env->max_tokens *
                           z.combine_row_bytes;

    off          = 0;
    z.counts_off = off;
    off += (size_t)eep_ep_align_up((int64_t)z.counts_bytes, EEP_EP_REGION_ALIGN);
    z.allocator_off = off;
    off += z.allocator_bytes;
    z.dispatch_recv_off = off;
    off += (size_t)eep_ep_align_up((int64_t)z.dispatch_recv_bytes, EEP_EP_REGION_ALIGN);
    z.combine_recv_off = off;
    off += (size_t)eep_ep_align_up((int64_t)z.combine_recv_bytes, EEP_EP_REGION_ALIGN);
    z.total_bytes = (size_t)eep_ep_align_up((int64_t)off, EEP_EP_WINDOW_ALIGN);
    *sizes_p      = z;
}

eep_status_t eep_ep_buffer_sizes(const eep_ep_shape_t *s, eep_ep_buffer_sizes_t *sizes_p)
{
    eep_ep_envelope_t env;
    eep_status_t      status;

    status = eep_ep_shape_check(s, NULL);
    if (status != EEP_OK) {
        return status;
    }
    eep_ep_envelope_of(s, &env);
    eep_ep_envelope_sizes(&env, sizes_p);
    return EEP_OK;
}

size_t eep_ep_gin_stage_bytes(const eep_ep_shape_t *s, int lsa_size)
{
    eep_ep_buffer_sizes_t z;
    eep_ep_wire_t         wire;
    size_t                bytes, W, T, L, N, fm;

    if (eep_ep_buffer_sizes(s, &z) != EEP_OK || lsa_size < 1 || s->world % lsa_size != 0) {
        return 0;
    }
    eep_ep_record_layout(s, &wire);
    W     = (size_t)s->world;
    T     = (size_t)s->max_tokens;
    L     = (size_t)lsa_size;
    N     = W / L;
    bytes = W * T * (wire.token_bytes + z.combine_row_bytes) + W * z.count_slot_bytes;
    if (L > 1) { /* kernels/ep/ep_gin.cuh, eep_epk_fwd_*: the same order */
        fm = (12 + 4 * L + 7) / 8 * 8;
        bytes += 2 * N * T * wire.token_bytes + 2 * N * T * fm + 2 * N * L * z.count_slot_bytes +
                 2 * N * L * T * z.combine_row_bytes + (L * 8 + 127) / 128 * 128 + N * T * fm;
    }
    return (size_t)eep_ep_align_up((int64_t)bytes, EEP_EP_WINDOW_ALIGN);
}

size_t eep_ep_gin_stage_bytes_env(const eep_ep_envelope_t *env)
{
    eep_ep_buffer_sizes_t z;
    eep_ep_wire_t         wire;
    size_t                W = (size_t)env->world, T = (size_t)env->max_tokens;

    eep_ep_envelope_sizes(env, &z);
    eep_ep_envelope_record(env, &wire);
    return (size_t)eep_ep_align_up(
        (int64_t)(W * T * (wire.token_bytes + z.combine_row_bytes) + W * z.count_slot_bytes),
        EEP_EP_WINDOW_ALIGN);
}

size_t eep_ep_gin_stage_bytes_max(const eep_ep_shape_t *s)
{
    size_t most = 0, b;
    int    l;

    for (l = 1; l <= s->world; l++) {
        if (s->world % l == 0 && (b = eep_ep_gin_stage_bytes(s, l)) > most) {
            most = b;
        }
    }
    return most;
}

int eep_ep_layout_equal(const eep_ep_shape_t *a, const eep_ep_shape_t *b)
{
    eep_ep_buffer_sizes_t za, zb;
    eep_ep_wire_t         wa, wb;

    if (eep_ep_buffer_sizes(a, &za) != EEP_OK || eep_ep_buffer_sizes(b, &zb) != EEP_OK) {
        return 0;
    }
    eep_ep_record_layout(a, &wa);
    eep_ep_record_layout(b, &wb);
    return a->world == b->world && eep_ep_lines(a) == eep_ep_lines(b) &&
           za.count_slot_bytes == zb.count_slot_bytes && za.counts_off == zb.counts_off &&
           za.allocator_off == zb.allocator_off && za.dispatch_recv_off == zb.dispatch_recv_off &&
           za.dispatch_recv_bytes == zb.dispatch_recv_bytes &&
           za.combine_recv_off == zb.combine_recv_off &&
           za.combine_recv_bytes == zb.combine_recv_bytes &&
           za.combine_row_bytes == zb.combine_row_bytes && wa.token_bytes == wb.token_bytes &&
           wa.scale_off == wb.scale_off && wa.meta_off == wb.meta_off && wa.tag_off == wb.tag_off;
}

int64_t eep_ep_expert_offsets(const int32_t *counts, int num_local, int alignment, int64_t *offsets)
{
    int e;

    offsets[0] = 0;
    for (e = 0; e < num_local; e++) {
        offsets[e + 1] = offsets[e] + eep_ep_align_up(counts[e], alignment);
    }
    return offsets[num_local];
}

eep_status_t eep_ep_params_layout(const eep_ep_shape_t *shape, int rank, size_t ep_off,
                                  const void *my_window, eep_epk_params_t *p)
{
    eep_ep_envelope_t env;
    eep_status_t      status;

    if ((status = eep_ep_shape_check(shape, NULL)) != EEP_OK) {
        return status;
    }
    eep_ep_envelope_of(shape, &env);
    return eep_ep_params_layout_env(shape, &env, rank, ep_off, my_window, p);
}

eep_status_t eep_ep_params_layout_env(const eep_ep_shape_t *shape, const eep_ep_envelope_t *env,
                                      int rank, size_t ep_off, const void *my_window,
                                      eep_epk_params_t *p)
{
    eep_ep_buffer_sizes_t z;
    eep_ep_wire_t         wire, own;
    eep_status_t          status;

    if ((status = eep_ep_shape_check(shape, NULL)) != EEP_OK) {
        return status;
    }
    if (eep_ep_envelope_misfit(env, shape, 1) != NULL) {
        return EEP_ERR_INVALID_ARG;
    }
    eep_ep_envelope_sizes(env, &z);
    eep_ep_envelope_record(env, &wire);
    eep_ep_wire_layout(shape, &own);
    memset(p, 0, sizeof(*p));
    p->rank          = rank;
    p->world         = shape->world;
    p->max_tokens    = shape->max_tokens;
    p->hidden        = shape->hidden;
    p->num_topk      = shape->num_topk;
    p->num_experts   = shape->num_experts;
    p->num_local     = eep_ep_rank_experts(shape, rank, NULL);
    p->num_local_max = env->num_local; /* the count slots' words */
    p->place_even    = eep_ep_place_even(shape);
    p->alignment     = shape->alignment;
    p->token_bytes   = (unsigned)wire.token_bytes;
    p->hidden_bytes  = (unsigned)own.hidden_bytes; /* this call's bytes, in the envelope's record */
    p->scale_off     = (unsigned)wire.scale_off;
    p->scale_bytes   = (unsigned)own.scale_bytes;
    p->meta_off      = (unsigned)wire.meta_off;
    p->tag_off       = (unsigned)wire.tag_off;
    p->ctl = (unsigned long long)(uintptr_t)((const char *)my_window + ep_off + z.allocator_off);
    p->counts_off    = ep_off + z.counts_off;
    p->slot_bytes    = z.count_slot_bytes;
    p->drecv_off     = ep_off + z.dispatch_recv_off;
    p->drecv_region  = (unsigned long long)env->max_tokens * wire.token_bytes;
    p->crecv_off     = ep_off + z.combine_recv_off;
    p->crecv_row     = z.combine_row_bytes;
    p->crecv_region  = (unsigned long long)env->max_tokens * z.combine_row_bytes;
    p->crecv_regions = env->world < env->num_topk ? env->world : env->num_topk;
    p->crow_tag      = (unsigned)env->crow_data;
    p->lines         = eep_ep_lines(shape);
    return EEP_OK;
}

int eep_ep_mirror_ready(const volatile uint64_t *mirror, int num_local, int ready)
{
    const uint64_t seq = __atomic_load_n(&mirror[num_local + 1], __ATOMIC_ACQUIRE);

    if (seq == 0) {
        return 0;
    }
    while (ready <= num_local &&
           (uint32_t)(__atomic_load_n(&mirror[ready], __ATOMIC_ACQUIRE) >> 32) == (uint32_t)seq) {
        ready++;
    }
    return ready;
}
