/*
 * ep_reference.h - a CPU reference of dispatch and combine over a whole simulated world.
 *
 * One process holds every rank's inputs and produces every rank's expected outputs, in the exact
 * layout and arithmetic that eep/ep.h promises, so kernel tests and eep-bench can compare every
 * element bit for bit:
 *
 * Dispatch.  Rank r owns the global experts the shape's placement puts on it (shape->placement,
 * NULL: eep_placement_default; El_r of them, possibly none), local slot e holding expert g_r(e).
 * Its received rows are expert-major: for local slot e = 0..El_r-1, the rows of e are ordered by
 * source rank ascending, then source token index ascending (one row per (token, e) pair whose
 * top-k holds g_r(e)),
 * then padded with zero rows to a multiple of the alignment.  A row carries the token's hidden
 * bytes (and fp8 scales) unchanged, its K top-k entries mapped to local ids (-1 where the expert
 * is not on r, or was -1) and its K weights (0 where the local id is -1).  Padding rows: x = 0,
 * scales = 0, ids -1, weights 0, source -1.
 *
 * Combine.  For source rank s and token t, out[t] = bf16(total) with total = 0.0f then, for every
 * rank r ascending that holds one of t's experts, total += float(p_r), and
 * p_r = bf16(partial), partial = 0.0f then, for top-k lane k ascending whose expert is on r,
 * partial = fmaf(w[t][k], float(y_r[row of (t, k)][h]), partial).  bf16() rounds to nearest even.
 *
 * Invalid inputs the device would flag (an expert id outside [-1, E), or twice in one token) make
 * eep_ref_dispatch fail with the first offending (rank, token).
 */
#ifndef EEP_TESTS_EP_REFERENCE_H
#define EEP_TESTS_EP_REFERENCE_H

#include <stdint.h>

#include "eep/ep.h"
#include "elastic/ep/ep_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- number formats (bit-exact, no hardware dependence) ---- */

/** float -> bf16, round to nearest even; NaN -> 0x7FFF (as CUDA's __float2bfloat16_rn). */
uint16_t eep_ref_f32_to_bf16(float f);
float    eep_ref_bf16_to_f32(uint16_t b);

/**
 * float -> fp8 e4m3 (OCP "E4M3FN": bias 7, no infinities, NaN = 0x7F/0xFF, max 448), round to
 * nearest even, saturating to +-448 (CUDA's __NV_SATFINITE); NaN -> 0x7F.
 */
uint8_t eep_ref_f32_to_e4m3(float f);
float   eep_ref_e4m3_to_f32(uint8_t b);

/**
 * Quantise one bf16 row to fp8: for every block of 128 channels, scale = amax / 448 (1 when the
 * block is all zero), q = e4m3(x / scale).
 */
void eep_ref_quantize_row(const uint16_t *x_bf16, int hidden, uint8_t *q, float *scales);

/* ---- inputs ---- */

typedef struct {
    int      num_tokens;
    uint8_t *x;            /* [num_tokens, hidden * elem]: bf16 or e4m3 bytes */
    float   *x_scales;     /* [num_tokens, hidden / 128], fp8 only */
    int64_t *topk_idx;     /* [num_tokens, K]; the int32 form is eep_ref_topk_to_i32() */
    float   *topk_weights; /* [num_tokens, K] */
} eep_ref_input_t;

typedef struct {
    uint64_t seed;
    double   masked_fraction; /* probability that a top-k entry is -1 */
    int      hotspot_expert;  /* >= 0: top-k lane 0 of every token is this expert */
    int      hotspot_only;    /* with hotspot_expert: every other lane is -1 */
    int      silent_rank;     /* >= 0: this rank has no tokens (num_tokens 0) */
    int      masked_rank;     /* >= 0: this rank's tokens all have only -1 entries */
    int      drop_every;      /* > 0: token t with t % drop_every == drop_every - 1 has only -1
                                 entries (received nowhere: later rows shift) */
    int      tokens_mode;     /* 0: every rank max_tokens; 1: rank r has max_tokens - r (>= 1) */
    int      num_tokens;      /* > 0: every rank has exactly this many (overrides tokens_mode) */
} eep_ref_gen_t;

/** A generator of balanced random gating, nothing masked, max_tokens tokens per rank. */
void eep_ref_gen_init(eep_ref_gen_t *gen, uint64_t seed);

/**
 * Make one rank's inputs: a pure function of (shape, gen, rank), so a process can make only its
 * own rank's inputs and still agree with a reference built from all of them.
 * @return EEP_OK, EEP_ERR_INVALID_ARG (bad shape), EEP_ERR_NO_MEMORY.
 */
eep_status_t eep_ref_input_generate(const eep_ep_shape_t *shape, const eep_ref_gen_t *gen, int rank,
                                    eep_ref_input_t *input_p);
void         eep_ref_input_free(eep_ref_input_t *input);

/** Copy [T, K] int64 ids into int32 (for EEP_INDEX_INT32 inputs). */
void eep_ref_topk_to_i32(const eep_ref_input_t *input, int num_topk, int32_t *out);

/* ---- dispatch ---- */

typedef struct {
    int      num_local;      /* El: the experts this rank holds */
    int64_t  num_rows;       /* padded total = expert_offsets[El] */
    int32_t *expert_counts;  /* [El] real rows */
    int64_t *expert_offsets; /* [El + 1] */
    int32_t *tokens_from;    /* [world] distinct tokens received from each source rank */
    uint8_t *x;              /* [num_rows, hidden * elem] */
    float   *x_scales;       /* [num_rows, hidden / 128], fp8 only */
    int32_t *topk_idx;       /* [num_rows, K] local ids or -1 */
    float   *topk_weights;   /* [num_rows, K] */
    int32_t *src_rank;       /* [num_rows]; -1 on padding rows */
    int32_t *src_token;      /* [num_rows]; -1 on padding rows */
    int32_t *src_lane;       /* [num_rows] the top-k lane of this row's expert; -1 padding */
} eep_ref_recv_t;

/**
 * Dispatch every rank's inputs; recv[r] receives rank r's expected outputs.
 * @param [in]  inputs  [world]
 * @param [out] recv    [world], filled on success (free with eep_ref_recv_free).
 * @param [out] bad_rank_p, bad_token_p  on EEP_ERR_INVALID_ARG, where (may be NULL).
 * @return EEP_OK; EEP_ERR_INVALID_ARG for an expert id out of range or repeated in a token;
 *         EEP_ERR_NO_MEMORY.
 */
eep_status_t eep_ref_dispatch(const eep_ep_shape_t *shape, const eep_ref_input_t *inputs,
                              eep_ref_recv_t *recv, int *bad_rank_p, int *bad_token_p);
void         eep_ref_recv_free(eep_ref_recv_t *recv);

/* ---- combine ---- */

/**
 * Combine: y[r] is rank r's expert output, [recv[r].num_rows, hidden] bf16 (padding rows are
 * ignored); out[s] receives [inputs[s].num_tokens, hidden] bf16 (caller-allocated).
 * @return EEP_OK or EEP_ERR_NO_MEMORY.
 */
eep_status_t eep_ref_combine(const eep_ep_shape_t *shape, const eep_ref_input_t *inputs,
                             const eep_ref_recv_t *recv, const uint16_t *const *y,
                             uint16_t *const *out);

/** eep_ref_combine for one source rank only: out = [inputs[src].num_tokens, hidden] bf16. */
eep_status_t eep_ref_combine_src(const eep_ep_shape_t *shape, const eep_ref_input_t *inputs,
                                 const eep_ref_recv_t *recv, const uint16_t *const *y, int src,
                                 uint16_t *out);

/* ---- rank-major layout (EEP_EP_LAYOUT_RANK_MAJOR) ---- */

/**
 * Rank @p rank's rank-major outputs in @p rm (free with eep_ref_recv_free): one row per received
 * token, sources ascending, then token order; ids local or -1, weights 0 where -1; expert_counts
 * per local expert; expert_offsets [world + 1] rows before each source; src_lane the token's
 * first local lane.  The inputs must have passed eep_ref_dispatch.
 */
eep_status_t eep_ref_rank_major(const eep_ep_shape_t *shape, const eep_ref_input_t *inputs,
                                int rank, eep_ref_recv_t *rm);

/**
 * Combine of rank-major handles: y[r] holds one row per row of rm[r] (the caller's sum of its
 * local experts); out[s][t] = bf16(sum over ranks r ascending holding t of float(y_r[row])).
 */
eep_status_t eep_ref_combine_rank_major(const eep_ep_shape_t *shape, const eep_ref_input_t *inputs,
                                        const eep_ref_recv_t *rm, const uint16_t *const *y,
                                        uint16_t *const *out);

/** eep_ref_combine_src, or with @p weighted 0 every weight 1 (eep_combine_ex's unweighted
    form, the backward of dispatch). */
eep_status_t eep_ref_combine_src_ex(const eep_ep_shape_t *shape, const eep_ref_input_t *inputs,
                                    const eep_ref_recv_t *recv, const uint16_t *const *y, int src,
                                    int weighted, uint16_t *out);

/** eep_ref_combine for every source rank, weighted or (@p weighted 0) not. */
eep_status_t eep_ref_combine_ex(const eep_ep_shape_t *shape, const eep_ref_input_t *inputs,
                                const eep_ref_recv_t *recv, const uint16_t *const *y, int weighted,
                                uint16_t *const *out);

/**
 * The top-k weight gradients (eep_combine_ex's topk_grad): grad[s], [inputs[s].num_tokens, K]
 * fp32 (caller-allocated), gets for lane k of token t the dot of y and g (rank r's rows, both
 * [recv[r].num_rows, hidden] bf16) at (t, k)'s row on the expert's rank, in the kernel's order
 * (eep/ep.h), and 0 for lanes of id -1.
 * @return EEP_OK or EEP_ERR_NO_MEMORY.
 */
eep_status_t eep_ref_topk_grad(const eep_ep_shape_t *shape, const eep_ref_input_t *inputs,
                               const eep_ref_recv_t *recv, const uint16_t *const *y,
                               const uint16_t *const *g, float *const *grad);

/* ---- degraded mode (issue 24, eep/ep.h "Degraded mode") ---- */
/**
 * The inputs as the live ranks' kernels see them with the ranks of @p dead_mask dead: a dead rank
 * has no tokens (it never runs), and every top-k lane of a live rank whose expert the shape's
 * placement puts on a dead rank becomes -1, its weight kept (combine leaves it out and does not
 * renormalise the others).  eep_ref_dispatch, eep_ref_rank_major and the combine references of
 * @p out then give every live rank's expected outputs (a dead rank's are meaningless).
 * @param [in]  inputs     [world], checked first as eep_ref_dispatch checks them.
 * @param [out] out        [world], filled on success (free each with eep_ref_input_free).
 * @param [out] dropped    NULL, or [world] buffers of inputs[r].num_tokens * K bytes: 1 where
 *                         lane k of token t is dropped, else 0 (eep_dispatch_args_t.dropped_topk);
 *                         a dead rank's is left alone.
 * @param [out] n_dropped  NULL, or [world]: each rank's dropped lanes (num_dropped; 0 when dead).
 * @return EEP_OK; EEP_ERR_INVALID_ARG (a mask past the world, every rank dead, an id out of
 *         range or repeated); EEP_ERR_NO_MEMORY.
 */
eep_status_t eep_ref_degrade(const eep_ep_shape_t *shape, const eep_ref_input_t *inputs,
                             uint64_t dead_mask, eep_ref_input_t *out, uint8_t *const *dropped,
                             int32_t *n_dropped);

/**
 * eep_ref_degrade for hybrid mode with forwarding: ranks in nodes of @p lsa_size GPUs
 * (node-major), a token of rank s crossing to another node at that node's rank with s's local
 * index (its forwarder).  A lane of s is also dropped when its expert's node is another one whose
 * forwarder for s is dead.  @p lsa_size 1 (no forwarding) is eep_ref_degrade.
 * @return as eep_ref_degrade; EEP_ERR_INVALID_ARG also when @p lsa_size does not divide the world.
 */
eep_status_t eep_ref_degrade_lsa(const eep_ep_shape_t *shape, const eep_ref_input_t *inputs,
                                 uint64_t dead_mask, int lsa_size, eep_ref_input_t *out,
                                 uint8_t *const *dropped, int32_t *n_dropped);

/** splitmix64 step: the generator's only source of randomness (also for tests). */
uint64_t eep_ref_rand(uint64_t *state);

#ifdef __cplusplus
}
#endif

#endif /* EEP_TESTS_EP_REFERENCE_H */
