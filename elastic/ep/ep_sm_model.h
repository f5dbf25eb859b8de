/*
 * ep_sm_model.h - the SM bandwidth model: how many SMs a dispatch or combine of a shape sends
 * with, from per-SM rates and the link rate (docs/dispatch.md, section 5).
 */
#ifndef EEP_EP_SM_MODEL_H
#define EEP_EP_SM_MODEL_H

#include "elastic/ep/ep_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The SM bandwidth model (direct mode, every peer reachable by NVLink).  See docs/dispatch.md.
 * A token of B wire bytes reaches t = g(world) distinct ranks on average (balanced gating): the
 * kernel reads B from HBM once and writes t * B, a fraction (1 - 1/world) of it over NVLink.  For
 * NVLink to be the bottleneck the SMs must write link_gbps / (1 - 1/world) GB/s; one SM writes
 * sm_write_gbps * B / (B + token_overhead_bytes) (a fixed per-token cost: metadata, slot atomics,
 * signals) and reads sm_read_gbps.  SMs = ceil(margin * max(write / per-SM write, read / per-SM
 * read)), rounded up to even, at least min_sms, at most half the device (the copy blocks take
 * the rest; at least 1).  One rank: device_sms / EEP_EP_LOCAL_SEND_SHARE.  DeepEP's defaults:
 * 200 GB/s read, 50 GB/s write per SM, margin 1.25, link = 0.9 * sum of NVLink speeds.
 */
typedef struct {
    int         world;
    int         hidden;
    eep_dtype_t dtype;
    int         num_topk;
    int         num_experts;
    int         device_sms;           /* the device's SM count (132 on H100/H200) */
    double      link_gbps;            /* NVLink bandwidth out of one GPU, GB/s, one direction */
    double      sm_read_gbps;         /* per SM */
    double      sm_write_gbps;        /* per SM, for large tokens */
    double      token_overhead_bytes; /* fixed per-token cost, as bytes of write time */
    double      margin;               /* > 1 */
    int         min_sms;
} eep_ep_sm_model_t;

typedef struct {
    double distinct_ranks; /* t: expected distinct destination ranks per token */
    double token_bytes;    /* B */
    double write_gbps;     /* what the SMs must write for NVLink to saturate */
    double read_gbps;
    double per_sm_write_gbps;
    int    num_sms;
} eep_ep_sm_estimate_t;

/* DeepEP's per-SM constants and an H200's NVLink (18 links x 26.56 GB/s x 0.9). */
#define EEP_EP_SM_READ_GBPS      200.0
#define EEP_EP_SM_WRITE_GBPS     50.0
#define EEP_EP_SM_MARGIN         1.25
#define EEP_EP_TOKEN_OVERHEAD_B  1024.0
#define EEP_EP_DEFAULT_LINK_GBPS 430.0
#define EEP_EP_MIN_SMS           4
/* One rank: the senders are this fraction of the device (they store metadata and tags only). */
#define EEP_EP_LOCAL_SEND_SHARE  8

/** Fill @p model with the defaults above for the given shape and device. */
void eep_ep_sm_model_init(eep_ep_sm_model_t *model, int world, int hidden, eep_dtype_t dtype,
                          int num_topk, int num_experts, int device_sms);

/**
 * g(G): expected number of distinct groups hit by one token's @p num_topk distinct experts drawn
 * uniformly from @p num_experts split into @p groups equal groups.
 */
double eep_ep_expected_groups(int num_experts, int num_topk, int groups);

/**
 * Run the model.  world 1 (no link traffic) gives device_sms / EEP_EP_LOCAL_SEND_SHARE: the
 * senders store metadata only and the copy blocks move every byte (DeepEP's all-SMs choice left
 * this design one copy block).
 * @param [out] est_p  the intermediate numbers (may be NULL).
 * @return the SM count, >= 1; -1 for a model with out-of-range fields.
 */
int eep_ep_sm_model_run(const eep_ep_sm_model_t *model, eep_ep_sm_estimate_t *est_p);

/*
 * The sending SMs of one call on the whole device, by precedence: the call's num_sms (> 0), else
 * the knob EEP_EP_NUM_SMS (> 0), else the model with the knobs' constants (EEP_EP_LINK_GBPS 0: the
 * device's @p link_gbps if > 0, else the H200 default).  Always clamped to [1, device_sms].
 * Dispatch and combine plan their blocks with eep_ep_plan_sms (below), which reads the model
 * through this with requested 0 and the budget knob left out.
 * @param [in] cfg        the ep knob table's values (elastic/ep/ep_knobs.h), or NULL for defaults.
 * @param [in] link_gbps  the device's measured NVLink bandwidth, 0 if unknown.
 * @return the SM count, or -1 for a bad shape.
 */
struct eep_ep_config;
int eep_ep_pick_sms(const struct eep_ep_config *cfg, const eep_ep_shape_t *shape, int device_sms,
                    double link_gbps, int requested);

/*
 * The blocks of one dispatch and of the combines of its handle.  A budget B (the call's num_sms,
 * else EEP_EP_NUM_SMS; 0: none) is the most SMs the call occupies at any moment, senders and
 * copiers together:
 *   - NO_CPU_SYNC and CACHED (one grid): send + copy = B, the counter being the first copy block;
 *     the split is the model's full-device split scaled to B (send = round(B * S / device), at
 *     least 1, at most B - 1 and S, where S is the model's senders; rank-major outputs:
 *     round(B / EEP_EP_RANK_MAJOR_SEND_SHARE) instead), or EEP_EP_COPY_SMS copy blocks (at
 *     most B - 1) when that knob is set;
 *   - CPU_SYNC (two launches one after the other): B - 1 senders (at most S) and the counter,
 *     then min(B, EEP_EP_COPY_SMS or B) copy blocks;
 *   - the combine runs on B blocks.
 * Without a budget: the model's S senders, EEP_EP_COPY_SMS or the rest of the device copying, and
 * the combine on both (the whole device).  A budget of 1 is raised to 2 (a sender and a counter,
 * the fewest a dispatch runs on); budgets above the device are the device.  With
 * EEP_EP_PLAN_HYBRID "the device" is device_sms - EEP_EP_HYBRID_FREE_SMS throughout.
 */
/* Rank-major outputs within a budget: a quarter sends (1 x H200, one rank, T 4096, budget 24:
   6 + 18 took 135 us, 3 + 21 166 us, 8 + 16 140 us, 12 + 12 162 us; bench/RESULTS.md). */
#define EEP_EP_RANK_MAJOR_SEND_SHARE 4.0
/* eep_ep_plan_sms flags */
#define EEP_EP_PLAN_CPU_SYNC         1u /* EEP_EP_MODE_CPU_SYNC: two launches */
#define EEP_EP_PLAN_RANK_MAJOR       2u /* EEP_EP_LAYOUT_RANK_MAJOR outputs */
#define EEP_EP_PLAN_HYBRID           4u /* GIN peers: leave EEP_EP_HYBRID_FREE_SMS to the transport */
/*
 * A hybrid call never occupies the last SMs of the device, whatever its budget: its kernels spin
 * until the GIN transport has moved their bytes, and a transport may need the SMs to do so (our
 * one-GPU plugin's device-to-device puts run as driver copy kernels, even when asked for the copy
 * engines: 1 x H200, 2 ranks, a combine on all 132 SMs saw none of its puts land before its 4 s
 * deadline; on 128 and fewer every put landed).
 */
#define EEP_EP_HYBRID_FREE_SMS       4

typedef struct {
    int send;    /* sending blocks */
    int copy;    /* copying blocks (one grid: the counter is the first of them) */
    int combine; /* blocks of the combines of this dispatch's handle */
    int budget;  /* B after clamping; 0: none given */
} eep_ep_sm_plan_t;

/**
 * Plan the blocks of one call (see above).
 * @param [in]  cfg        the ep knob table's values, or NULL for defaults.
 * @param [in]  flags      EEP_EP_PLAN_CPU_SYNC, EEP_EP_PLAN_RANK_MAJOR, EEP_EP_PLAN_HYBRID.
 * @param [in]  max_send   the kernel's limit on sending blocks (EEP_EPK_MAX_SEND_BLOCKS).
 * @return 0, or -1 for a bad shape, device or limit (plan untouched).
 */
int eep_ep_plan_sms(const struct eep_ep_config *cfg, const eep_ep_shape_t *shape, int device_sms,
                    double link_gbps, int requested, unsigned flags, int max_send,
                    eep_ep_sm_plan_t *plan);

/*
 * May a call within @p budget SMs (0: none given) on a device of @p device_sms move bytes with a
 * same-device copy (cuMemcpyDtoDAsync, "the copy engine" of elastic/ep/ep_solo.c)?  The driver
 * runs such a copy as a kernel on every SM it can get, whatever the API or hint (bench/
 * RESULTS.md, 2026-12-08, `make bench-copy-sm`: it waited for a kernel that filled every SM), so
 * only a call that may occupy the whole device may take it.  @p knob: EEP_EP_COPY_ENGINE (0:
 * never; 1: this rule; 2: always, for measurement, past the budget).
 */
int eep_ep_copy_engine_allowed(int knob, int budget, int device_sms);

/* The SMs a call may occupy on a device of @p device_sms (less the transport's in hybrid). */
int eep_ep_usable_sms(int device_sms, int hybrid);

/*
 * The SMs one of @p sharers processes on a GPU of @p device_sms may count on: an even share
 * (their kernels wait for one another, so all of them must be resident at once), at least 2 (a
 * sender and a counter); the whole device for one process (or a count below 1).
 */
int eep_ep_shared_sms(int device_sms, int sharers);

#ifdef __cplusplus
}
#endif

#endif /* EEP_EP_SM_MODEL_H */
