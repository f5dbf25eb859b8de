/*
 * ep_layout.h - the arithmetic of dispatch/combine layouts, shared by the host runtime, the CPU
 * reference (tests/common/ep_reference.c) and the benchmarks.
 *
 * Nothing here touches a GPU: sizes of the per-token wire record, of the receive buffers and of
 * the count-exchange workspace, the expert-major offsets, and the SM bandwidth model
 * (docs/dispatch.md, "How many SMs").  Kernels get these numbers through their parameter structs
 * or template arguments; they never include this header.
 */
#ifndef EEP_EP_LAYOUT_H
#define EEP_EP_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "eep/ep.h"
#include "eep/membership.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The shape every rank shares; a dispatch's own num_tokens is not part of it. */
typedef struct {
    int         world;      /* ranks */
    int         max_tokens; /* max_tokens_per_rank */
    int         hidden;
    int         num_topk;
    int         num_experts;
    int         alignment; /* expert_alignment */
    eep_dtype_t dtype;
    /*
     * The expert placement (include/eep/membership.h): NULL, the default policy
     * (eep_placement_default for num_experts on world ranks: contiguous blocks as even as
     * possible, which for num_experts % world == 0 is rank r holding [r El, (r + 1) El)); else
     * [num_experts], not owned (it must outlive every use of the shape), with local_max the most
     * experts one rank holds under it.  eep_ep_shape_place() checks a placement and sets both.
     * Zeroed shapes (the fields left out of an initializer) have the default.
     */
    int                       local_max;
    const eep_expert_place_t *placement;
} eep_ep_shape_t;

/**
 * The product's shape, which the bench, the tools and the tests start from: a DeepSeek-V3-sized
 * MoE layer at prefill (4096 tokens a rank, H 7168, top-k 8, 256 experts, alignment 128, bf16)
 * on @p world ranks; callers change what their case needs.
 */
eep_ep_shape_t eep_ep_shape_product(int world);

/*
 * One token on the wire (dispatch): [hidden bytes][fp8 scales][metadata], each part starting on a
 * EEP_EP_WIRE_ALIGN boundary (TMA wants 16, bulk copies prefer 32).  Metadata: K int32 global
 * expert ids, K float weights, one int32 source token index.
 */
#define EEP_EP_WIRE_ALIGN 32

/*
 * Flagged lines (eep_ep_lines()), chosen by max_tokens_per_rank, the same on every rank.
 * A combine partial row, for buffers of max_tokens_per_rank <= EEP_EP_COMBINE_LINES_MAX_TOKENS:
 * a run of 128-byte lines, each 7 x 16 bytes of data (56 bf16 channels) and a 16-byte flag slot
 * (kernels/ep/ll_line.cuh); else the data and a 16-byte tag (u64 call sequence + padding),
 * stored last.  The lines save the fence and the tag (T 128: 16.7 -> 14.3 us) but cost 14% more
 * bytes: the combine took 43.1 -> 46.4 us at T 512, 84.1 -> 91.6 at T 1024 and 280 -> 342 at
 * T 4096 (2026-11-30, 2 x H200).  The dispatch records' hidden bytes, for buffers of
 * max_tokens_per_rank <= EEP_EP_DISPATCH_LINES_MAX_TOKENS (eep_ep_record_layout): there the
 * lines won up to T 1024 (cached 78.6 -> 68.8 us, no-cpu-sync 95.6 -> 89.8; T 512 even).
 */
#define EEP_EP_COMBINE_LINES_MAX_TOKENS  256
#define EEP_EP_DISPATCH_LINES_MAX_TOKENS 1024
#define EEP_EP_COMBINE_LINE_BYTES        128
#define EEP_EP_COMBINE_LINE_DATA         112
#define EEP_EP_COMBINE_TAG_BYTES         16

typedef struct {
    size_t hidden_bytes; /* hidden * element size */
    size_t scale_bytes;  /* fp8: hidden / 128 * 4; bf16: 0 */
    size_t scale_off;    /* offsets inside the record */
    size_t meta_off;
    size_t meta_bytes;  /* K * 4 + K * 4 + 4 + K * 4, padded to 8, + the 8-byte tag */
    size_t tag_off;     /* the record's tag: the sender's call sequence, stored last */
    size_t token_bytes; /* whole record, a multiple of EEP_EP_WIRE_ALIGN */
} eep_ep_wire_t;

/*
 * Count-exchange slot: one per (peer, parity), written by that peer.  Every word is
 * (sequence << 32) | value, where sequence is the low 32 bits of the call number (never 0), so a
 * slot never needs cleaning: "arrived" means "the high half equals my sequence".  Two parities so
 * that a fast peer's call n+1 cannot overwrite call n before it was read (docs/dispatch.md).
 *   word 0        tokens the peer sends me (distinct tokens): also the dispatch's handshake
 *   word 1        unused (records carry tags since the second kernel version)
 *   word 2        combine started (the combine's handshake; its rows carry tags)
 *   word 3 + e    rows for my local expert e (El words)
 * The slot is padded to 128 bytes so that two peers never share a cache line.
 */
#define EEP_EP_COUNT_SLOT_ALIGN 128
#define EEP_EP_PARITIES         2

/* Byte sizes of the regions of one rank's share of the symmetric window. */
typedef struct {
    size_t count_slot_bytes;    /* one (peer, parity) slot */
    size_t counts_bytes;        /* world * parities * slot */
    size_t allocator_bytes;     /* per-destination slot allocators: world * 4, padded */
    size_t dispatch_recv_bytes; /* parities * world regions * max_tokens * token_bytes */
    size_t combine_recv_bytes;  /* parities * min(world, K) regions * max_tokens * row */
    size_t combine_row_bytes;   /* lines of 128 bytes, or hidden * 2 + the tag */
    size_t total_bytes;         /* all of the above, each region 256-aligned, total 2 MiB-aligned */
    /* offsets from the start of this rank's share */
    size_t counts_off, allocator_off, dispatch_recv_off, combine_recv_off;
} eep_ep_buffer_sizes_t;

/**
 * Check a shape (every field in range, at most EEP_EP_MAX_LOCAL_EXPERTS experts on a rank,
 * alignment a power of two, hidden a multiple of 16 bytes and, for fp8, of 128 channels).  A
 * placement itself is checked by eep_ep_shape_place (O(num_experts)), not here.
 * @param [out] why_p  on failure, the offending field's name (may be NULL).
 * @return EEP_OK or EEP_ERR_INVALID_ARG (not logged: callers log with their own context).
 */
eep_status_t eep_ep_shape_check(const eep_ep_shape_t *shape, const char **why_p);

/** @return bytes of one element of @p dtype (2 or 1), 0 for an unknown dtype. */
size_t eep_ep_elem_bytes(eep_dtype_t dtype);

/** @return @p value rounded up to a multiple of @p align (align > 0). */
int64_t eep_ep_align_up(int64_t value, int64_t align);

/** @return the most experts one rank holds (ceil(num_experts / world) for the default placement;
    every rank's count when num_experts % world == 0): what count slots and the worst-case row
    count are sized for.  The shape must be valid. */
int eep_ep_local_experts(const eep_ep_shape_t *shape);

/**
 * Use @p placement ([shape->num_experts], or NULL: the default) for @p shape: checked with
 * eep_placement_check, then shape->placement and shape->local_max set.  A placement equal to the
 * default is stored as NULL (the kernels' arithmetic fast path when num_experts % world == 0).
 * @return EEP_OK; EEP_ERR_INVALID_ARG (logged by the checker, naming the expert), the shape
 *         unchanged.
 */
eep_status_t eep_ep_shape_place(eep_ep_shape_t *shape, const eep_expert_place_t *placement);

/** Where expert @p e (0 <= e < num_experts) lives: its rank and local slot. */
void eep_ep_expert_place(const eep_ep_shape_t *shape, int e, int *rank_p, int *slot_p);

/**
 * The experts @p rank holds: their global ids by local slot into @p ids_p (may be NULL; else
 * room for eep_ep_local_experts()).  @return their count (0 for a rank that holds none).
 * O(1) for the default placement, O(num_experts) otherwise.
 */
int eep_ep_rank_experts(const eep_ep_shape_t *shape, int rank, int32_t *ids_p);

/** @return 1 when expert e lives on rank e / El in slot e % El, El = num_experts / world (the
    default placement of a divisible count: the kernels' arithmetic fast path), else 0. */
int eep_ep_place_even(const eep_ep_shape_t *shape);

/** The kernels' placement table (eep_epk_params_t.place): @p table_p [num_experts] gets
    (rank << 16) | slot of every expert. */
void eep_ep_place_table(const eep_ep_shape_t *shape, uint32_t *table_p);

/** @return which transfers travel as flagged lines, a mask of EEP_EPK_LINES_DISPATCH and
    EEP_EPK_LINES_COMBINE (kernels/ep/ep_params.h), from max_tokens alone. */
int eep_ep_lines(const eep_ep_shape_t *shape);

/** @return 1 when shapes @p a and @p b lay out the window's dispatch/combine area identically
    (every offset, size, record and row format), so calls of both can share one runtime: every
    tag, flag and count word sits where the other expects one. */
int eep_ep_layout_equal(const eep_ep_shape_t *a, const eep_ep_shape_t *b);

/*
 * What a runtime's dispatch/combine area is laid out for: the largest of every shape it serves
 * (eep_ep_reserve; else the shape of its first call), so that calls of any of them find every
 * tag, line flag, count word and call counter of the others where they expect one.  Shapes
 * that share one must agree on world and max_tokens (which choose the line formats).
 */
typedef struct {
    int    world, max_tokens;
    int    num_topk;     /* largest K: record metadata, combine regions */
    int    num_local;    /* largest El: count slots */
    size_t hidden_bytes; /* largest hidden * element size: a record's data */
    size_t scale_bytes;  /* largest fp8 scales */
    size_t crow_data;    /* largest combine row data: hidden * 2, or 16 * ceil(K / 4) */
} eep_ep_envelope_t;

/** The envelope of one shape (the shape must be valid). */
void eep_ep_envelope_of(const eep_ep_shape_t *shape, eep_ep_envelope_t *env_p);

/**
 * Grow @p env to hold @p shape too.
 * @param [out] why_p  on failure, the field that differs ("world", "max_tokens_per_rank").
 * @return EEP_OK, or EEP_ERR_INVALID_ARG (env unchanged) for a bad shape or one of another world
 *         or max_tokens (not logged).
 */
eep_status_t eep_ep_envelope_add(eep_ep_envelope_t *env, const eep_ep_shape_t *shape,
                                 const char **why_p);

/**
 * @param [in] combine_only  1: only what a combine of @p shape uses (its row), not the records.
 * @return NULL when calls of @p shape can use the area laid out for @p env, else the name of
 *         the first thing that does not fit.
 */
const char *eep_ep_envelope_misfit(const eep_ep_envelope_t *env, const eep_ep_shape_t *shape,
                                   int combine_only);

/** 1 when @p a and @p b lay out the same area (every field equal), else 0. */
int eep_ep_envelope_equal(const eep_ep_envelope_t *a, const eep_ep_envelope_t *b);

/** Buffer sizes of an envelope (eep_ep_buffer_sizes() is that of the shape's own envelope). */
void eep_ep_envelope_sizes(const eep_ep_envelope_t *env, eep_ep_buffer_sizes_t *sizes_p);

/** The record layout of an envelope (eep_ep_record_layout() of its largest shape). */
void eep_ep_envelope_record(const eep_ep_envelope_t *env, eep_ep_wire_t *wire_p);

/** Fill the wire layout of one dispatched token. */
void eep_ep_wire_layout(const eep_ep_shape_t *shape, eep_ep_wire_t *wire_p);

/** The direct-mode dispatch's record: the wire layout, or for small buffers (eep_ep_lines()) with
    the hidden bytes as flagged 128-byte lines and the record a whole number of lines. */
void eep_ep_record_layout(const eep_ep_shape_t *shape, eep_ep_wire_t *wire_p);

/** @return the worst-case received rows of the rank that holds the most experts (see
    eep_ep_recv_rows_max()), -1 for a bad shape. */
int64_t eep_ep_rows_max(const eep_ep_shape_t *shape);

/** Fill the buffer sizes of one rank; @return EEP_OK or EEP_ERR_INVALID_ARG for a bad shape. */
eep_status_t eep_ep_buffer_sizes(const eep_ep_shape_t *shape, eep_ep_buffer_sizes_t *sizes_p);

/**
 * Bytes of the hybrid kernels' GIN area (kernels/ep/ep_gin.cuh), which follows the
 * dispatch/combine area in the window: the send staging (world x max_tokens dispatch records,
 * world x max_tokens combine rows, world count slots) and, with @p lsa_size > 1 GPUs a node, the
 * forwarding regions (per parity and source node: max_tokens records, their forward metadata,
 * the node's count slots, the node's combine rows; the local ranks' combine done words; the
 * forward metadata staging); 2 MiB-aligned.  @return 0 for a bad shape or an @p lsa_size that
 * does not divide the world.
 */
size_t eep_ep_gin_stage_bytes(const eep_ep_shape_t *shape, int lsa_size);

/**
 * The send staging of a runtime laid out for @p env with one GPU a node (no forwarding regions):
 * the kernels stage at the envelope's record and row sizes and its max_tokens, so every shape
 * that fits the envelope fits this (the staging is local, read by this rank's own puts only, and
 * drained before the next call writes it).  2 MiB-aligned.
 */
size_t eep_ep_gin_stage_bytes_env(const eep_ep_envelope_t *env);

/** The largest eep_ep_gin_stage_bytes over the LSA sizes that divide the world (for a caller
    that sizes the window before the runtime knows its teams). */
size_t eep_ep_gin_stage_bytes_max(const eep_ep_shape_t *shape);

/**
 * Zero the kernels' parameters (kernels/ep/ep_params.h) and fill what the shape decides: rank and
 * shape fields, the wire record, the window offsets of the counts and receive regions (the
 * dispatch/combine area starts @p ep_off bytes into the window) and the control words' address
 * (@p my_window: this rank's window as the device sees it).  Pointers to the runtime's other
 * memory, inputs and outputs are the caller's.  @return as eep_ep_buffer_sizes().
 */
struct eep_epk_params;
eep_status_t eep_ep_params_layout(const eep_ep_shape_t *shape, int rank, size_t ep_off,
                                  const void *my_window, struct eep_epk_params *params_p);

/** eep_ep_params_layout for a call of @p shape in an area laid out for @p env (which it must
    fit, eep_ep_envelope_misfit): the shape's fields from @p shape, every offset, stride, record
    and row format from @p env. */
eep_status_t eep_ep_params_layout_env(const eep_ep_shape_t *shape, const eep_ep_envelope_t *env,
                                      int rank, size_t ep_off, const void *my_window,
                                      struct eep_epk_params *params_p);

/**
 * Exclusive prefix sums of the padded expert counts.
 * @param [in]  counts     [num_local] real rows per local expert (>= 0).
 * @param [in]  alignment  power of two >= 1.
 * @param [out] offsets    [num_local + 1]: offsets[0] = 0, offsets[e + 1] = offsets[e] +
 *                         align_up(counts[e], alignment).
 * @return the total padded rows (offsets[num_local]).
 */
int64_t eep_ep_expert_offsets(const int32_t *counts, int num_local, int alignment,
                              int64_t *offsets);

/**
 * CPU_SYNC's host mirror, u64[num_local + 2]: the dispatch kernel writes words [0, num_local]
 * (each expert's count, then the rows) as (low half of the call's sequence) << 32 | value and
 * the sequence in word num_local + 1, without a fence (eep_epk_mirror_put), so they land in any
 * order; the host zeroes the sequence word before the launch.
 * @param [in] ready  words [0, ready) already seen with the call's tag (0 at first).
 * @return the words [0, r) now known to carry the tag (r >= @p ready; 0 while the sequence word
 *         reads 0); num_local + 1 once every count and the rows are there.
 */
int eep_ep_mirror_ready(const volatile uint64_t *mirror, int num_local, int ready);

#ifdef __cplusplus
}
#endif

#endif /* EEP_EP_LAYOUT_H */
