/*
 * eep_step.h - the checkable MoE step of eep-rank: seeded routing, token data, a stand-in expert
 * and the expected results, as pure host functions (no CUDA), so that tests/tools/test_eep_step.c
 * checks the checker on the CPU.
 *
 * Every value is a function of (seed, step, source rank, token, channel), so each rank can
 * compute what any rank sends, and therefore exactly what it must receive (counts per local
 * expert, every row, in the order eep/ep.h promises: expert-major, then source rank, then token)
 * and what combine must give back for its own tokens.  Token data are multiples of 1/8 in
 * [-1/2, 1/2], weights multiples of 1/4 and the expert scales 1 + (e % 4) / 4, so every product and
 * sum is exact in bf16 and fp32: the expected bits do not depend on the summation order.
 * Expert alignment is 1 (no padding rows).  The placement is the shape's: a view's
 * (eep_membership_info_t.placement), or NULL for the default policy (eep_placement_default:
 * contiguous blocks as even as possible, so 12 experts on 5 ranks give 3, 3, 2, 2, 2), as the
 * data plane has it (eep/ep.h).
 */
#ifndef EEP_TOOLS_STEP_H
#define EEP_TOOLS_STEP_H

#include <stddef.h>
#include <stdint.h>

#include "eep/membership.h"
#include "eep/status.h"

typedef struct {
    int      world, rank;
    int      tokens;  /* per rank, every rank the same */
    int      hidden;  /* bf16 channels */
    int      topk;    /* distinct experts per token, <= num_experts */
    int      experts; /* >= 1, any count (ranks may hold different counts, or none) */
    uint64_t seed, step;
    /* [experts], or NULL: the default policy for (experts, world); not owned */
    const eep_expert_place_t *placement;
    /* token data of (step + data_salt): a second dispatch on a step's routing with other data
       (eep-rank --mode cached: a cached dispatch, as a backward pass sends gradients); 0 */
    uint64_t data_salt;
} eep_step_shape_t;

/** @return EEP_OK, or EEP_ERR_INVALID_ARG naming the field (logged; a placement is checked
    with eep_placement_check). */
eep_status_t eep_step_shape_check(const eep_step_shape_t *s);

/** The experts this rank (s->rank) holds: their global ids by local slot into @p ids (may be
    NULL; else room for s->experts).  @return their count (may be 0). */
int eep_step_local_experts(const eep_step_shape_t *s, int32_t *ids);

/** @return 1 when @p local_experts [@p num_local] (the view's, eep_membership_info_t) are the
    experts the step places on this rank, slot by slot; else 0. */
int eep_step_local_match(const eep_step_shape_t *s, const int32_t *local_experts, int num_local);

/**
 * The most rows one rank can receive in one step (expert alignment 1) at any world size from 1 to
 * @p max_world under the default placement (the rank of the most experts,
 * ceil(experts / world)): a buffer sized once holds every such view's step.
 * @return the row count; -1 when an argument is < 1.
 */
int64_t eep_step_rows_max(int tokens, int topk, int experts, int max_world);

/** bf16 bits of a float (round to nearest even) and back. */
uint16_t eep_step_bf16(float f);
float    eep_step_f32(uint16_t b);

/** Routing of source rank @p src: topk_idx [tokens * topk] (distinct, global), weights. */
void eep_step_routing(const eep_step_shape_t *s, int src, int64_t *topk_idx, float *weights);

/** Token data of source rank @p src: x [tokens * hidden] bf16. */
void eep_step_tokens(const eep_step_shape_t *s, int src, uint16_t *x);

/** The stand-in expert's scale for global expert @p e. */
float eep_step_expert_scale(int e);

/**
 * What this rank (s->rank) must receive: counts [its local experts] per local slot and, when
 * @p rows is not NULL, every row [total * hidden] in order.
 * @return the total row count; -1 when out of memory.
 */
int64_t eep_step_expected_recv(const eep_step_shape_t *s, int32_t *counts, uint16_t *rows);

/**
 * Rank-major (EEP_EP_LAYOUT_RANK_MAJOR, eep/ep.h): what this rank must receive, one row per token
 * that names at least one of its experts, sources ascending, then tokens.  counts [local experts]
 * gets the tokens per local slot (as expert-major's with alignment 1) and, when not NULL,
 * src_rows [world + 1] the rows before each source; when @p rows is not NULL, rows [total *
 * hidden], idx [total * topk] (the local slot of lane k's expert, or -1) and w [total * topk] (its
 * weight where idx >= 0, else 0) are filled too (idx and w must then not be NULL).
 * @return the total row count; -1 when out of memory.
 */
int64_t eep_step_expected_recv_ranked(const eep_step_shape_t *s, int32_t *counts, int32_t *src_rows,
                                      uint16_t *rows, int32_t *idx, float *w);

/**
 * The caller's side of a rank-major step (it sums its local experts itself): for each of @p nrows
 * rows, y[row] = bf16(p) with p accumulated from 0 over lanes k ascending whose idx[row][k] >= 0
 * as p = w[row][k] * bf16(x[row] * scale(global expert of slot idx[row][k])) + p: the partial
 * that the expert-major combine forms on this rank, so eep_step_expected_out holds for both
 * layouts.  A slot outside this rank's experts gives y = NaN bits (0x7fc0): the check then fails.
 */
void eep_step_expert_apply_ranked(const eep_step_shape_t *s, int64_t nrows, const int32_t *idx,
                                  const float *w, const uint16_t *x, uint16_t *y);

/**
 * The stand-in expert on the received layout: y[row] = bf16(x[row] * scale(global expert of the
 * row's group)), groups in local slot order with @p counts rows each.
 */
void eep_step_expert_apply(const eep_step_shape_t *s, const int32_t *counts, const uint16_t *x,
                           uint16_t *y);

/**
 * What combine must give this rank for its own tokens: out [tokens * hidden].
 * @return EEP_OK; EEP_ERR_NO_MEMORY.
 */
eep_status_t eep_step_expected_out(const eep_step_shape_t *s, uint16_t *out);

/**
 * Compare @p n bf16 values.
 * @return -1 when equal, else the first differing index.
 */
int64_t eep_step_compare(const uint16_t *got, const uint16_t *want, int64_t n);

#endif /* EEP_TOOLS_STEP_H */
