/*
 * eep_bench_ep_parts.h - what the files of `eep-bench ep` share: its options, one rank's results,
 * the CU_TRY shorthand, one declaration per function a file calls in another.
 *
 *   eep_bench_ep.c        the entry: forks the ranks, drives each (inputs, reference, GPU, rows)
 *   eep_bench_ep_opts.c   the command line in, a table row out
 *   eep_bench_ep_check.c  expected outputs, poison, element checks
 *   eep_bench_ep_floor.c  the bandwidth model of each row's floor
 *   eep_bench_ep_run.c    one implementation checked then timed (baseline, ours)
 *   eep_bench_ep_trace.c  --trace: the per-phase spans of ours
 *
 * A plain .h, not an _int.h: tests/repo/test_layering.sh (rule 5) keeps bench/ from including
 * any *_int.h, which it reads as the library's private headers.
 */
#ifndef EEP_BENCH_EP_PARTS_H
#define EEP_BENCH_EP_PARTS_H

#include "eep_bench_ep.h"

#include <stddef.h>
#include <stdint.h>

#include "elastic/ep/ep_knobs.h"
#include "tests/common/ep_reference.h"

/* What the command line asked for (eep_bench_ep_parse_opts). */
typedef struct {
    int               nranks;   /* > 0: fork this many local ranks */
    int               baseline; /* --baseline nccl */
    int               check;
    int               ours;       /* run eep_dispatch/eep_combine (default; --no-ours skips) */
    eep_ep_mode_t     mode;       /* of ours: --mode cpu-sync|no-cpu-sync|cached */
    int               num_sms;    /* of ours: the SM budget of this run (0: the whole device) */
    int               budgets[8]; /* --num-sms B[,B...]: one row of ours per budget */
    int               num_budgets;
    int               skip_pad; /* of ours: --skip-padding-x (padding rows' x left as it was) */
    eep_ep_layout_t   layout;   /* of ours: --layout expert|rank */
    int               iters, warmup;
    uint64_t          seed;
    const char       *gating; /* random, masked, hotspot, hotspot-only, silent, masked-rank, t1 */
    eep_ep_shape_t    shape;
    int               tokens; /* --tokens: tokens per rank (shape.max_tokens unless --max-tokens) */
    int               max_tokens; /* --max-tokens: the buffers' max_tokens_per_rank, or 0 */
    eep_index_dtype_t idx_dtype;
} bench_opts_t;

/* Per-rank results, all-gathered to rank 0. */
typedef struct {
    double  dispatch_us, combine_us;
    double  dispatch_bytes, combine_bytes; /* to other ranks, per call */
    double  recv_bytes; /* received-token bytes (hidden + scales), local included, per call */
    int     sms;        /* sending SMs of ours (0: not ours) */
    int     copy_sms;   /* its copying SMs */
    int     budget;     /* its SM budget (0: the whole device) */
    double  dispatch_hbm, combine_hbm; /* the fewest HBM bytes each moves on this rank */
    double  hbm_gbps;                  /* this rank's device-to-device copy rate, same run */
    double  graph_dispatch_us, graph_combine_us; /* ours, one call per CUDA graph replay */
    double  graph_pair_us; /* ours, per dispatch+combine pair, GRAPH_PAIRS pairs per graph */
    int64_t errors;
    int     ran;
    char    why[96]; /* when not run */
} bench_result_t;

/* Call a driver function: on failure, set status (logged, mapped) and goto out. */
#define CU_TRY(_call)                                                                              \
    do {                                                                                           \
        status = eep_status_from_cu((_call), #_call);                                              \
        if (status != EEP_OK) {                                                                    \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

#define GRAPH_PAIRS 8 /* pairs in the pair graph: a decode step's MoE layers, in a row */

/* eep_bench_ep_opts.c */

/** Parse @p argv into @p o. @return 0 to run, 1 after --help, -1 after a message on stderr. */
int eep_bench_ep_parse_opts(int argc, char **argv, bench_opts_t *o);

/** The CPU reference's generator of @p o (seed, tokens, gating). @return 0, -1: unknown gating. */
int eep_bench_ep_gen_from_opts(const bench_opts_t *o, eep_ref_gen_t *gen);

/** Rank 0: the table row of @p impl from every rank's results @p all[0, world). */
void eep_bench_ep_print_row(const char *impl, const bench_opts_t *o, const bench_result_t *all,
                            int world);

/* eep_bench_ep_check.c */

/** Fill the table the expert outputs are drawn from (once, before eep_bench_ep_make_y). */
void eep_bench_ep_y_table_init(void);

/** Expert outputs [r->num_rows + 1, hidden] bf16 of @p rank's layout @p r; malloc'd, or NULL. */
uint16_t *eep_bench_ep_make_y(const eep_ep_shape_t *s, const eep_ref_recv_t *r, int rank);

/** Count differing elements of size @p elem; print the first few. */
int64_t eep_bench_ep_diff(const char *what, const void *got, const void *want, size_t n,
                          size_t elem, int rank);

/**
 * Check the dispatch outputs in @p v against @p r.  @p x_copies_to: recv_x rows past the real ones
 * and below this may hold anything (copies of x: the one-rank copy engine, eep/ep.h); 0: none.
 * @return bad elements, -1 if unreadable.
 */
int64_t eep_bench_ep_check_dispatch(eep_bench_ctx_t *ctx, const eep_ep_shape_t *s,
                                    const eep_bl_view_t *v, const eep_ref_recv_t *r, int skip_pad,
                                    int rank_major, int64_t x_copies_to);

/** Enqueue 0xa5 into every output of @p v on ctx->stream. */
eep_status_t eep_bench_ep_poison_outputs(eep_bench_ctx_t *ctx, const eep_ep_shape_t *s,
                                         const eep_bl_view_t *v);

/* eep_bench_ep_floor.c */

/** Bytes of the tokens @p rank receives per dispatch (hidden + scales, its own included). */
double eep_bench_ep_recv_token_bytes(const eep_ep_shape_t *s, const eep_ref_input_t *in, int rank);

/** The fewest HBM bytes of this rank's dispatch (*d_p) and combine (*c_p) in @p layout. */
void eep_bench_ep_hbm_bytes(const eep_ep_shape_t *s, const eep_ref_input_t *in, int rank,
                            eep_ep_layout_t layout, double *d_p, double *c_p);

/** Bytes this rank sends to other ranks per dispatch (*d_p) and per combine (*c_p). */
void eep_bench_ep_traffic(const eep_ep_shape_t *s, const eep_ref_input_t *in, int rank, double *d_p,
                          double *c_p);

/** Device-to-device copy rate of this GPU (GB/s, read + write), measured now; 0 if it failed. */
double eep_bench_ep_measure_hbm_gbps(eep_bench_ctx_t *ctx);

/** The ep knobs as this process sees them (loaded once). */
const eep_ep_config_t *eep_bench_ep_knobs(void);

/** The link rate of the floor: EEP_EP_LINK_GBPS when set, else the model's H200 default. */
double eep_bench_link_gbps(void);

/* eep_bench_ep_run.c */

/** CLOCK_MONOTONIC, in us. */
double eep_bench_ep_now_us(void);

/** The baseline on this rank: check (o->check), then time, into @p res. */
eep_status_t eep_bench_ep_run_baseline(eep_bench_ctx_t *ctx, const bench_opts_t *o,
                                       const eep_ref_input_t *in, const eep_ref_recv_t *recv,
                                       uint16_t *const *y_host, const uint16_t *out_want,
                                       const eep_bench_inputs_t *din, bench_result_t *res);

/** Ours on this rank: check (o->check), then time, into @p res; res->why says what stopped it. */
eep_status_t eep_bench_ep_run_ours(eep_bench_ctx_t *ctx, const bench_opts_t *o,
                                   const eep_ref_input_t *in, const eep_ref_recv_t *recv,
                                   uint16_t *const *y_host, const uint16_t *out_want,
                                   const eep_bench_inputs_t *din, bench_result_t *res);

/* eep_bench_ep_trace.c */

/** --trace: ours' last dispatch and combine, S senders of G blocks; nothing without a trace. */
void eep_bench_ep_print_trace(eep_runtime_t *rt, int rank, int S, int G);

#endif /* EEP_BENCH_EP_PARTS_H */
