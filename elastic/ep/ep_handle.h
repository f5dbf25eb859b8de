/*
 * ep_handle.h - what a dispatch handle records (private to elastic/ep_*).
 *
 * A handle belongs to one runtime and one membership epoch: combine and cached dispatch refuse it
 * elsewhere.  Its device arrays live in memory the runtime allocated; `release` gives them back,
 * so this header needs no CUDA.  The layout fields are those the kernels need to reverse a
 * dispatch without a count exchange.
 */
#ifndef EEP_EP_HANDLE_H
#define EEP_EP_HANDLE_H

#include <stdint.h>

#include "eep/ep.h"
#include "elastic/ep/ep_layout.h"
#include "elastic/gpu/cuda_sym.h"

#define EEP_EP_HANDLE_MAGIC 0x65706831u /* "eph1" */

struct eep_ep_handle {
    uint32_t       magic;         /* EEP_EP_HANDLE_MAGIC while alive, 0 after destroy */
    const void    *runtime;       /* identity of the runtime that made it */
    uint64_t       epoch;         /* membership epoch it was made in */
    int            rank;          /* this rank in that epoch */
    eep_ep_shape_t shape;         /* world, max tokens, hidden, K, experts, alignment, dtype */
    int            num_tokens;    /* T of the dispatch that made the layout */
    int            num_sms;       /* the dispatch's sending blocks */
    int            copy_sms;      /* its copying blocks */
    int            combine_sms;   /* blocks of its combines: the budget, else send + copy */
    int            has_layout;    /* a non-cached dispatch filled the arrays below */
    int            layout;        /* eep_ep_layout_t of that dispatch */
    uint64_t       seq;           /* call number of that dispatch */
    int64_t        num_recv_rows; /* padded rows: exact (rows_exact) or rows_max */
    int            rows_exact;    /* num_recv_rows is the count (CPU_SYNC) */
    uint32_t       rows_tag;      /* one rank, NO_CPU_SYNC: its tag in the state's rows ring */
    uint32_t       dead_mask;     /* ranks dead for that dispatch (degraded mode, eep/ep.h) */

    /* Device arrays, owned by the handle through release(). */
    int32_t *d_expert_counts;  /* [El] real rows per local expert */
    int32_t *d_expert_offsets; /* [2 (El + 1)] exclusive prefix sums of padded counts, then of
                                  padding rows (a cached dispatch's layout, read, not scanned) */
    int32_t *d_send_slot;      /* [max_tokens, world]: my slot in each destination's
                                      region, -1 where the token does not go (cached mode) */
    int32_t *d_row_src;        /* unused by the direct-mode kernels (NULL) */
    float   *d_row_weight;     /* unused by the direct-mode kernels (NULL) */
    /* Received records, indexed source * max_tokens + i (i < d_recv_n[source]): what combine
       and cached dispatches need, kept here because the window regions are reused. */
    int32_t *d_recv_n;    /* [world] records from each source */
    int32_t *d_recv_tok;  /* [world * max_tokens] the record's source token */
    int32_t *d_recv_ord;  /* [world * max_tokens] my ordinal among its destinations */
    int32_t *d_recv_rows; /* [world * max_tokens, K] row per top-k lane, -1 */
    float   *d_recv_w;    /* [world * max_tokens, K] weight per lane, 0 if not local */
    /* Hybrid with forwarding (lsaSize > 1): what this rank forwarded to its node for each
       source node, for the combine to relay the partials back. */
    int32_t *d_fwd_n;   /* [world] */
    int32_t *d_fwd_tok; /* [world * max_tokens] */
    int32_t *d_fwd_dm;  /* [world * max_tokens] */
    void    *d_block;   /* the one allocation all arrays above live in */

    void (*release)(struct eep_ep_handle *handle); /* frees the device arrays; may be NULL */
    void *release_arg;
};

/**
 * Allocate a zeroed handle (no device arrays yet).
 * @return EEP_OK or EEP_ERR_NO_MEMORY.
 */
/*
 * EEP_EP_TRACE=1 only: copy the per-block phase stamps (%globaltimer, ns) of the last dispatch
 * (@p combine 0) or combine into @p stamps (u64 [EEP_EPK_TRACE_WORDS]: [blocks][8] phases, 0 where
 * a block did not reach one; from EEP_EPK_TRACE_LAUNCH, [blocks][2] = when the block began and
 * when it left griddepcontrol.wait), the first @p n words.
 * @return EEP_ERR_NOT_FOUND when tracing is off.
 */
struct eep_runtime;
eep_status_t eep_ep_trace_copy(struct eep_runtime *rt, int combine, uint64_t *stamps, size_t n);

/* The parts of a dispatch call's host time (EEP_EP_TRACE=1, eep_ep_host_trace). */
enum {
    EEP_EP_HOST_CHECKS, /* from the call to the first enqueue: arguments, state, plan, handle */
    EEP_EP_HOST_FORK,   /* the copy engine's fork: events and the copy on the state's stream */
    EEP_EP_HOST_LAUNCH, /* the (first) dispatch kernel's launch */
    EEP_EP_HOST_COUNTS, /* CPU_SYNC: the wait for the counts, and the outputs sized */
    EEP_EP_HOST_REST,   /* later launches, the join, the handle's bookkeeping, to the return */
    EEP_EP_HOST_PARTS
};

/*
 * EEP_EP_TRACE=1 only: the host's milliseconds in eep_dispatch calls that returned EEP_OK, by
 * part (EEP_EP_HOST_*), summed since the state was made, into @p ms [EEP_EP_HOST_PARTS], and
 * their number into *@p calls (take differences around a loop).
 * @return EEP_ERR_NOT_FOUND when tracing is off or nothing was dispatched yet.
 */
eep_status_t eep_ep_host_trace(struct eep_runtime *rt, double *ms, uint64_t *calls);

/**
 * The handle's device arrays for a call of shape @p s, one allocation made once per handle
 * (released by eep_ep_handle_destroy through the hook this sets).
 */
eep_status_t eep_ep_handle_arrays(const eep_cuda_sym_t *cu, eep_ep_handle_t *h,
                                  const eep_ep_shape_t *s);

eep_status_t eep_ep_handle_create(const void *runtime, uint64_t epoch, int rank,
                                  eep_ep_handle_t **handle_p);

#endif /* EEP_EP_HANDLE_H */
