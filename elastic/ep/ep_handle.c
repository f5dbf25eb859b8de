/*
 * ep_handle.c - lifetime of dispatch handles.
 *
 * The host part is a plain heap struct; its device arrays are one allocation made by
 * eep_ep_handle_arrays() on the first dispatch that needs them and given back through the release
 * hook it sets, so create and destroy work with or without a GPU.  The magic word is cleared on
 * destroy so that a use after destroy is reported rather than followed.
 */
#include "elastic/ep/ep_handle.h"

#include <stdlib.h>

#include "elastic/gpu/cuda_sym.h"
#include "util/log.h"

eep_status_t eep_ep_handle_create(const void *runtime, uint64_t epoch, int rank,
                                  eep_ep_handle_t **handle_p)
{
    eep_ep_handle_t *h = calloc(1, sizeof(*h));

    if (h == NULL) {
        eep_error(EEP_SUBSYS_KERNEL, "dispatch: cannot allocate a handle (%zu bytes)", sizeof(*h));
        return EEP_ERR_NO_MEMORY;
    }
    h->magic   = EEP_EP_HANDLE_MAGIC;
    h->runtime = runtime;
    h->epoch   = epoch;
    h->rank    = rank;
    *handle_p  = h;
    return EEP_OK;
}

void eep_ep_handle_destroy(eep_ep_handle_t *h)
{
    if (h == NULL) {
        return;
    }
    if (h->magic != EEP_EP_HANDLE_MAGIC) {
        eep_error(EEP_SUBSYS_KERNEL, "handle %p destroyed twice or corrupted: left alone",
                  (void *)h);
        return;
    }
    if (h->release != NULL) {
        h->release(h);
    }
    h->magic = 0;
    free(h);
}

static void eep_ep_handle_release(eep_ep_handle_t *h)
{
    const eep_cuda_sym_t *cu;

    if (h->d_block != NULL && eep_cuda_sym_driver(&cu) == EEP_OK) {
        cu->cuMemFree((CUdeviceptr)(uintptr_t)h->d_block);
    }
    h->d_block = NULL;
}

eep_status_t eep_ep_handle_arrays(const eep_cuda_sym_t *cu, eep_ep_handle_t *h,
                                  const eep_ep_shape_t *s)
{
    /* per local expert: room for the most a rank can hold (a handle refilled in a later epoch
       may find this rank holding more experts under that view's placement) */
    const size_t El = (size_t)EEP_EP_MAX_LOCAL_EXPERTS, W = (size_t)s->world;
    const size_t mt = (size_t)s->max_tokens, K = (size_t)s->num_topk;
    const size_t sizes[11] = { El * 4,     2 * (El + 1) * 4, mt * W * 4,     W * 4,
                               W * mt * 4, W * mt * 4,       W * mt * K * 4, W * mt * K * 4,
                               W * 4,      W * mt * 4,       W * mt * 4 };
    size_t       offs[11], total = 0;
    CUdeviceptr  base = 0;
    eep_status_t status;
    int          i;

    if (h->d_block != NULL) {
        return EEP_OK;
    }
    for (i = 0; i < 11; i++) {
        offs[i] = total;
        total += (sizes[i] + 255) / 256 * 256;
    }
    status = eep_status_from_cu(cu->cuMemAlloc(&base, total), "cuMemAlloc(dispatch handle)");
    if (status != EEP_OK) {
        return status;
    }
    h->d_block          = (void *)(uintptr_t)base;
    h->d_expert_counts  = (int32_t *)(uintptr_t)(base + offs[0]);
    h->d_expert_offsets = (int32_t *)(uintptr_t)(base + offs[1]);
    h->d_send_slot      = (int32_t *)(uintptr_t)(base + offs[2]);
    h->d_recv_n         = (int32_t *)(uintptr_t)(base + offs[3]);
    h->d_recv_tok       = (int32_t *)(uintptr_t)(base + offs[4]);
    h->d_recv_ord       = (int32_t *)(uintptr_t)(base + offs[5]);
    h->d_recv_rows      = (int32_t *)(uintptr_t)(base + offs[6]);
    h->d_recv_w         = (float *)(uintptr_t)(base + offs[7]);
    h->d_fwd_n          = (int32_t *)(uintptr_t)(base + offs[8]);
    h->d_fwd_tok        = (int32_t *)(uintptr_t)(base + offs[9]);
    h->d_fwd_dm         = (int32_t *)(uintptr_t)(base + offs[10]);
    h->release          = eep_ep_handle_release;
    return EEP_OK;
}
