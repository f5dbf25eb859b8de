/* gin/gin_share.c - CUDA memory shared between the processes of one GPU: the process-wide table of
 * our allocations exported to peers and of peers' allocations mapped here.  An allocation is
 * exported as a POSIX file descriptor (cuMem, the handle type ncclMemAlloc asks for) and named by
 * an id that stays fixed while any registration of it lives, so the four GIN contexts of a comm,
 * and several comms, share one mapping per (peer process, allocation); a mapping is released when
 * its last registration goes (deregMrSym, closeColl), also when its owner died.  Memory made
 * without a shareable handle (NCCL's signal buffer) is not exported: peers reach it through the
 * socket, and its owner writes it. */
#include <stdlib.h>
#include <unistd.h>

#include "gin/gin_int.h"

struct eep_gin_export {
    eep_gin_export_t *next;
    CUdeviceptr       base;
    size_t            size;
    uint64_t          id;
    int               refs;
    int               exportable;
};

struct eep_gin_import {
    eep_gin_import_t *next;
    uint64_t          nonce, id;
    size_t            size;
    CUdeviceptr       va;
    int               refs;
};

static pthread_mutex_t   eep_gin_share_lock = PTHREAD_MUTEX_INITIALIZER;
static eep_gin_export_t *eep_gin_exports;
static eep_gin_import_t *eep_gin_imports;
static uint64_t          eep_gin_export_ids;

/* A new fd for the allocation at ptr, or -1 when it has no POSIX-fd handle type. */
static int eep_gin_export_fd(void *ptr, int *exportable_p)
{
    CUmemGenericAllocationHandle h;
    CUmemAllocationProp          prop = { 0 };
    int                          fd   = -1;

    *exportable_p = 0;
    if (eep_gin_cu.cuMemRetainAllocationHandle(&h, ptr) != CUDA_SUCCESS) {
        return -1; /* not cuMem memory (cudaMalloc): reached through the socket */
    }
    if (eep_gin_cu.cuMemGetAllocationPropertiesFromHandle(&prop, h) == CUDA_SUCCESS &&
        (prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) &&
        EEP_GIN_CU(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                                0)) == 0) {
        *exportable_p = 1;
    }
    eep_gin_cu.cuMemRelease(h);
    return fd;
}

int eep_gin_export_get(void *ptr, size_t size, eep_gin_export_t **exp_p, uint64_t *alloc_id_p,
                       uint64_t *alloc_size_p, uint64_t *offset_p, int *fd_p)
{
    eep_gin_export_t *e;
    CUdeviceptr       base  = 0;
    size_t            asize = 0;
    int               exportable;

    (void)size;
    if (EEP_GIN_CU(cuMemGetAddressRange(&base, &asize, (CUdeviceptr)ptr)) != 0) {
        return -1;
    }
    *fd_p = eep_gin_export_fd((void *)base, &exportable);
    pthread_mutex_lock(&eep_gin_share_lock);
    for (e = eep_gin_exports; e != NULL; e = e->next) {
        if (e->base == base && e->size == asize) {
            break;
        }
    }
    if (e == NULL) {
        e = calloc(1, sizeof(*e));
        if (e == NULL) {
            pthread_mutex_unlock(&eep_gin_share_lock);
            if (*fd_p >= 0) {
                close(*fd_p);
            }
            return -1;
        }
        e->base         = base;
        e->size         = asize;
        e->id           = ++eep_gin_export_ids;
        e->exportable   = exportable;
        e->next         = eep_gin_exports;
        eep_gin_exports = e;
    }
    e->refs++;
    pthread_mutex_unlock(&eep_gin_share_lock);
    *exp_p        = e;
    *alloc_id_p   = e->id;
    *alloc_size_p = asize;
    *offset_p     = (uint64_t)((CUdeviceptr)ptr - base);
    return 0;
}

void eep_gin_export_put(eep_gin_export_t *exp)
{
    eep_gin_export_t **pp;

    if (exp == NULL) {
        return;
    }
    pthread_mutex_lock(&eep_gin_share_lock);
    if (--exp->refs == 0) {
        for (pp = &eep_gin_exports; *pp != NULL; pp = &(*pp)->next) {
            if (*pp == exp) {
                *pp = exp->next;
                break;
            }
        }
        free(exp);
    }
    pthread_mutex_unlock(&eep_gin_share_lock);
}

static int eep_gin_import_map(eep_gin_import_t *m, int fd, int cuda_dev)
{
    CUmemGenericAllocationHandle h;
    CUmemAllocationProp          prop   = { 0 };
    CUmemAccessDesc              access = { 0 };
    size_t                       gran   = 0;

    if (EEP_GIN_CU(cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd,
                                                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) != 0) {
        return -1;
    }
    prop.type          = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id   = cuda_dev;
    if (EEP_GIN_CU(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM)) !=
            0 ||
        gran == 0 || m->size % gran != 0) {
        EEP_GIN_WARN("peer allocation of %zu bytes is not a multiple of the granularity %zu",
                     m->size, gran);
        goto err_release;
    }
    if (EEP_GIN_CU(cuMemAddressReserve(&m->va, m->size, gran, 0, 0)) != 0) {
        goto err_release;
    }
    if (EEP_GIN_CU(cuMemMap(m->va, m->size, 0, h, 0)) != 0) {
        goto err_free_va;
    }
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id   = cuda_dev;
    access.flags         = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (EEP_GIN_CU(cuMemSetAccess(m->va, m->size, &access, 1)) != 0) {
        goto err_unmap;
    }
    eep_gin_cu.cuMemRelease(h); /* the mapping holds the memory now */
    return 0;

err_unmap:
    eep_gin_cu.cuMemUnmap(m->va, m->size);
err_free_va:
    eep_gin_cu.cuMemAddressFree(m->va, m->size);
err_release:
    eep_gin_cu.cuMemRelease(h);
    return -1;
}

int eep_gin_import_get(uint64_t nonce, uint64_t alloc_id, uint64_t alloc_size, int fd, int cuda_dev,
                       eep_gin_import_t **imp_p, char **mapped_p)
{
    eep_gin_import_t *m;
    int               ret = -1;

    pthread_mutex_lock(&eep_gin_share_lock);
    for (m = eep_gin_imports; m != NULL; m = m->next) {
        if (m->nonce == nonce && m->id == alloc_id && m->size == alloc_size) {
            break;
        }
    }
    if (m == NULL && fd >= 0) {
        m = calloc(1, sizeof(*m));
        if (m == NULL) {
            goto out;
        }
        m->nonce = nonce;
        m->id    = alloc_id;
        m->size  = alloc_size;
        if (eep_gin_import_map(m, fd, cuda_dev) != 0) {
            free(m);
            m = NULL;
            goto out;
        }
        m->next         = eep_gin_imports;
        eep_gin_imports = m;
    }
    if (m != NULL) {
        m->refs++;
        *imp_p    = m;
        *mapped_p = (char *)m->va;
        ret       = 0;
    }
out:
    pthread_mutex_unlock(&eep_gin_share_lock);
    if (fd >= 0) {
        close(fd);
    }
    return ret;
}

void eep_gin_share_census(int *exports_p, int *imports_p, size_t *import_bytes_p)
{
    eep_gin_export_t *e;
    eep_gin_import_t *m;

    *exports_p      = 0;
    *imports_p      = 0;
    *import_bytes_p = 0;
    pthread_mutex_lock(&eep_gin_share_lock);
    for (e = eep_gin_exports; e != NULL; e = e->next) {
        (*exports_p)++;
    }
    for (m = eep_gin_imports; m != NULL; m = m->next) {
        (*imports_p)++;
        *import_bytes_p += m->size;
    }
    pthread_mutex_unlock(&eep_gin_share_lock);
}

void eep_gin_import_put(eep_gin_import_t *imp)
{
    eep_gin_import_t **pp;

    if (imp == NULL) {
        return;
    }
    pthread_mutex_lock(&eep_gin_share_lock);
    if (--imp->refs == 0) {
        for (pp = &eep_gin_imports; *pp != NULL; pp = &(*pp)->next) {
            if (*pp == imp) {
                *pp = imp->next;
                break;
            }
        }
        EEP_GIN_CU(cuMemUnmap(imp->va, imp->size));
        EEP_GIN_CU(cuMemAddressFree(imp->va, imp->size));
        free(imp);
    }
    pthread_mutex_unlock(&eep_gin_share_lock);
}
