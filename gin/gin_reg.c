/* gin/gin_reg.c - collective registration (regMrSym) and its local undo (deregMrSym).  Every rank
 * registers the same memories in the same order; each one sends every peer, on the ctl socket, a
 * record of its registration (the index and generation peers will name it by, its type and size,
 * and for CUDA memory the allocation's id and a POSIX fd passed with SCM_RIGHTS), then reads every
 * peer's.  A peer's CUDA allocation is mapped here (once per process, gin_share.c), so a put is a
 * copy straight into it; host memory, and CUDA memory that cannot be exported, is reached through
 * the sig socket and written by its owner.  The one pointer returned is both the mhandle and the
 * ginHandle. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gin/gin_int.h"

typedef struct {
    uint32_t magic;
    uint32_t index, gen;
    int32_t  type;
    uint64_t nonce;
    uint64_t alloc_id, alloc_size, alloc_offset;
    uint64_t size;
    int32_t  has_fd;
    int32_t  pad;
} eep_gin_reg_msg_t;

#define EEP_GIN_REG_MSG_MAGIC 0x7265676du

eep_gin_reg_t *eep_gin_reg_find(eep_gin_comm_t *comm, uint32_t index, uint32_t gen)
{
    if (index < comm->nregs && comm->regs[index] != NULL && comm->regs[index]->gen == gen) {
        return comm->regs[index];
    }
    return NULL;
}

void eep_gin_reg_free(eep_gin_reg_t *reg)
{
    eep_gin_comm_t *comm = reg->comm;
    int             j;

    for (j = 0; reg->peer != NULL && j < comm->nranks; j++) {
        eep_gin_import_put(reg->peer[j].imp);
    }
    eep_gin_export_put(reg->exp);
    if (reg->index < comm->nregs && comm->regs[reg->index] == reg) {
        comm->regs[reg->index] = NULL;
    }
    free(reg->peer);
    reg->magic = 0;
    free(reg);
}

/* Puts reg in the first free slot of the table; comm->lock held. */
static int eep_gin_reg_insert(eep_gin_comm_t *comm, eep_gin_reg_t *reg)
{
    eep_gin_reg_t **grown;
    uint32_t        i, n;

    for (i = 0; i < comm->nregs; i++) {
        if (comm->regs[i] == NULL) {
            break;
        }
    }
    if (i == comm->nregs) {
        n     = comm->nregs == 0 ? 16 : 2 * comm->nregs;
        grown = realloc(comm->regs, n * sizeof(*grown));
        if (grown == NULL) {
            return -1;
        }
        memset(grown + comm->nregs, 0, (n - comm->nregs) * sizeof(*grown));
        comm->regs  = grown;
        comm->nregs = n;
    }
    reg->index    = i;
    reg->gen      = comm->next_gen++;
    comm->regs[i] = reg;
    return 0;
}

/* The CUDA context of the device holding ptr, for comms whose connect ran without one. */
static int eep_gin_reg_find_cuda(eep_gin_comm_t *comm, void *ptr)
{
    CUdevice dev;
    int      ordinal = -1;

    if (eep_gin_cu.cuCtxGetCurrent(&comm->cuctx) == CUDA_SUCCESS && comm->cuctx != NULL) {
        if (EEP_GIN_CU(cuCtxGetDevice(&comm->cudev)) != 0) {
            return -1;
        }
    } else if (EEP_GIN_CU(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                                (CUdeviceptr)ptr)) != 0 ||
               EEP_GIN_CU(cuDeviceGet(&dev, ordinal)) != 0 ||
               EEP_GIN_CU(cuDevicePrimaryCtxRetain(&comm->cuctx, dev)) != 0) {
        return -1;
    } else {
        comm->cudev = ordinal;
    }
    comm->workctx = eep_gin_cuda_work_context(comm->cuctx, comm->cudev);
    return 0;
}

/* Sends ours to every peer, then reads every peer's: small records, they fit the socket
 * buffers, so nobody waits for a reader. */
static int eep_gin_reg_exchange(eep_gin_comm_t *comm, eep_gin_reg_t *reg,
                                const eep_gin_reg_msg_t *mine, int fd)
{
    int64_t           deadline = eep_gin_now_ms() + eep_gin_timeout_ms();
    eep_gin_reg_msg_t m;
    int               j, pfd;

    for (j = 0; j < comm->nranks; j++) {
        if (j != comm->rank &&
            eep_gin_sock_send_all(comm->peers[j].ctl_fd, mine, sizeof(*mine), fd, deadline) != 0) {
            eep_gin_peer_lost(comm, j, "registration send");
            return -1;
        }
    }
    for (j = 0; j < comm->nranks; j++) {
        eep_gin_reg_peer_t *p = &reg->peer[j];

        if (j == comm->rank) {
            continue;
        }
        if (eep_gin_sock_recv_all(comm->peers[j].ctl_fd, &m, sizeof(m), &pfd, deadline) != 0) {
            eep_gin_peer_lost(comm, j, "registration receive");
            return -1;
        }
        if (m.magic != EEP_GIN_REG_MSG_MAGIC) {
            EEP_GIN_WARN("rank %d: a bad registration record from rank %d", comm->rank, j);
            if (pfd >= 0) {
                close(pfd);
            }
            return -1;
        }
        p->index = m.index;
        p->gen   = m.gen;
        p->type  = m.type;
        p->size  = m.size;
        if (m.type == EEP_NCCL_PTR_CUDA && m.has_fd && pfd >= 0 && comm->cuctx != NULL) {
            if (eep_gin_import_get(m.nonce, m.alloc_id, m.alloc_size, pfd, comm->cudev, &p->imp,
                                   &p->mapped) == 0) {
                p->mapped += m.alloc_offset;
            } else {
                EEP_GIN_WARN("rank %d: rank %d's memory could not be mapped; its puts go "
                             "through the socket",
                             comm->rank, j);
                p->mapped = NULL;
            }
        } else if (pfd >= 0) {
            close(pfd);
        }
    }
    return 0;
}

eep_nccl_result_t eep_gin_reg_mr_sym(void *coll_comm, void *data, size_t size, int type,
                                     uint64_t mr_flags, void **mhandle, void **gin_handle)
{
    eep_gin_comm_t   *comm = coll_comm;
    eep_gin_reg_t    *reg;
    eep_gin_reg_msg_t mine = {
        .magic = EEP_GIN_REG_MSG_MAGIC, .type = type, .nonce = eep_gin_process_nonce(), .size = size
    };
    int fd = -1, ret;

    (void)mr_flags; /* strong ordering holds for every registration: puts to a peer are FIFO */
    *mhandle = *gin_handle = NULL;
    if (comm == NULL || comm->magic != EEP_GIN_COMM_MAGIC ||
        (type != EEP_NCCL_PTR_HOST && type != EEP_NCCL_PTR_CUDA)) {
        return EEP_NCCL_INVALID_ARGUMENT;
    }
    if (comm->broken_peer >= 0) {
        EEP_GIN_WARN("rank %d: regMrSym on a comm that lost rank %d", comm->rank,
                     comm->broken_peer);
        return EEP_NCCL_REMOTE_ERROR;
    }
    reg = calloc(1, sizeof(*reg));
    if (reg == NULL) {
        return EEP_NCCL_SYSTEM_ERROR;
    }
    reg->magic = EEP_GIN_REG_MAGIC;
    reg->comm  = comm;
    reg->base  = data;
    reg->size  = size;
    reg->type  = type;
    reg->peer  = calloc((size_t)comm->nranks, sizeof(*reg->peer));
    if (reg->peer == NULL) {
        free(reg);
        return EEP_NCCL_SYSTEM_ERROR;
    }
    if (type == EEP_NCCL_PTR_CUDA) {
        if (eep_gin_cuda_load() != 0) {
            EEP_GIN_WARN("regMrSym of CUDA memory %p without a CUDA driver", data);
            goto err_free;
        }
        if ((comm->cuctx == NULL && eep_gin_reg_find_cuda(comm, data) != 0) ||
            eep_gin_comm_bind_cuda(comm) != 0 ||
            eep_gin_export_get(data, size, &reg->exp, &mine.alloc_id, &mine.alloc_size,
                               &mine.alloc_offset, &fd) != 0) {
            goto err_free;
        }
        mine.has_fd = fd >= 0;
    }
    pthread_mutex_lock(&comm->lock);
    ret = eep_gin_reg_insert(comm, reg);
    pthread_mutex_unlock(&comm->lock);
    if (ret != 0) {
        goto err_free;
    }
    mine.index            = reg->index;
    mine.gen              = reg->gen;
    reg->peer[comm->rank] = (eep_gin_reg_peer_t){
        .index = reg->index, .gen = reg->gen, .type = type, .size = size, .mapped = data
    };
    if (eep_gin_reg_exchange(comm, reg, &mine, fd) != 0) {
        goto err_remove;
    }
    if (fd >= 0) {
        close(fd);
    }
    EEP_GIN_INFO("rank %d: registered %p (%zu bytes, %s) as %u.%u", comm->rank, data, size,
                 type == EEP_NCCL_PTR_CUDA
                     ? (mine.has_fd ? "cuda, exported" : "cuda, owner-written")
                     : "host",
                 reg->index, reg->gen);
    *mhandle = *gin_handle = reg;
    return EEP_NCCL_SUCCESS;

err_remove:
    pthread_mutex_lock(&comm->lock);
    eep_gin_reg_free(reg);
    pthread_mutex_unlock(&comm->lock);
    if (fd >= 0) {
        close(fd);
    }
    return EEP_NCCL_REMOTE_ERROR;
err_free:
    eep_gin_export_put(reg->exp);
    if (fd >= 0) {
        close(fd);
    }
    free(reg->peer);
    free(reg);
    return EEP_NCCL_SYSTEM_ERROR;
}

eep_nccl_result_t eep_gin_dereg_mr_sym(void *coll_comm, void *mhandle)
{
    eep_gin_comm_t *comm = coll_comm;
    eep_gin_reg_t  *reg  = mhandle;

    if (reg == NULL) {
        return EEP_NCCL_SUCCESS;
    }
    if (comm == NULL || reg->magic != EEP_GIN_REG_MAGIC || reg->comm != comm) {
        return EEP_NCCL_INVALID_ARGUMENT;
    }
    pthread_mutex_lock(&comm->lock);
    if (reg->type == EEP_NCCL_PTR_CUDA && eep_gin_comm_bind_cuda(comm) == 0) {
        /* NCCL frees this memory next (on abort with requests still queued): no copy or signal
         * write of ours may still be pending on it.  Copy-engine work only: bounded. */
        int j;
        for (j = 0; j < comm->nranks; j++) {
            if (comm->peers[j].stream != NULL) {
                eep_gin_cu.cuStreamSynchronize(comm->peers[j].stream);
            }
        }
        if (comm->apply_stream != NULL) {
            eep_gin_cu.cuStreamSynchronize(comm->apply_stream);
        }
    }
    EEP_GIN_INFO("rank %d: deregistered %p (%zu bytes) as %u.%u", comm->rank, reg->base, reg->size,
                 reg->index, reg->gen);
    eep_gin_reg_free(reg);
    pthread_mutex_unlock(&comm->lock);
    return EEP_NCCL_SUCCESS;
}
