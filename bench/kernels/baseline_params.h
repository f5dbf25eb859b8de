/*
 * bench/kernels/baseline_params.h - parameter structs of the NCCL baseline's kernels, shared by the
 * host (bench/eep_bench_ep_baseline.c fills them) and the device (baseline_*.cuh).
 *
 * The baseline is what a user would write without ElasticEP: permute tokens by destination rank
 * on the GPU, exchange counts, move them with grouped ncclSend/ncclRecv, lay them out
 * expert-major; combine reverses it.  It produces exactly the outputs eep/ep.h promises (same
 * layout, same wire record, same summation order), so one CPU reference checks both.
 *
 * NVRTC-safe: no libc headers and no other include; pointers travel as unsigned long long
 * (CUdeviceptr); sizes are pinned by static asserts in both builds.
 */
#ifndef EEP_KERNELS_EP_BASELINE_PARAMS_H
#define EEP_KERNELS_EP_BASELINE_PARAMS_H

#if defined(__cplusplus)
#define EEP_BL_ASSERT(_cond, _msg) static_assert(_cond, _msg)
#else
#define EEP_BL_ASSERT(_cond, _msg) _Static_assert(_cond, _msg)
#endif

#define EEP_BL_MAX_WORLD    64 /* destination masks are 64-bit */
#define EEP_BL_SCAN_THREADS 1024

/* The wire record of one token (elastic/ep/ep_layout.h, eep_ep_wire_t), as the kernels need it. */
typedef struct eep_bl_wire {
    unsigned int token_bytes;
    unsigned int hidden_bytes; /* a multiple of 16 */
    unsigned int scale_off;
    unsigned int scale_bytes; /* a multiple of 4 (0 for bf16) */
    unsigned int meta_off;    /* K int32 global ids, K float weights, int32 source token */
    unsigned int pad;
} eep_bl_wire_t;

/* Shape and identity, common to every kernel. */
typedef struct eep_bl_shape {
    int rank, world;
    int num_tokens; /* this rank's T */
    int max_tokens;
    int hidden;
    int num_topk;
    int num_experts;
    int num_local; /* El */
    int alignment;
    int pad;
} eep_bl_shape_t;

/* route: per token, the mask of destination ranks; bad ids flagged (token dropped). */
typedef struct eep_bl_route_params {
    eep_bl_shape_t     s;
    unsigned long long topk_idx; /* [T, K] int32 or int64 (template IdxBits) */
    unsigned long long dst_mask; /* out [T] u64 */
    unsigned long long bad;      /* out int[2] {token, id}, first bad token; host sets -1 */
} eep_bl_route_params_t;

/* scan (one block): position of each token in each destination's segment, counts, offsets. */
typedef struct eep_bl_scan_params {
    eep_bl_shape_t     s;
    unsigned long long dst_mask;     /* [T] u64 */
    unsigned long long send_pos;     /* out [T, world] int32, -1 where not sent */
    unsigned long long send_counts;  /* out [world] int32 */
    unsigned long long send_offsets; /* out [world] int32, exclusive prefix sums of counts */
} eep_bl_scan_params_t;

/* pack: token rows into the send buffer, destination-major, token order inside. */
typedef struct eep_bl_pack_params {
    eep_bl_shape_t     s;
    eep_bl_wire_t      w;
    unsigned long long x;            /* [T, hidden_bytes] */
    unsigned long long x_scales;     /* [T, scale_bytes], or 0 */
    unsigned long long topk_idx;     /* [T, K] int32 or int64 */
    unsigned long long topk_weights; /* [T, K] float */
    unsigned long long send_pos;     /* [T, world] */
    unsigned long long send_offsets; /* [world] */
    unsigned long long send_buf;     /* out: rows of token_bytes */
} eep_bl_pack_params_t;

/* expert_scan (one block per local expert): position of each received row within its expert. */
typedef struct eep_bl_expert_scan_params {
    eep_bl_shape_t     s;
    eep_bl_wire_t      w;
    unsigned long long recv_buf; /* rows of token_bytes, source-major, token order inside */
    int                num_recv; /* rows in recv_buf */
    int                pad;
    unsigned long long lane_pos;      /* out [num_recv, K] int32: position in the lane's expert
                                        group (written only for local lanes) */
    unsigned long long expert_counts; /* out [El] int32 */
} eep_bl_expert_scan_params_t;

/* offsets (one thread): exclusive prefix sums of the padded counts. */
typedef struct eep_bl_offsets_params {
    eep_bl_shape_t     s;
    unsigned long long expert_counts;  /* [El] */
    unsigned long long expert_offsets; /* out [El + 1] int32 */
} eep_bl_offsets_params_t;

/* unpack (one warp per received row): expert-major outputs, and the row map for combine. */
typedef struct eep_bl_unpack_params {
    eep_bl_shape_t     s;
    eep_bl_wire_t      w;
    unsigned long long recv_buf;
    int                num_recv;
    int                pad;
    unsigned long long lane_pos;          /* [num_recv, K] */
    unsigned long long expert_offsets;    /* [El + 1] */
    unsigned long long recv_x;            /* out [rows, hidden_bytes] */
    unsigned long long recv_x_scales;     /* out [rows, scale_bytes], or 0 */
    unsigned long long recv_topk_idx;     /* out [rows, K] int32 local ids */
    unsigned long long recv_topk_weights; /* out [rows, K] float */
    unsigned long long row_of;            /* out [num_recv, K] int32: expert-major row, -1 */
} eep_bl_unpack_params_t;

/* pad (one block per local expert): zero the padding rows of each group. */
typedef struct eep_bl_pad_params {
    eep_bl_shape_t     s;
    eep_bl_wire_t      w;
    unsigned long long expert_counts;
    unsigned long long expert_offsets;
    unsigned long long recv_x;
    unsigned long long recv_x_scales;
    unsigned long long recv_topk_idx;
    unsigned long long recv_topk_weights;
} eep_bl_pad_params_t;

/* combine_reduce (one block per received row): the expert rank's weighted partial, bf16. */
typedef struct eep_bl_reduce_params {
    eep_bl_shape_t     s;
    eep_bl_wire_t      w;
    unsigned long long recv_buf; /* dispatch's receive buffer: ids and weights per row */
    int                num_recv;
    int                pad;
    unsigned long long row_of;   /* [num_recv, K] */
    unsigned long long y;        /* [rows, hidden] bf16 expert outputs */
    unsigned long long send_buf; /* out [num_recv, hidden] bf16, same order as recv_buf */
} eep_bl_reduce_params_t;

/* combine_sum (one block per token): sum the partials in rank order, bf16 out. */
typedef struct eep_bl_sum_params {
    eep_bl_shape_t     s;
    unsigned long long recv_buf;     /* [sum of send_counts, hidden] bf16, destination-major */
    unsigned long long send_pos;     /* [T, world] from dispatch */
    unsigned long long send_offsets; /* [world] */
    unsigned long long out;          /* out [T, hidden] bf16 */
} eep_bl_sum_params_t;

EEP_BL_ASSERT(sizeof(eep_bl_wire_t) == 24, "eep_bl_wire_t");
EEP_BL_ASSERT(sizeof(eep_bl_shape_t) == 40, "eep_bl_shape_t");
EEP_BL_ASSERT(sizeof(eep_bl_pack_params_t) == 120, "eep_bl_pack_params_t");
EEP_BL_ASSERT(sizeof(eep_bl_unpack_params_t) == 136, "eep_bl_unpack_params_t");

#endif /* EEP_KERNELS_EP_BASELINE_PARAMS_H */
