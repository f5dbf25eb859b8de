/*
 * ep_handle.c - lifetime of dispatch handles.
 *
 * The host part is a plain heap struct; device arrays are given back through the release hook set
 * by whoever allocated them (the runtime), so destroy works with or without a GPU.  The magic word
 * is cleared on destroy so that a use after destroy is reported rather than followed.
 */
#include "elastic/ep/ep_handle.h"

#include <stdlib.h>

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
