/*
 * eep/ep.h - expert-parallel dispatch and combine.
 *
 * dispatch sends every token once to each rank that holds at least one of its top-k experts;
 * combine brings each token's expert outputs back to the rank it came from and sums them with its
 * top-k weights.  Both are device-side: one JIT-compiled kernel family over the runtime's
 * symmetric window, enqueued on the caller's stream.
 *
 * Expert placement: data, not arithmetic.  Every global expert lives on one rank, in one local
 * slot of it (eep_expert_place_t, eep/membership.h).  The placement of a call is the runtime's:
 * on a runtime that follows membership views (params.membership), the current view's placement
 * when the view places the call's num_experts; otherwise (no view, or a view of another expert
 * count) the default policy, eep_placement_default(num_experts, world): contiguous blocks as even
 * as possible, so 256 experts on 7 ranks give ranks 37, 37, 36, 37, 36, 37, 36, and with fewer
 * experts than ranks some ranks hold none.  For num_experts % world == 0 it is rank r holding
 * [r * El, (r + 1) * El).  The placement is checked on the host (eep_placement_check) when the
 * runtime takes it, before any launch; at most EEP_EP_MAX_LOCAL_EXPERTS experts on one rank.
 * There is no per-call placement: every rank and every call of an epoch must agree on it (a
 * cached dispatch and the combines of a handle reuse the layout it made), so it changes only
 * with a view, between steps; a caller with its own policy publishes it in its views (a
 * membership provider's eep_view_t.placement).  El below is the count of the calling rank
 * (eep_membership_info_t.num_local); buffers for the worst case use the most any rank holds.
 * An uneven placement travels to the kernels as a small device table, uploaded by the first call
 * of each expert count in each epoch: make that call before capturing a CUDA graph (as the first
 * call of a shape, which compiles its kernels, must be).
 *
 * Received layout (every mode): expert-major.  Local expert e (0 <= e < El, the local slot; its
 * global id is the one the placement puts in slot e of this rank) owns rows [offsets[e],
 * offsets[e] + counts[e]); its group is padded with zero rows up to offsets[e + 1] = offsets[e] + align_up(counts[e],
 * expert_alignment), so a grouped GEMM can take recv_x as it is.  A token that hits several local
 * experts gets one row in each of their groups.  Within a group, rows are ordered by source rank
 * ascending, then by source token index ascending: the order is a function of the inputs alone,
 * never of arrival order.  Padding rows hold x = 0, scales = 0, topk_idx = -1, weights = 0 (x and
 * scales are left as they were with skip_padding_x).
 *
 * Synchronisation per dispatch+combine pair, steady state: no barrier kernel, no memset, no
 * separate notify kernel.  Each kernel sends one point-to-point handshake word from every rank to
 * every peer, tagged with the call's sequence number (a dispatch's count word, a combine's start
 * word: what keeps buffer reuse safe), and every record it moves carries the same tag, so data is
 * consumed as it lands, without an "all done" signal.  Host synchronisations: CPU_SYNC 1
 * (dispatch waits for the counts, not for the data), NO_CPU_SYNC 0, CACHED 0.  docs/dispatch.md
 * explains why this is enough.
 *
 * Degraded mode (issue 24; docs/dispatch.md, "Degraded mode"): with a peer known dead (the
 * runtime's view machine marked it after a fault, until a view removes it; or
 * eep_dispatch_args_t.dead_mask), dispatch and combine complete on the live ranks.  A call skips
 * every wait on, and every store or put to, a dead rank.  A top-k lane whose expert lives on a
 * dead rank is dropped (in hybrid mode with forwarding also one whose expert's node is another
 * node whose forwarder for this rank, its rank with this rank's local index, is dead: that path
 * is gone both ways): routed as if its id were -1 (no row anywhere, the token not sent to that
 * rank for it), reported in the dispatch's dropped report (dropped_topk, num_dropped, on the GPU),
 * and left out of combine: its weight counts as 0, and the other lanes' weights are NOT
 * renormalised (out[t] is the sum over the live lanes only; a caller that wants renormalised
 * outputs has the report and its own weights to do it).  So every live rank's outputs are exactly
 * those of a dispatch whose inputs had -1 in the dropped lanes and a dead rank with no tokens:
 * expert-major layout dense and ordered as above, counts without the dead rank's rows, combine
 * bitwise reproducible.  A handle keeps the dead set of the dispatch that made it: a CACHED
 * dispatch needs the same set, and a combine of a handle made before a rank was known dead
 * returns EEP_ERR_PEER_LOST (nothing enqueued: dispatch again).
 *
 * Threading: calls on one runtime are serialised by the caller (one stream per runtime, like NCCL
 * collectives on one communicator); every rank of the runtime must make the same sequence of
 * dispatch/combine calls with the same shapes.
 */
#ifndef EEP_EP_H
#define EEP_EP_H

#include <stddef.h>
#include <stdint.h>

#include "eep/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The runtime (include/eep/eep.h); a repeated identical typedef is legal C11 and C++. */
#ifndef EEP_RUNTIME_T_DECLARED
#define EEP_RUNTIME_T_DECLARED
typedef struct eep_runtime eep_runtime_t;
#endif

/* A dispatch's layout, kept for combine and for cached dispatches.  Opaque. */
typedef struct eep_ep_handle eep_ep_handle_t;

/* Limits checked on the host before any launch. */
#define EEP_EP_MAX_TOPK          32 /* K: one lane per top-k entry */
#define EEP_EP_MAX_EXPERTS       2048
#define EEP_EP_MAX_LOCAL_EXPERTS 256 /* experts on one rank (the placement's most) */
#define EEP_EP_FP8_BLOCK         128 /* channels per fp8 scale */
#define EEP_EP_PTR_ALIGN         16  /* bytes; every tensor pointer */

typedef enum {
    EEP_DTYPE_BF16     = 0, /* 2 bytes, x as given */
    EEP_DTYPE_FP8_E4M3 = 1, /* 1 byte + one float scale per 128 channels (x_scales) */
} eep_dtype_t;

typedef enum {
    EEP_INDEX_INT32 = 0,
    EEP_INDEX_INT64 = 1,
} eep_index_dtype_t;

typedef enum {
    /*
     * Exact-size outputs.  The counts reach pinned host memory as soon as the count exchange has
     * finished, while the data still moves; eep_dispatch waits for them (not for the data), writes
     * *num_recv_rows_p and host_expert_counts, gets the outputs (alloc callback, or the caller's
     * buffers checked against the exact size) and enqueues the copy that fills them.
     */
    EEP_EP_MODE_CPU_SYNC = 0,
    /*
     * No host wait.  Outputs must hold the worst case (eep_ep_recv_rows_max()); the real counts
     * and offsets stay on the GPU (recv_expert_counts, recv_expert_offsets).  Rows past
     * recv_expert_offsets[El] are not written.  A dispatch+combine pair in this mode can be
     * captured in a CUDA graph and replayed.
     */
    EEP_EP_MODE_NO_CPU_SYNC = 1,
    /*
     * Reuse the layout of *handle_p (same topk_idx as the dispatch that made it): no count
     * exchange, no host wait, only data moves.  Graph-capturable.
     */
    EEP_EP_MODE_CACHED = 2,
} eep_ep_mode_t;

/* How eep_dispatch lays out what a rank receives (eep_dispatch_args_t.layout). */
typedef enum {
    /*
     * One row per (token, local expert) pair, grouped by local expert (0..El-1), each group in
     * source rank then token order and padded to expert_alignment: ready for grouped GEMMs.
     */
    EEP_EP_LAYOUT_EXPERT_MAJOR = 0,
    /*
     * One row per received token, sources ascending, each source's tokens in their order
     * (DeepEP's normal-mode layout, for frameworks that permute themselves): recv_topk_idx holds
     * the token's local expert ids (-1 elsewhere), recv_topk_weights their weights,
     * recv_expert_counts the tokens per local expert, and recv_expert_offsets [world + 1] the
     * rows before each source.  At most world * max_tokens_per_rank rows; no padding rows.
     * The combine of such a handle takes one row per received token (the caller's own sum of
     * the token's local expert outputs, weighted as it likes).
     */
    EEP_EP_LAYOUT_RANK_MAJOR = 1,
} eep_ep_layout_t;

/*
 * CPU_SYNC allocation hook: return @p bytes of device memory (16-byte aligned) for output @p what
 * ("recv_x", "recv_x_scales", "recv_topk_idx", "recv_topk_weights"), or NULL to fail the call
 * with EEP_ERR_NO_MEMORY.  Called on the calling thread, inside eep_dispatch, once the exact row
 * count is known.  The memory must stay valid until the stream has consumed the dispatch; combine
 * does not read these outputs (the handle keeps what it needs).
 */
typedef void *(*eep_ep_alloc_func_t)(void *arg, size_t bytes, const char *what);

typedef struct {
    size_t size; /* sizeof(eep_dispatch_args_t): lets the struct grow */

    /* ---- inputs (device memory, 16-byte aligned, row-major, contiguous) ---- */
    const void       *x;        /* [num_tokens, hidden] bf16 or fp8 e4m3 */
    const float      *x_scales; /* [num_tokens, hidden / 128]; fp8 only, else NULL */
    eep_dtype_t       dtype;
    const void       *topk_idx; /* [num_tokens, num_topk] global expert ids; -1 = none */
    eep_index_dtype_t topk_idx_dtype;
    const float      *topk_weights; /* [num_tokens, num_topk] */

    /* ---- shape: identical on every rank except num_tokens ---- */
    int num_tokens;          /* T of this call, 0 <= T <= max_tokens_per_rank */
    int hidden;              /* H; H * element size a multiple of 16 bytes; fp8: multiple of 128 */
    int num_topk;            /* K, 1..EEP_EP_MAX_TOPK */
    int num_experts;         /* >= num_topk, <= EEP_EP_MAX_EXPERTS; placed as the header says */
    int expert_alignment;    /* power of two >= 1; each expert group is padded to it */
    int max_tokens_per_rank; /* sizes every buffer; the same on every rank and every call */

    eep_ep_mode_t mode;
    /*
     * SM budget: the most SMs this call (and the combines of its handle) occupy at once, senders
     * and copiers together, split inside it by the bandwidth model; 2..1024 (above the device's
     * count: the device).  0: EEP_EP_NUM_SMS, and when that is 0 too, the whole device.
     */
    int num_sms;

    /* ---- outputs (device memory, 16-byte aligned) ---- */
    /*
     * Rows available in the four row outputs below.  NO_CPU_SYNC and CACHED: at least
     * eep_ep_recv_rows_max().  CPU_SYNC without alloc: at least the exact row count, checked
     * before the copy is enqueued (EEP_ERR_INVALID_ARG naming recv_capacity if too small).  One
     * rank, rank-major (any mode; CPU_SYNC with a capacity of num_tokens or more): the copy
     * engine may copy x into recv_x before the count is known (EEP_EP_COPY_ENGINE), so rows from
     * the exact count up to num_tokens may hold copies of x rows; rows past num_tokens are never
     * written.
     */
    int64_t  recv_capacity;
    void    *recv_x;             /* [rows, hidden], dtype of x */
    float   *recv_x_scales;      /* [rows, hidden / 128]; fp8 only, else NULL */
    int32_t *recv_topk_idx;      /* [rows, num_topk]: local expert id (0..El-1) or -1 */
    float   *recv_topk_weights;  /* [rows, num_topk]: the weight where recv_topk_idx >= 0, else 0 */
    int32_t *recv_expert_counts; /* [El] real (unpadded) rows per local expert, GPU */
    int32_t *recv_expert_offsets; /* [El + 1] exclusive prefix sums of padded counts, GPU;
                                     rank-major: [world + 1] rows before each source */

    /* CPU_SYNC only */
    eep_ep_alloc_func_t alloc; /* NULL: use the buffers above; else fills them */
    void               *alloc_arg;
    int32_t            *host_expert_counts; /* [El] host memory, real counts, or NULL */
    int64_t            *num_recv_rows_p;    /* host: padded total rows (exact in CPU_SYNC,
                                               eep_ep_recv_rows_max() otherwise), or NULL */

    /* ---- since the second version of this struct (older callers' size leaves it 0) ---- */
    /*
     * 1: padding rows keep whatever recv_x and recv_x_scales held (their topk_idx is still -1
     * and their weights 0): for inference, where nothing reads them; saves up to
     * El * (alignment - 1) row writes per call.  0 (default): zeros, as training needs (a
     * backward pass reads every row, and stale NaN would poison the weight gradients).
     */
    int skip_padding_x;

    /* ---- since the third version (older callers' size leaves it expert-major) ---- */
    eep_ep_layout_t layout; /* EEP_EP_LAYOUT_EXPERT_MAJOR (0) or EEP_EP_LAYOUT_RANK_MAJOR */

    /* ---- since the fourth version (older callers' size leaves them 0): degraded mode ---- */
    /*
     * Ranks known dead (bit r: rank r of this runtime), on top of those the runtime knows (its
     * view machine's dead peers while it is degraded: eep_membership_info_t.degraded): the call
     * neither waits for nor writes to any of them (see "Degraded mode" at the top).  Bits at or
     * above the world size, or this rank's own, are refused (EEP_ERR_INVALID_ARG naming
     * dead_mask).  Every live rank must pass the same mask (as they pass the same shapes).
     */
    uint64_t dead_mask;
    /*
     * The dropped report, device memory, or NULL: dropped_topk [num_tokens, num_topk] gets 1
     * where lane k of token t names an expert (an id in [0, num_experts)) held by a dead rank
     * (hybrid mode with forwarding: or by a rank of a node this rank reaches only through a
     * dead forwarder, see "Degraded mode"), else 0; *num_dropped the count of those (token, k)
     * pairs.  Both are written by every dispatch that has them (zeros when nothing is dead), in
     * every mode, on the GPU: no host synchronisation.  Any alignment.
     */
    uint8_t *dropped_topk;
    int32_t *num_dropped;
} eep_dispatch_args_t;

/**
 * Send tokens to the ranks of their experts; lay them out expert-major on arrival.
 *
 * Checked on the host before launch (EEP_ERR_INVALID_ARG, the message names the argument): NULL
 * or misaligned pointers, a hidden size that is not a multiple of 16 bytes (of 128 channels for
 * fp8), num_tokens > max_tokens_per_rank, K out of range, num_experts out of range or placing more
 * than EEP_EP_MAX_LOCAL_EXPERTS on one rank, an alignment that is not a power of two, fp8 without
 * scales, too small a recv_capacity.
 * A handle made by another runtime gives EEP_ERR_INVALID_ARG, one from an older membership epoch
 * EEP_ERR_STALE_EPOCH.  Only the device sees expert ids: an id outside [-1, num_experts) or twice
 * in one token is recorded by the kernel in the runtime's fault page with the offending token, the
 * token is dropped (nothing is written past any buffer), and the next eep_poll()/call on the
 * runtime returns EEP_ERR_DEVICE_FAULT.
 *
 * @param [in]     rt        the runtime; every rank of it must call eep_dispatch in step.
 * @param [in]     args      inputs, shape, mode and outputs (args->size must be set).
 * @param [in,out] handle_p  *handle_p NULL: a new handle is created and returned.  Non-NULL: in
 *                           CACHED mode its layout is reused; in the other modes it is refilled in
 *                           place (no allocation in steady state).  Left untouched on error.
 * @param [in]     stream    CUstream (void * so callers need no CUDA header); NULL: default.
 * @return EEP_OK once the work is enqueued (CPU_SYNC: and the counts are known on the host);
 *         EEP_ERR_INVALID_ARG / EEP_ERR_STALE_EPOCH for bad input; EEP_ERR_PEER_TIMEOUT when the
 *         counts did not arrive in time (CPU_SYNC); EEP_ERR_DEVICE_FAULT for an earlier fault;
 *         EEP_ERR_PEER_LOST for a CACHED dispatch on a handle made before a rank was known dead
 *         (degraded mode: dispatch again without CACHED).
 */
eep_status_t eep_dispatch(eep_runtime_t *rt, const eep_dispatch_args_t *args,
                          eep_ep_handle_t **handle_p, void *stream);

/**
 * The reverse of the dispatch that made @p handle.  For each of its tokens t, on the rank that
 * sent t: out[t] = bf16( sum over ranks r ascending of float(p_r) ), where, on rank r,
 * p_r = bf16( sum over top-k lanes k ascending with expert k on r of
 *             w[t][k] * float(y[row(t, k)]) ),
 * every sum accumulated in fp32 from 0 with fmaf (partial) and plain adds (total), every bf16
 * rounding to nearest even.  The order is fixed, so the result is bitwise reproducible.  A token
 * with no expert gives zeros.  A rank-major handle (EEP_EP_LAYOUT_RANK_MAJOR): p_r = y[row(t)],
 * the one row rank r received for t, as given (the caller summed its local experts).
 * Degraded mode (the header's "Degraded mode"): the ranks r are the live ones and the lanes k
 * those the dispatch did not drop; a dropped lane weighs 0 and the others are not renormalised.
 *
 * @param [in]  rt      the runtime that made @p handle.
 * @param [in]  y       [rows, hidden] bf16, the expert outputs in the handle's received layout
 *                      (padding rows are ignored); device, 16-byte aligned.
 * @param [in]  handle  from eep_dispatch on this runtime and this membership epoch.
 * @param [out] out     [num_tokens of that dispatch, hidden] bf16; device, 16-byte aligned.
 * @param [in]  stream  CUstream, NULL: default.
 * @return EEP_OK once enqueued; EEP_ERR_INVALID_ARG (NULL/misaligned pointer, foreign handle),
 *         EEP_ERR_STALE_EPOCH (handle from an older membership epoch); EEP_ERR_PEER_LOST (the
 *         runtime knows a rank dead that the handle's dispatch sent tokens to: its partials never
 *         come; nothing is enqueued, dispatch again).
 */
eep_status_t eep_combine(eep_runtime_t *rt, const void *y, const eep_ep_handle_t *handle, void *out,
                         void *stream);

/* eep_combine_ex: the combine's training forms (issue 26). */
typedef struct {
    size_t size; /* sizeof(eep_combine_args_t): lets the struct grow */

    const void *y;      /* [rows, hidden] bf16 in the handle's received layout (padding rows
                           ignored); device, 16-byte aligned */
    void       *out;    /* [num_tokens, hidden] bf16, or NULL: no data combine (topk_grad only) */
    int         hidden; /* channels of y and out; 0: the handle's (its dispatch's) */
    /*
     * 1: out as eep_combine (each row weighed with its top-k weight).  0: the rows summed as they
     * are (every weight 1; the rounding points of eep_combine): the backward of dispatch, which
     * gives grad_x[t] = the sum of the gradients of t's rows.
     */
    int weighted;
    /*
     * Top-k weight gradients, or both NULL: y_grad is [rows, hidden] bf16, the incoming gradient
     * of out in the received layout (a cached dispatch of it on the same handle); topk_grad,
     * [num_tokens, num_topk] fp32, gets, on the rank that sent token t, for lane k with expert
     * id >= 0, dot(y[row], y_grad[row]) of (t, k)'s row, and 0 for lanes of id -1: the gradient
     * of out[t] = sum_k w[t][k] y[row(t, k)] with respect to w[t][k].  The dot is fp32: lane l of
     * one warp sums channels 8v .. 8v + 7 of vectors v = l, l + 32, ... with fmaf from 0, then
     * the 32 sums are added in a butterfly (xor 16, 8, 4, 2, 1): bitwise reproducible.
     */
    const void *y_grad;
    float      *topk_grad;
    /*
     * SM budget of this combine (2..1024, above the device: the device); 0: the budget of the
     * dispatch that made the handle (its num_sms, or the whole device).
     */
    int num_sms;
} eep_combine_args_t;

/**
 * eep_combine with the training forms: an unweighted combine (@p args->weighted 0), the top-k
 * weight gradients (args->topk_grad), or both.  Each of out and topk_grad is one kernel launch
 * (out first) with its own handshake: every rank of the runtime must ask for the same ones.
 *
 * @param [in] rt      the runtime that made @p handle.
 * @param [in] args    (args->size set).
 * @param [in] handle  from eep_dispatch on this runtime and this membership epoch.
 * @param [in] stream  CUstream, NULL: default.
 * @return EEP_OK once enqueued; EEP_ERR_INVALID_ARG naming the argument (NULL or misaligned
 *         pointers, y_grad without topk_grad or the reverse, neither out nor topk_grad, hidden
 *         not a positive multiple of 8, a shape the runtime's buffers were not reserved for
 *         (eep_ep_reserve)); EEP_ERR_STALE_EPOCH; EEP_ERR_UNSUPPORTED for topk_grad on a hybrid
 *         runtime that forwards records within nodes of several GPUs (direct mode and hybrid mode
 *         with one GPU a node have them).
 */
eep_status_t eep_combine_ex(eep_runtime_t *rt, const eep_combine_args_t *args,
                            const eep_ep_handle_t *handle, void *stream);

/*
 * One shape a runtime serves: what sizes its buffers.  Several shapes share a runtime (fp8
 * forward dispatch and bf16 cached dispatch in backward, two hidden sizes for two layer kinds)
 * when they have the same max_tokens_per_rank; the window then holds the largest of each part.
 */
typedef struct {
    int         max_tokens_per_rank;
    int         hidden;
    int         num_topk;
    int         num_experts;
    eep_dtype_t dtype; /* of the dispatches (combines are bf16) */
} eep_ep_shape_desc_t;

/**
 * The window size a runtime of @p world ranks needs to serve @p shapes (for
 * eep_runtime_params_t.window_bytes or EEP_WINDOW_SIZE): the runtime's workspace, the
 * dispatch/combine buffers laid out for all of them and, for more than one rank, the hybrid
 * mode's GIN send staging with one GPU a node (with NVLink forwarding between nodes a hybrid
 * runtime serves one shape and its first call names the bytes it needs).  Pure arithmetic, no
 * GPU needed.
 * @param [out] bytes_p  written on success.
 * @return EEP_OK; EEP_ERR_INVALID_ARG naming the bad shape field (or shapes of different
 *         max_tokens_per_rank).
 */
eep_status_t eep_ep_window_size(int world, const eep_ep_shape_desc_t *shapes, int num_shapes,
                                size_t *bytes_p);

/**
 * Lay the runtime's dispatch/combine buffers out for every shape in @p shapes, before the first
 * dispatch or combine on it (without it, the first call's shape is the only one, and a later
 * call of a larger shape is refused with a message naming this function).  Every rank must
 * reserve the same shapes.  Calling it again with shapes that fit is a no-op.
 * @return EEP_OK; EEP_ERR_INVALID_ARG (a bad shape, naming the field); EEP_ERR_NO_RESOURCE when
 *         the window is too small (the message says how large it must be); EEP_ERR_BUSY when
 *         calls already used a smaller layout.
 */
eep_status_t eep_ep_reserve(eep_runtime_t *rt, const eep_ep_shape_desc_t *shapes, int num_shapes);

/**
 * Destroy a handle and the device memory it holds; NULL is a no-op.  The stream work that uses it
 * must have completed (or the caller keeps it alive until then).
 */
void eep_ep_handle_destroy(eep_ep_handle_t *handle);

/**
 * The transport of dispatch/combine on @p rt: "direct" (every peer over NVLink stores) or "hybrid"
 * (peers of other nodes over GIN put + signal, of this node over NVLink), chosen from the
 * runtime's teams and EEP_EP_MODE (and logged) at the first call and again after every view.
 * @return the name, or NULL when neither can run on @p rt (the reason is logged).
 */
const char *eep_ep_transport(eep_runtime_t *rt);

/**
 * Worst-case row count of the received layout: what NO_CPU_SYNC and CACHED outputs must hold
 * (every rank alike), for the default placement.
 * rows = floor((world * max_tokens_per_rank * min(K, El) + El * (alignment - 1)) / alignment)
 *        * alignment, with El = ceil(num_experts / world), the most experts a rank holds.
 * @return the row count, or -1 when the arguments are out of range.
 */
int64_t eep_ep_recv_rows_max(int world, int max_tokens_per_rank, int num_topk, int num_experts,
                             int expert_alignment);

/* eep/membership.h */
#ifndef EEP_EXPERT_PLACE_T_DECLARED
#define EEP_EXPERT_PLACE_T_DECLARED
typedef struct eep_expert_place eep_expert_place_t;
#endif

/**
 * eep_ep_recv_rows_max for @p placement ([num_experts], e.g. eep_membership_info_t.placement;
 * NULL: the default): El is the most experts it puts on one rank.
 * @return the row count, or -1 when the arguments or the placement are invalid.
 */
int64_t eep_ep_recv_rows_max_placed(int world, int max_tokens_per_rank, int num_topk,
                                    int num_experts, int expert_alignment,
                                    const eep_expert_place_t *placement);

#ifdef __cplusplus
}
#endif

#endif /* EEP_EP_H */
