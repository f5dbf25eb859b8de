/*
 * eepd_view.c - view computation: stable rank order, even expert placement, settle window.
 *
 * Pure functions of their arguments so that they are unit-tested without etcd and fuzzed without
 * a network.  Quadratic in the member count, which stays in the hundreds.
 */
#include "control/eepd/eepd_view.h"

#include <stdlib.h>
#include <string.h>

static int eepd_view_find(const eepd_candidate_t *cands, size_t n, const char *id)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (cands[i].id != NULL && strcmp(cands[i].id, id) == 0) {
            return (int)i;
        }
    }
    return -1;
}

static int eepd_view_joiner_before(const eepd_candidate_t *a, const eepd_candidate_t *b)
{
    if (a->join_revision != b->join_revision) {
        return a->join_revision < b->join_revision;
    }
    return strcmp(a->id, b->id) < 0;
}

eep_status_t eepd_view_order(const char *const *cur_ids, size_t n_cur,
                             const eepd_candidate_t *cands, size_t n_cands, size_t max_ranks,
                             size_t *order_p, size_t *n_p)
{
    unsigned char *used;
    size_t         n = 0, i, j, best;
    int            k;

    if ((cur_ids == NULL && n_cur > 0) || (cands == NULL && n_cands > 0) || order_p == NULL ||
        n_p == NULL) {
        return EEP_ERR_INVALID_ARG;
    }
    used = calloc(n_cands + 1, 1);
    if (used == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    /* Survivors first, in their old relative order. */
    for (i = 0; i < n_cur; i++) {
        if (cur_ids[i] == NULL) {
            continue;
        }
        k = eepd_view_find(cands, n_cands, cur_ids[i]);
        if (k >= 0 && cands[k].eligible && !used[k] && (max_ranks == 0 || n < max_ranks)) {
            used[k]      = 1;
            order_p[n++] = (size_t)k;
        }
    }
    /* Then joiners, oldest registration first (selection: the list is short). */
    for (;;) {
        if (max_ranks != 0 && n >= max_ranks) {
            break;
        }
        best = n_cands;
        for (j = 0; j < n_cands; j++) {
            if (used[j] || !cands[j].eligible || cands[j].id == NULL) {
                continue;
            }
            if (best == n_cands || eepd_view_joiner_before(&cands[j], &cands[best])) {
                best = j;
            }
        }
        if (best == n_cands) {
            break;
        }
        used[best]   = 1;
        order_p[n++] = best;
    }
    free(used);
    *n_p = n;
    return EEP_OK;
}

eep_status_t eepd_view_place(uint32_t n_experts, uint32_t redundant, uint32_t n_ranks,
                             uint32_t *ranks_p, uint32_t *copies_p)
{
    uint32_t copies, e, c, primary;

    if (n_ranks == 0 || (n_experts > 0 && ranks_p == NULL) || copies_p == NULL) {
        return EEP_ERR_INVALID_ARG;
    }
    copies = 1 + redundant;
    if (copies > n_ranks) {
        copies = n_ranks;
    }
    for (e = 0; e < n_experts; e++) {
        /* Contiguous blocks: rank r holds experts [r*E/N, (r+1)*E/N); sizes differ by <= 1. */
        primary = (uint32_t)(((uint64_t)e * n_ranks) / n_experts);
        for (c = 0; c < copies; c++) {
            ranks_p[(size_t)e * copies + c] = (primary + c) % n_ranks;
        }
    }
    *copies_p = copies;
    return EEP_OK;
}

int eepd_view_differs(const char *const *a, size_t n_a, const char *const *b, size_t n_b)
{
    size_t i;

    if (n_a != n_b) {
        return 1;
    }
    for (i = 0; i < n_a; i++) {
        if (strcmp(a[i], b[i]) != 0) {
            return 1;
        }
    }
    return 0;
}

void eepd_settle_reset(eepd_settle_t *settle)
{
    settle->pending_since_ms = -1;
    settle->last_change_ms   = -1;
}

void eepd_settle_note(eepd_settle_t *settle, int64_t now_ms)
{
    if (settle->pending_since_ms < 0) {
        settle->pending_since_ms = now_ms;
    }
    settle->last_change_ms = now_ms;
}

int eepd_settle_ready(const eepd_settle_t *settle, int64_t now_ms, int64_t settle_ms)
{
    if (settle->pending_since_ms < 0) {
        return 0;
    }
    return now_ms - settle->last_change_ms >= settle_ms ||
           now_ms - settle->pending_since_ms >= 4 * settle_ms;
}

eep_status_t eepd_epoch_check(uint64_t prev, uint64_t next)
{
    return next > prev ? EEP_OK : EEP_ERR_STALE_EPOCH;
}

int eepd_epoch_plausible(uint64_t known_max, uint64_t epoch, uint64_t max_jump)
{
    if (epoch == 0 || epoch > EEPD_EPOCH_MAX) {
        return 0;
    }
    return known_max == 0 || epoch <= known_max || epoch - known_max <= max_jump;
}
