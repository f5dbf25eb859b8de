/*
 * eepd_view.h - the pure part of eepd: turning members into a view (no etcd, no gRPC, no clock).
 *
 * Rank order is stable: members of the current view that are still eligible keep their relative
 * order, joiners are appended in join order (etcd create revision, then id).  Experts are placed
 * evenly in contiguous blocks; redundant copies go to the next ranks round the ring.  The settle
 * window batches changes: a change waits until nothing changed for settle_ms (capped at
 * 4 * settle_ms after the first change); urgent changes (leave, drain, fault) skip it.
 */
#ifndef EEP_EEPD_VIEW_H
#define EEP_EEPD_VIEW_H

#include <stddef.h>
#include <stdint.h>

#include "eep/status.h"

typedef struct {
    const char *id;
    int64_t     join_revision;
    int         eligible; /* registered, not leaving, not cordoned, not drained */
} eepd_candidate_t;

/**
 * Compute the rank order of the next view.
 * @param [in]  cur_ids     member ids of the current view in rank order (may be NULL if n_cur 0).
 * @param [in]  cands       every registered member.
 * @param [in]  max_ranks   0: unbounded.
 * @param [out] order_p     n_cands entries: indices into @p cands in rank order.
 * @param [out] n_p         number of ranks (<= max_ranks).
 */
eep_status_t eepd_view_order(const char *const *cur_ids, size_t n_cur,
                             const eepd_candidate_t *cands, size_t n_cands, size_t max_ranks,
                             size_t *order_p, size_t *n_p);

/**
 * Place @p n_experts experts on @p n_ranks ranks, each with 1 + @p redundant copies (capped at
 * n_ranks).  @p ranks_p gets n_experts * copies entries: expert e's copies at [e * copies ...].
 * @param [out] copies_p  copies per expert actually placed.
 */
eep_status_t eepd_view_place(uint32_t n_experts, uint32_t redundant, uint32_t n_ranks,
                             uint32_t *ranks_p, uint32_t *copies_p);

/** @return 1 when the ordered id lists differ. */
int eepd_view_differs(const char *const *a, size_t n_a, const char *const *b, size_t n_b);

typedef struct {
    int64_t pending_since_ms; /* -1: nothing pending */
    int64_t last_change_ms;
} eepd_settle_t;

void eepd_settle_reset(eepd_settle_t *settle);
/** Record a change seen at @p now_ms. */
void eepd_settle_note(eepd_settle_t *settle, int64_t now_ms);
/** @return 1 when a pending change may be published at @p now_ms. */
int eepd_settle_ready(const eepd_settle_t *settle, int64_t now_ms, int64_t settle_ms);

/** @return EEP_OK when @p next may follow @p prev (strictly greater), else EEP_ERR_STALE_EPOCH. */
eep_status_t eepd_epoch_check(uint64_t prev, uint64_t next);

/* Epochs live in [1, EEPD_EPOCH_MAX]: far from wrapping, and exact in a JSON double. */
#define EEPD_EPOCH_MAX (1ull << 53)

/**
 * @return 1 when @p epoch is plausible after @p known_max (the highest epoch seen, 0 if none):
 * in [1, EEPD_EPOCH_MAX] and at most @p max_jump past @p known_max.  A forged 2^64-1 fails.
 */
int eepd_epoch_plausible(uint64_t known_max, uint64_t epoch, uint64_t max_jump);

#endif
