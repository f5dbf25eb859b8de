/*
 * kernels/ep/ep_params.h - the parameter struct of the direct-mode (NVLink/LSA) dispatch and
 * combine kernels, shared by the host (elastic/ep/ep.c fills it) and the device (dispatch.cuh,
 * combine.cuh read it).
 *
 * NVRTC-safe: no libc headers; pointers travel as unsigned long long; the size is pinned by a
 * static assert in both builds.  Window offsets are absolute (from the start of the window).
 */
#ifndef EEP_KERNELS_EP_PARAMS_H
#define EEP_KERNELS_EP_PARAMS_H

#include "../../include/eep/layout.h"

/* destination masks are 32-bit (direct mode, one NVLink domain) */
#define EEP_EPK_MAX_WORLD       32
#define EEP_EPK_THREADS         512 /* threads per block of every kernel */
#define EEP_EPK_WARPS           (EEP_EPK_THREADS / 32)
#define EEP_EPK_TRACE_BLOCKS    1024 /* time stamps (EEP_EP_TRACE): blocks x 8 phases */
/* after the phases: blocks x {began, left griddepcontrol.wait} (u64 index of the first) */
#define EEP_EPK_TRACE_LAUNCH    (EEP_EPK_TRACE_BLOCKS * 8)
#define EEP_EPK_TRACE_WORDS     (EEP_EPK_TRACE_BLOCKS * 10)
#define EEP_EPK_MAX_SEND_BLOCKS 256 /* dispatch sending blocks (chunk count scratch) */
#define EEP_EPK_MAX_COUNTERS    (2048 + EEP_EPK_MAX_WORLD) /* experts + destinations */

/*
 * The JIT's per-shape variant: elastic/ep/ep.c compiles each (top-k, ranks, hidden) with these fixed
 * by -D flags, so the compiler knows the trip counts of the loops over top-k lanes, ranks and
 * hidden vectors.  0 (the default): read from the parameters (the generic variant; the CPU run
 * of the kernels uses it).  The kernels read these fields only through the macros below.
 */
#ifndef EEP_EPK_FIXED_K
#define EEP_EPK_FIXED_K 0
#endif
#ifndef EEP_EPK_FIXED_W
#define EEP_EPK_FIXED_W 0
#endif
#ifndef EEP_EPK_FIXED_H
#define EEP_EPK_FIXED_H 0
#endif
#ifndef EEP_EPK_FIXED_HB
#define EEP_EPK_FIXED_HB 0
#endif
/* Which transfers travel as flagged 128-byte lines (kernels/ep/ll_line.cuh), a mask; plain rows
   with a tag otherwise. */
#define EEP_EPK_LINES_DISPATCH 1 /* the dispatch records' hidden bytes */
#define EEP_EPK_LINES_COMBINE  2 /* the combine's partials */
#ifndef EEP_EPK_FIXED_LINES      /* the mask fixed at JIT time; -1: p.lines */
#define EEP_EPK_FIXED_LINES -1
#endif
#define EEP_EPK_K(p)     (EEP_EPK_FIXED_K > 0 ? EEP_EPK_FIXED_K : (p).num_topk)
#define EEP_EPK_W(p)     (EEP_EPK_FIXED_W > 0 ? EEP_EPK_FIXED_W : (p).world)
#define EEP_EPK_H(p)     (EEP_EPK_FIXED_H > 0 ? EEP_EPK_FIXED_H : (p).hidden)
#define EEP_EPK_HB(p)    (EEP_EPK_FIXED_HB > 0 ? (unsigned)EEP_EPK_FIXED_HB : (p).hidden_bytes)
#define EEP_EPK_LINES(p) (EEP_EPK_FIXED_LINES >= 0 ? EEP_EPK_FIXED_LINES : (p).lines)

/* Kernel modes (template argument Mode): the values of eep_ep_mode_t. */
#define EEP_EPK_CPU_SYNC    0
#define EEP_EPK_NO_CPU_SYNC 1
#define EEP_EPK_CACHED      2

/* Words of one count slot (peer, parity), each (sequence << 32) | value. */
#define EEP_EPK_SLOT_TOKENS 0 /* tokens the peer sends me */
#define EEP_EPK_SLOT_DDONE  1 /* unused since records carry tags */
#define EEP_EPK_SLOT_CDONE  2 /* the peer started this combine (its partials carry tags) */
#define EEP_EPK_SLOT_COUNTS 3 /* El words: rows for my local expert slot e */

/* Local control words (in this rank's allocator region, >= 256 bytes, zeroed with the window):
   the device-side call counters, each with the count of the current launch's blocks started in
   its low half (eep_epk_begin; a replayed CUDA graph still advances the sequence), and
   per-parity work counters (bytes 0-7 and 24-31 unused). */
#define EEP_EPK_CTL_DSEQ  8  /* u64: (dispatch sequence << 32) | dispatch blocks started */
#define EEP_EPK_CTL_CSEQ  16 /* u64: (combine sequence << 32) | combine blocks started */
#define EEP_EPK_CTL_DWORK 32 /* u32[2], by parity: next received record a dispatch copier takes */
#define EEP_EPK_CTL_CWORK 40 /* u32[2], by parity: next record the combine's expert side takes */
/* hybrid (kernels/ep/ep_gin.cuh): per-parity tickets of the blocks done before the GIN puts (the
   last takes them; zeroed for the next call as the work counters are), and the puts issued so
   far (the local-completion counters' targets; only the block that puts touches them) */
#define EEP_EPK_CTL_DGIN  48 /* u32[2] */
#define EEP_EPK_CTL_CGIN  56 /* u32[2] */
#define EEP_EPK_CTL_DPUTS 64 /* u64 */
#define EEP_EPK_CTL_CPUTS 72 /* u64 */

typedef struct eep_epk_params {
    /* identity and shape */
    int rank, world;
    int num_tokens; /* this rank's T (dispatch), or of the handle's dispatch (combine) */
    int max_tokens;
    int hidden;
    int num_topk;
    int num_experts;
    int num_local; /* El: the experts this rank holds (may be 0) */
    int alignment;
    int scan_warps; /* warps that build the per-expert order masks (smem bound) */
    /* wire record: [hidden][scales][meta: K ids, K weights, token, K positions, u64 tag] */
    unsigned int token_bytes, hidden_bytes, scale_off, scale_bytes, meta_off, tag_off;

    /* runtime */
    void              *window; /* ncclWindow_t */
    eep_fault_page_t  *fault;
    unsigned int      *fault_claim;
    unsigned long long timeout_ns;
    unsigned long long ctl;        /* device address of the local control words */
    unsigned long long counts_off; /* window offset: world x 2 count slots */
    unsigned long long slot_bytes;
    unsigned long long drecv_off;     /* window offset: 2 parities x world regions */
    unsigned long long drecv_region;  /* max_tokens * token_bytes */
    unsigned long long crecv_off;     /* window offset: 2 parities x min(world, K) regions */
    unsigned long long crecv_region;  /* max_tokens * crecv_row */
    int                crecv_regions; /* min(world, K) */
    int                send_blocks;   /* dispatch: blocks [0, send_blocks) send, the rest copy */
    unsigned long long crecv_row; /* combine row: 128-byte lines, or hidden * 2 + a 16-byte tag */
    unsigned long long trace;     /* 0, or u64 [EEP_EPK_TRACE_WORDS]: time stamps */
    unsigned long long chunk_totals; /* int [EEP_EPK_MAX_SEND_BLOCKS][NC]: each sender's counts */
    unsigned long long chunk_flags;  /* u64 [2][EEP_EPK_MAX_SEND_BLOCKS]: [0] = sequence once
                                        written; [1] the one-rank path's received counts, each
                                        tagged with its call (dispatch_solo.cuh) */
    int                skip_pad_x;   /* 1: padding rows get ids -1 and weights 0 only */
    int                lines;        /* EEP_EPK_LINES_*: which transfers are flagged lines */
    int                rank_major;   /* 1: rank-major outputs, each received token once */
    int                ce_copied;    /* 1: recv_x (and scales, but for a one-rank CACHED call)
                                        hold x row for row (copy engine) */

    /* dispatch inputs */
    unsigned long long x, x_scales, topk_idx, topk_weights;
    /* dispatch outputs (user) */
    unsigned long long recv_x, recv_x_scales, recv_topk_idx, recv_topk_weights;
    unsigned long long recv_counts;  /* [El] real rows per local expert */
    unsigned long long recv_offsets; /* expert-major: [El + 1] padded prefix; rank-major: [W + 1]
                                        rows before each source */
    unsigned long long host_mirror;  /* CPU_SYNC: device address of pinned u64[El + 2] */
    unsigned long long rows_word;    /* one rank, NO_CPU_SYNC: a pinned word for the received
                                        rows, (rows_tag << 32) | rows (0: none) */
    unsigned long long rows_tag;     /* the call's tag in it (32 bits, not 0) */

    /* handle arrays (device) */
    unsigned long long h_counts;    /* [El] */
    unsigned long long h_offsets;   /* [2 (El + 1)]: offsets, then the padding rows before e */
    unsigned long long h_send_slot; /* [max_tokens, world] slot in each destination, -1 */
    unsigned long long h_recv_n;    /* [world] records received from each source */
    unsigned long long h_recv_tok;  /* [world * max_tokens] source token of each record */
    unsigned long long h_recv_ord;  /* [world * max_tokens] my ordinal among its destinations */
    unsigned long long h_recv_rows; /* [world * max_tokens, K] row per lane, -1 */
    unsigned long long h_recv_w;    /* [world * max_tokens, K] weight per lane, 0 */

    /* combine */
    unsigned long long y, out;
    /* combine, training (issue 26): the top-k weight gradients (eep_ep_combine_topk_grad_body)
       take y_grad, [rows, hidden] bf16, the incoming gradient in the received layout, and write
       topk_grad, [num_tokens, K] fp32; crow_tag is the tag's byte offset in a plain combine row
       (the row's data bytes, those of the largest shape the runtime serves); combine_flags holds
       EEP_EPK_COMBINE_UNWEIGHTED */
    unsigned long long y_grad, topk_grad;
    unsigned int       crow_tag;
    int                combine_flags;

    /* hybrid mode (the EEP_EPK_GIN variants, kernels/ep/ep_gin.cuh); 0 in direct mode */
    int                lsa_base;   /* world rank of this node's LSA index 0 (ranks node-major) */
    unsigned int       gin_mask;   /* bit d: world rank d is reached over GIN (another node) */
    unsigned long long gin;        /* device address of the eep_epk_gin_t, or 0 */
    unsigned long long gstage_off; /* window offset of the GIN send staging (eep_epk_gin_*_stage) */
    /* hybrid with forwarding (lsaSize > 1): what this rank forwarded for each source node (its
       handle's; the combine relays the partials back along the same tokens) */
    unsigned long long h_fwd_n;   /* [world] tokens forwarded from source node n */
    unsigned long long h_fwd_tok; /* [world * max_tokens] their token indices */
    unsigned long long h_fwd_dm;  /* [world * max_tokens] their destination masks */

    /* The expert placement (eep_epk_place_of, ep_common.cuh).  place_even 1: expert e lives on
       rank e / num_local in slot e % num_local (every rank holds num_local; place may be 0);
       else place is the device address of u32 [num_experts], (rank << 16) | slot.  Count slots
       hold num_local_max words (the most a rank holds). */
    int                num_local_max;
    int                place_even;
    unsigned long long place;
    /* wait accounting: 0, or the runtime's u64 [EEP_WAIT_STAT_PHASES][EEP_MAX_RANKS] (device) */
    unsigned long long wait_stats;
    /* Degraded mode (issue 24), bit d for world rank d.  dead_mask: known dead; nothing waits
       for it or stores to it.  drop_mask: the ranks this rank cannot reach (the dead, and in
       hybrid mode with forwarding every rank of a node whose forwarder for this rank is dead):
       a top-k lane on one of their experts is routed as id -1 (eep_epk_live_id).  mute_mask: the
       sources that cannot reach this rank (the same rule the other way): their count words are
       not waited for and their slots read as zero.  Without forwarding both are dead_mask (the
       kernels take each with dead_mask OR'ed in: a dead rank is always both).
       The dispatch's counter block writes the dropped report when asked: dropped_topk, 0 or
       u8 [num_tokens, K] (1: the lane was dropped), and num_dropped, 0 or one int (their
       count). */
    unsigned int       dead_mask;
    unsigned int       drop_mask;
    unsigned int       mute_mask;
    int                solo; /* the one-rank path (dispatch_solo.cuh): EEP_EPK_SOLO_* */
    unsigned long long dropped_topk;
    unsigned long long num_dropped;
} eep_epk_params_t;

/* solo: what a launch of the one-rank dispatch (kernels/ep/dispatch_solo.cuh) writes */
#define EEP_EPK_SOLO_META   1 /* the outputs' ids and weights */
#define EEP_EPK_SOLO_ROWS   2 /* x rows to recv_x, but those the copy engine holds */
#define EEP_EPK_SOLO_SCALES 4 /* the scale rows of every received token (fp8) */
/* its tokens a round of ids (and weights) staged in shared memory: at most this many ids (4096:
   16 KB of each; a define, so that a test can make a chunk take several rounds) */
#ifndef EEP_EPK_SOLO_ROUND_IDS
#define EEP_EPK_SOLO_ROUND_IDS 4096
#endif
#define EEP_EPK_SOLO_ROUND(K)                                                                      \
    (EEP_EPK_THREADS < EEP_EPK_SOLO_ROUND_IDS / (K) ? EEP_EPK_THREADS                              \
                                                    : EEP_EPK_SOLO_ROUND_IDS / (K))
/* its dynamic shared memory, bytes: the round's ids, weights and flags, counts of El experts and
   one (at most 16 + 16 + 2 + 1 KB) */
#define EEP_EPK_SOLO_SMEM(K, El) ((unsigned)(EEP_EPK_SOLO_ROUND(K) * (2 * (K) + 1) + (El) + 1) * 4u)

/* combine_flags */
#define EEP_EPK_COMBINE_UNWEIGHTED 1 /* every weight 1: the rows summed as they are */

/*
 * What the hybrid kernels need of NCCL's GIN, in device memory (elastic/ep/ep.c fills it once per
 * runtime): the device communicator and where this runtime's EP signals and counters start.
 * Signals, all SignalInc, one per call and peer, never reset (a fresh dev comm starts them at 0,
 * as a fresh window starts the call sequence): sig0 + s, dispatch of call n from rank s landed
 * (its records and count slot: the signal rides on the count slot's put, after them on the same
 * context) once it reads >= n; sig0 + W + s, the combine's partials from s; sig0 + 2 W + s, s
 * started combine n (the handshake).  Counters (local completion): ctr0 the dispatch's puts,
 * ctr0 + 1 the combine's.
 */
typedef struct eep_epk_gin {
    eep_devcomm_blob_t devcomm; /* ncclDevComm */
    int                sig0, ctr0;
    int                lsa_size, nodes;
} eep_epk_gin_t;

#define EEP_EPK_GIN_SIGNALS(world) (3 * (world)) /* signals a hybrid runtime asks for */
#define EEP_EPK_GIN_COUNTERS       2

EEP_LAYOUT_ASSERT(sizeof(void *) == 8, "64-bit pointers");
EEP_LAYOUT_ASSERT(sizeof(eep_epk_params_t) == 520, "eep_epk_params_t size");
EEP_LAYOUT_ASSERT(sizeof(eep_epk_gin_t) == EEP_DEVCOMM_BYTES + 16, "eep_epk_gin_t size");

#endif /* EEP_KERNELS_EP_PARAMS_H */
