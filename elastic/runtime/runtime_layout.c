/*
 * runtime_layout.c - where the workspace regions sit in the symmetric window.
 *
 * Pure arithmetic, so it is unit-tested without a GPU.  Every region starts on its own 128-byte
 * line (remote stores to one region never share a line with polled words of another) and the data
 * area starts on a 4 KiB boundary.  The layout depends only on (nranks, window size), never on
 * the rank, because peers address each other's regions by the same offsets.
 */
#include "elastic/runtime/runtime.h"

#include "kernels/ep/ep_params.h" /* EEP_EPK_GIN_SIGNALS, EEP_EPK_GIN_COUNTERS */
#include "util/log.h"

static size_t eep_align_up(size_t v, size_t a)
{
    return (v + a - 1) / a * a;
}

eep_status_t eep_workspace_layout(int nranks, int lsa_size, size_t window_bytes,
                                  eep_workspace_layout_t *layout_p)
{
    eep_workspace_layout_t l;
    size_t                 off = 0;

    if (layout_p == NULL) {
        eep_error(EEP_SUBSYS_RUNTIME, "eep_workspace_layout: layout_p is NULL");
        return EEP_ERR_INVALID_ARG;
    }
    if (nranks < 1 || nranks > EEP_MAX_RANKS) {
        eep_error(EEP_SUBSYS_RUNTIME, "nranks %d is outside [1, %d]", nranks, EEP_MAX_RANKS);
        return EEP_ERR_INVALID_ARG;
    }
    if (lsa_size < 1 || lsa_size > EEP_MAX_LSA_RANKS || nranks % lsa_size != 0) {
        eep_error(EEP_SUBSYS_RUNTIME,
                  "NVLink team of %d ranks is outside [1, %d] or does not "
                  "divide %d ranks",
                  lsa_size, EEP_MAX_LSA_RANKS, nranks);
        return EEP_ERR_INVALID_ARG;
    }
    l.lsa_arrive_off = off;
    off += eep_align_up(8 * EEP_MAX_LSA_RANKS, EEP_WS_ALIGN);
    l.gin_epoch_off = off;
    off += EEP_WS_ALIGN;
    l.counters_off = off;
    off += eep_align_up(8 * EEP_WS_COUNTERS, EEP_WS_ALIGN);
    l.peer_slots_off  = off;
    l.peer_slot_bytes = EEP_WS_PEER_SLOT_BYTES;
    off += (size_t)nranks * EEP_WS_PEER_SLOT_BYTES;
    l.data_off     = eep_align_up(off, EEP_WS_DATA_ALIGN);
    l.window_bytes = window_bytes;
    if (window_bytes < l.data_off) {
        eep_error(EEP_SUBSYS_RUNTIME,
                  "window of %zu bytes is smaller than the workspace of %zu "
                  "bytes for %d ranks: raise EEP_WINDOW_SIZE",
                  window_bytes, l.data_off, nranks);
        return EEP_ERR_NO_RESOURCE;
    }
    *layout_p = l;
    return EEP_OK;
}

void eep_gin_reqs(int nranks, int rail_size, int gin, eep_gin_reqs_t *reqs_p)
{
    eep_gin_reqs_t r = { 0, 0, -1, -1 };

    if (gin && nranks > 0 && rail_size > 0) {
        r.signals    = rail_size + EEP_EPK_GIN_SIGNALS(nranks);
        r.counters   = EEP_EPK_GIN_COUNTERS;
        r.ep_signal0 = rail_size;
        r.ep_ctr0    = 0;
    }
    *reqs_p = r;
}
