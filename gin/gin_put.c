/* gin/gin_put.c - one-sided puts and signals (iput, iputSignal, test, ginProgress).  A put to a
 * peer whose memory is mapped here is a CUDA copy straight into it, on one stream per (context,
 * peer); any other put (host memory, memory the peer could not export) goes over that pair's sig
 * socket and its owner writes it.  Requests of a (context, peer) complete strictly in issue order:
 * the head waits for its copy's event, then writes its socket bytes, and only then does the next
 * one move.  So a signal record leaves after every earlier put to that peer has landed, which is
 * GIN's ordering rule, and done means the source was consumed and the record is queued behind the
 * data.  Signals are applied by their owner (NCCL's signal buffer cannot be exported): the one
 * progress thread of the comm reads the record and adds, on the GPU by a read (D2H) and a
 * cuStreamWriteValue64, single writer by construction.  A lost peer fails nothing: its requests
 * complete as dropped (NCCL 2.28.9's ncclCommShrink refuses a parent whose GIN proxy saw an
 * error: init.cc:2568 ncclCommEnsureReady -> ncclCommGetAsyncError, init.cc:2717, set from
 * iput's result, gin_host.cc:34 and gin_host_proxy.cc:488); the death is reported by
 * eep_gin_peers_lost and by the library's own bounded waits.  Nothing here ever waits. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "gin/gin_int.h"

/* Records and payload bytes one peer's receive may take in one progress call (fairness). */
#define EEP_GIN_RX_BUDGET (8u << 20)

static int eep_gin_peer_stream(eep_gin_comm_t *comm, eep_gin_peer_t *p)
{
    if (eep_gin_comm_bind_cuda(comm) != 0) {
        EEP_GIN_WARN("rank %d: a CUDA put without a CUDA context", comm->rank);
        return -1;
    }
    if (p->stream == NULL && EEP_GIN_CU(cuStreamCreate(&p->stream, CU_STREAM_NON_BLOCKING)) != 0) {
        p->stream = NULL;
        return -1;
    }
    return 0;
}

static int eep_gin_apply_stream(eep_gin_comm_t *comm)
{
    if (eep_gin_comm_bind_cuda(comm) != 0) {
        return -1;
    }
    if (comm->apply_stream == NULL &&
        EEP_GIN_CU(cuStreamCreate(&comm->apply_stream, CU_STREAM_NON_BLOCKING)) != 0) {
        comm->apply_stream = NULL;
        return -1;
    }
    return 0;
}

/* Queues the request's CUDA copy (or staging) on the peer's stream and records its event. */
static int eep_gin_req_copy(eep_gin_comm_t *comm, eep_gin_peer_t *p, eep_gin_req_t *r, char *dst,
                            int dst_host, const char *src, int src_host, size_t size)
{
    CUresult res;

    if (eep_gin_peer_stream(comm, p) != 0) {
        return -1;
    }
    if (r->event == NULL && EEP_GIN_CU(cuEventCreate(&r->event, CU_EVENT_DISABLE_TIMING)) != 0) {
        r->event = NULL;
        return -1;
    }
    if (src_host && !dst_host) {
        res = eep_gin_cu.cuMemcpyHtoDAsync((CUdeviceptr)dst, src, size, p->stream);
    } else if (!src_host && dst_host) {
        res = eep_gin_cu.cuMemcpyDtoHAsync(dst, (CUdeviceptr)src, size, p->stream);
    } else {
        /* between two allocations of one GPU the driver runs this as a copy kernel on the SMs
           (also when cuMemcpyBatchAsync is asked for the copy engines: measured on an H200), so a
           kernel that fills the GPU and waits for it never sees it land: hybrid EP calls leave
           SMs free (EEP_EP_HYBRID_FREE_SMS, elastic/ep/ep_sm_model.h) */
        res = eep_gin_cu.cuMemcpyAsync((CUdeviceptr)dst, (CUdeviceptr)src, size, p->stream);
    }
    if (eep_gin_cuda_check(res, "cuMemcpy*Async (put)", __FILE__, __LINE__) != 0 ||
        EEP_GIN_CU(cuEventRecord(r->event, p->stream)) != 0) {
        return -1;
    }
    r->copy_pending = 1;
    EEP_GIN_TRACEF("rank %d: put of %zu bytes to rank %d: copy queued", comm->rank, size,
                   (int)(p - comm->peers));
    return 0;
}

static int eep_gin_in_range(uint64_t reg_size, uint64_t off, size_t size)
{
    return off <= reg_size && size <= reg_size - off;
}

/* NCCL 2.28.9's proxy takes an inline value's slot from the address of its STACK copy of the
 * descriptor instead of the queue's (src/gin/gin_host_proxy.cc:233 at v2.28.9-1, `gfd -
 * hostGpuCtx->queues`; 2.29.7 indexes by the descriptor's state): it writes the value outside
 * its inline buffer and passes us srcOff = that place - the buffer.  Refusing it stopped NCCL's
 * progress thread, so every later flush spun forever (putValue hung).  The value is where srcOff
 * says (NCCL's thread, this thread, wrote it just now), so a host source of 8 bytes or fewer out
 * of range is read there, with wrapping arithmetic, as NCCL computed it. */
static int eep_gin_stray_inline(const eep_gin_reg_t *src, size_t size)
{
    return src->type == EEP_NCCL_PTR_HOST && size <= sizeof(uint64_t);
}

/* Logs the first stray inline value of a comm, with the mapping NCCL wrote into (its write
 * clobbers 8 bytes there; the plugin cannot prevent that, only report it). */
static void eep_gin_stray_inline_note(eep_gin_comm_t *comm, const eep_gin_reg_t *src,
                                      uint64_t src_off)
{
    uintptr_t at = (uintptr_t)src->base + (uintptr_t)src_off;
    char      line[256], where[264] = "not in /proc/self/maps";
    FILE     *f;

    if (comm->stray_inline_seen++) {
        return;
    }
    f = fopen("/proc/self/maps", "r");
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        unsigned long lo, hi;

        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && at >= lo && at < hi) {
            line[strcspn(line, "\n")] = 0;
            snprintf(where, sizeof(where), "in %s", line);
            break;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    EEP_GIN_WARN("rank %d: NCCL 2.28.9's inline-value bug (gin_host_proxy.cc:233): putValue's "
                 "value was written at %p, %lld bytes from its buffer %p (%s); read from there",
                 comm->rank, (void *)at, (long long)src_off, (void *)src->base, where);
}

/* Copies size bytes at this process's address `from` without faulting: 0, or -1 when any of them
 * is not mapped readable (process_vm_readv on ourselves reports EFAULT instead of SIGSEGV). */
static int eep_gin_read_self(void *to, const void *from, size_t size)
{
    struct iovec local  = { .iov_base = to, .iov_len = size };
    struct iovec remote = { .iov_base = (void *)(uintptr_t)from, .iov_len = size };

    return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)size ? 0 : -1;
}

static eep_nccl_result_t eep_gin_put(eep_gin_comm_t *comm, uint64_t src_off, eep_gin_reg_t *src,
                                     size_t size, uint64_t dst_off, eep_gin_reg_t *dst,
                                     uint32_t rank, const eep_gin_wire_t *sig, void **request)
{
    eep_gin_peer_t *p;
    eep_gin_req_t  *r;
    const char     *from;
    int             self;

    *request = NULL;
    if (comm == NULL || comm->magic != EEP_GIN_COMM_MAGIC || rank >= (uint32_t)comm->nranks) {
        return EEP_NCCL_INVALID_ARGUMENT;
    }
    p    = &comm->peers[rank];
    self = rank == (uint32_t)comm->rank;
    if (size > 0 && !p->dead) {
        if (src == NULL || dst == NULL || src->magic != EEP_GIN_REG_MAGIC ||
            dst->magic != EEP_GIN_REG_MAGIC || dst_off > dst->peer[rank].size ||
            size > dst->peer[rank].size - dst_off ||
            (!eep_gin_in_range(src->size, src_off, size) && !eep_gin_stray_inline(src, size))) {
            EEP_GIN_WARN("rank %d: put of %zu bytes (source offset %llu) to rank %u outside its "
                         "registrations",
                         comm->rank, size, (unsigned long long)src_off, rank);
            return EEP_NCCL_INVALID_ARGUMENT;
        }
        if (!eep_gin_in_range(src->size, src_off, size)) {
            eep_gin_stray_inline_note(comm, src, src_off);
        }
    }
    if (p->dead) { /* dropped: completes in order, as a NIC's write to a dead node would */
        size = 0;
        sig  = NULL;
    }
    pthread_mutex_lock(&comm->lock);
    if (p->tail - p->head >= EEP_GIN_RING) {
        pthread_mutex_unlock(&comm->lock);
        EEP_GIN_WARN("rank %d: more than %d GIN requests to rank %u outstanding", comm->rank,
                     EEP_GIN_RING, rank);
        return EEP_NCCL_INTERNAL_ERROR;
    }
    r = &p->ring[p->tail % EEP_GIN_RING];
    {
        CUevent keep = r->event; /* events are reused with their slot */
        memset(r, 0, sizeof(*r));
        r->event = keep;
    }
    r->comm  = comm;
    r->peer  = rank;
    r->state = EEP_GIN_REQ_ISSUED;
    if (sig != NULL) {
        r->has_signal = 1;
        r->sig_hdr    = *sig;
    }
    if (size > 0) {
        int src_host = src->type == EEP_NCCL_PTR_HOST;

        from = (const char *)((uintptr_t)src->base + (uintptr_t)src_off); /* may be stray */
        if (src_host && size <= sizeof(r->inline_val)) {
            /* an inline value: its slot is reused soon.  A stray one (NCCL 2.28.9) is read with
               process_vm_readv, which fails instead of faulting where nothing is mapped. */
            if (eep_gin_in_range(src->size, src_off, size)) {
                memcpy(&r->inline_val, from, size);
            } else if (eep_gin_read_self(&r->inline_val, from, size) != 0) {
                EEP_GIN_WARN("rank %d: putValue's stray value at %p is not readable: the put "
                             "fails",
                             comm->rank, (const void *)from);
                r->state = EEP_GIN_REQ_FREE;
                pthread_mutex_unlock(&comm->lock);
                return EEP_NCCL_INVALID_ARGUMENT;
            }
            from = (const char *)&r->inline_val;
        }
        if (self || dst->peer[rank].mapped != NULL) {
            char *to      = self ? dst->base + dst_off : dst->peer[rank].mapped + dst_off;
            int   to_host = self ? dst->type == EEP_NCCL_PTR_HOST : 0;

            if (src_host && to_host) {
                memmove(to, from, size);
            } else if (eep_gin_req_copy(comm, p, r, to, to_host, from, src_host, size) != 0) {
                goto err;
            }
        } else {
            r->has_put_wire = 1;
            r->put_hdr      = (eep_gin_wire_t){ .kind      = EEP_GIN_WIRE_PUT,
                                                .reg_index = dst->peer[rank].index,
                                                .reg_gen   = dst->peer[rank].gen,
                                                .offset    = dst_off,
                                                .arg       = size };
            r->payload      = from;
            if (!src_host) {
                r->stage = malloc(size);
                if (r->stage == NULL ||
                    eep_gin_req_copy(comm, p, r, r->stage, 1, from, 0, size) != 0) {
                    goto err;
                }
                r->payload = r->stage;
            }
        }
    }
    p->tail++;
    pthread_mutex_unlock(&comm->lock);
    *request = r;
    return EEP_NCCL_SUCCESS;

err:
    free(r->stage);
    r->stage = NULL;
    r->state = EEP_GIN_REQ_FREE;
    pthread_mutex_unlock(&comm->lock);
    return EEP_NCCL_UNHANDLED_CUDA;
}

eep_nccl_result_t eep_gin_iput(void *coll_comm, uint64_t src_off, void *src_mhandle, size_t size,
                               uint64_t dst_off, void *dst_mhandle, uint32_t rank, void **request)
{
    return eep_gin_put(coll_comm, src_off, src_mhandle, size, dst_off, dst_mhandle, rank, NULL,
                       request);
}

eep_nccl_result_t eep_gin_iput_signal(void *coll_comm, uint64_t src_off, void *src_mhandle,
                                      size_t size, uint64_t dst_off, void *dst_mhandle,
                                      uint32_t rank, uint64_t signal_off, void *signal_mhandle,
                                      uint64_t signal_value, uint32_t signal_op, void **request)
{
    eep_gin_comm_t *comm = coll_comm;
    eep_gin_reg_t  *sreg = signal_mhandle;
    eep_gin_wire_t  sig;

    *request = NULL;
    if (comm == NULL || comm->magic != EEP_GIN_COMM_MAGIC || rank >= (uint32_t)comm->nranks ||
        sreg == NULL || sreg->magic != EEP_GIN_REG_MAGIC ||
        signal_off + sizeof(uint64_t) > sreg->peer[rank].size ||
        (signal_op != EEP_NCCL_SIGNAL_OP_INC && signal_op != EEP_NCCL_SIGNAL_OP_ADD)) {
        EEP_GIN_WARN("iputSignal: bad signal (rank %u, offset %llu, op %u)", rank,
                     (unsigned long long)signal_off, signal_op);
        return EEP_NCCL_INVALID_ARGUMENT;
    }
    sig = (eep_gin_wire_t){ .kind      = EEP_GIN_WIRE_SIGNAL,
                            .op        = signal_op,
                            .reg_index = sreg->peer[rank].index,
                            .reg_gen   = sreg->peer[rank].gen,
                            .offset    = signal_off,
                            .arg       = signal_op == EEP_NCCL_SIGNAL_OP_INC ? 1 : signal_value };
    return eep_gin_put(comm, src_off, src_mhandle, size, dst_off, dst_mhandle, rank, &sig, request);
}

/* Adds a signal record's value to this process's own memory; comm->lock held. */
static void eep_gin_apply_signal(eep_gin_comm_t *comm, const eep_gin_wire_t *w)
{
    eep_gin_reg_t *reg = eep_gin_reg_find(comm, w->reg_index, w->reg_gen);
    uint64_t       old = 0;
    CUdeviceptr    at;

    if (reg == NULL || w->offset + sizeof(uint64_t) > reg->size) {
        EEP_GIN_WARN("rank %d: a signal for registration %u.%u offset %llu, not live here: dropped",
                     comm->rank, w->reg_index, w->reg_gen, (unsigned long long)w->offset);
        return;
    }
    if (reg->type == EEP_NCCL_PTR_HOST) {
        __atomic_fetch_add((uint64_t *)(reg->base + w->offset), w->arg, __ATOMIC_SEQ_CST);
        return;
    }
    /* Read, add, write: correct because this thread is the only writer of this comm's signals
     * and NCCL forbids a reset racing with updates.  The write is ordered before the next read on
     * the same stream. */
    at = (CUdeviceptr)(reg->base + w->offset);
    if (eep_gin_apply_stream(comm) != 0 ||
        EEP_GIN_CU(cuMemcpyDtoHAsync(&old, at, sizeof(old), comm->apply_stream)) != 0 ||
        EEP_GIN_CU(cuStreamSynchronize(comm->apply_stream)) != 0 ||
        EEP_GIN_CU(cuStreamWriteValue64(comm->apply_stream, at, old + w->arg,
                                        CU_STREAM_WRITE_VALUE_DEFAULT)) != 0) {
        EEP_GIN_WARN("rank %d: signal at offset %llu not applied", comm->rank,
                     (unsigned long long)w->offset);
    } else {
        EEP_GIN_TRACEF("rank %d: signal at %u.%u+%llu applied: %llu -> %llu", comm->rank,
                       w->reg_index, w->reg_gen, (unsigned long long)w->offset,
                       (unsigned long long)old, (unsigned long long)(old + w->arg));
    }
}

/* The socket bytes of a request at offset r->sent: [put header, payload][signal record]. */
static size_t eep_gin_req_piece(eep_gin_req_t *r, const char **ptr_p)
{
    size_t off = r->sent, len;

    if (r->has_put_wire) {
        if (off < sizeof(r->put_hdr)) {
            *ptr_p = (const char *)&r->put_hdr + off;
            return sizeof(r->put_hdr) - off;
        }
        off -= sizeof(r->put_hdr);
        len = r->put_hdr.arg;
        if (off < len) {
            *ptr_p = r->payload + off;
            return len - off;
        }
        off -= len;
    }
    if (r->has_signal && off < sizeof(r->sig_hdr)) {
        *ptr_p = (const char *)&r->sig_hdr + off;
        return sizeof(r->sig_hdr) - off;
    }
    return 0;
}

/* Completes the peer's requests in order as far as they go; comm->lock held. */
static void eep_gin_send_progress(eep_gin_comm_t *comm, int peer)
{
    eep_gin_peer_t *p    = &comm->peers[peer];
    int             self = peer == comm->rank;
    const char     *ptr;
    size_t          len;
    ssize_t         n;
    CUresult        q;

    while (p->prog < p->tail) {
        eep_gin_req_t *r = &p->ring[p->prog % EEP_GIN_RING];

        if (p->dead) { /* dropped: done, so NCCL's queue and the GPU's flush move on */
            if (r->copy_pending && eep_gin_cu.cuEventQuery(r->event) == CUDA_ERROR_NOT_READY) {
                return; /* our own copy engine still reads the source */
            }
            r->copy_pending = 0;
            free(r->stage);
            r->stage = NULL;
            r->state = EEP_GIN_REQ_DONE;
            p->prog++;
            continue;
        }
        if (r->copy_pending) {
            q = eep_gin_cu.cuEventQuery(r->event);
            if (q == CUDA_ERROR_NOT_READY) {
                return;
            }
            r->copy_pending = 0;
            if (eep_gin_cuda_check(q, "cuEventQuery (put)", __FILE__, __LINE__) != 0) {
                r->state = EEP_GIN_REQ_FAILED;
                p->prog++;
                continue;
            }
        }
        if (self) {
            if (r->has_signal) {
                eep_gin_apply_signal(comm, &r->sig_hdr);
            }
        } else {
            while ((len = eep_gin_req_piece(r, &ptr)) > 0) {
                n = eep_gin_sock_send_some(p->sig_fd, ptr, len);
                if (n < 0) {
                    eep_gin_peer_lost(comm, peer, "send failed");
                    break;
                }
                if (n == 0) {
                    return; /* the socket is full: the rest on a later call */
                }
                r->sent += (size_t)n;
            }
            if (p->dead) {
                continue;
            }
            if (r->has_signal) {
                EEP_GIN_TRACEF("rank %d: signal to rank %d sent (%u.%u+%llu, +%llu)", comm->rank,
                               peer, r->sig_hdr.reg_index, r->sig_hdr.reg_gen,
                               (unsigned long long)r->sig_hdr.offset,
                               (unsigned long long)r->sig_hdr.arg);
            }
        }
        free(r->stage);
        r->stage = NULL;
        r->state = EEP_GIN_REQ_DONE;
        p->prog++;
    }
}

/* Finishes a received put: staged bytes go to the GPU before any later record applies. */
static void eep_gin_rx_finish(eep_gin_comm_t *comm, eep_gin_rx_t *rx)
{
    eep_gin_reg_t *reg;

    if (rx->stage != NULL) {
        reg = eep_gin_reg_find(comm, rx->hdr.reg_index, rx->hdr.reg_gen);
        if (reg != NULL && eep_gin_apply_stream(comm) == 0) {
            if (EEP_GIN_CU(cuMemcpyHtoDAsync((CUdeviceptr)(reg->base + rx->hdr.offset), rx->stage,
                                             rx->hdr.arg, comm->apply_stream)) == 0) {
                EEP_GIN_CU(cuStreamSynchronize(comm->apply_stream));
                EEP_GIN_TRACEF("rank %d: a received put of %llu bytes copied in", comm->rank,
                               (unsigned long long)rx->hdr.arg);
            }
        }
        free(rx->stage);
    }
    memset(rx, 0, sizeof(*rx));
}

/* Starts a received record: applies a signal, or finds where a put's payload goes. */
static int eep_gin_rx_start(eep_gin_comm_t *comm, int peer, eep_gin_rx_t *rx)
{
    eep_gin_reg_t *reg;

    if (rx->hdr.kind == EEP_GIN_WIRE_SIGNAL) {
        eep_gin_apply_signal(comm, &rx->hdr);
        memset(rx, 0, sizeof(*rx));
        return 0;
    }
    if (rx->hdr.kind != EEP_GIN_WIRE_PUT) {
        eep_gin_peer_lost(comm, peer, "a bad record on its socket");
        return -1;
    }
    reg = eep_gin_reg_find(comm, rx->hdr.reg_index, rx->hdr.reg_gen);
    if (reg == NULL || rx->hdr.offset + rx->hdr.arg > reg->size) {
        EEP_GIN_WARN("rank %d: a put from rank %d to registration %u.%u not live here: dropped",
                     comm->rank, peer, rx->hdr.reg_index, rx->hdr.reg_gen);
    } else if (reg->type == EEP_NCCL_PTR_HOST) {
        rx->dst = reg->base + rx->hdr.offset;
    } else {
        rx->stage    = malloc(rx->hdr.arg > 0 ? rx->hdr.arg : 1);
        rx->dst      = rx->stage;
        rx->dst_cuda = 1;
    }
    return 0;
}

/* Reads what the peer sent, within a budget; comm->lock held. */
static void eep_gin_recv_progress(eep_gin_comm_t *comm, int peer)
{
    eep_gin_peer_t *p      = &comm->peers[peer];
    eep_gin_rx_t   *rx     = &p->rx;
    size_t          budget = EEP_GIN_RX_BUDGET;
    char            sink[4096];
    ssize_t         n;

    while (!p->dead && budget > 0) {
        if (rx->hdr_got < sizeof(rx->hdr)) {
            n = eep_gin_sock_recv_some(p->sig_fd, (char *)&rx->hdr + rx->hdr_got,
                                       sizeof(rx->hdr) - rx->hdr_got);
            if (n < 0) {
                eep_gin_peer_lost(comm, peer, "its socket closed");
                return;
            }
            if (n == 0) {
                return;
            }
            rx->hdr_got += (size_t)n;
            budget -= budget > sizeof(rx->hdr) ? sizeof(rx->hdr) : budget;
            if (rx->hdr_got < sizeof(rx->hdr)) {
                continue;
            }
            if (eep_gin_rx_start(comm, peer, rx) != 0 || rx->hdr_got == 0) {
                continue; /* failed, or a signal (done) */
            }
        }
        while (rx->got < rx->hdr.arg) {
            size_t want = rx->hdr.arg - rx->got;
            char  *to   = rx->dst != NULL ? rx->dst + rx->got : sink;

            if (rx->dst == NULL && want > sizeof(sink)) {
                want = sizeof(sink);
            }
            n = eep_gin_sock_recv_some(p->sig_fd, to, want);
            if (n < 0) {
                eep_gin_peer_lost(comm, peer, "its socket closed");
                return;
            }
            if (n == 0) {
                return;
            }
            rx->got += (size_t)n;
            budget -= budget > (size_t)n ? (size_t)n : budget;
        }
        eep_gin_rx_finish(comm, rx);
    }
}

/* One sweep over the comm's peers; comm->lock held. */
static void eep_gin_progress_locked(eep_gin_comm_t *comm)
{
    struct pollfd pfds[64];
    int           idx[64];
    int           i, n = 0, start = 0;

    for (i = 0; i < comm->nranks; i++) {
        if (comm->peers[i].prog < comm->peers[i].tail) {
            eep_gin_send_progress(comm, i);
        }
    }
    /* poll the sig sockets in groups of 64, read only the ready ones */
    while (start < comm->nranks) {
        n = 0;
        for (i = start; i < comm->nranks && n < 64; i++) {
            if (i != comm->rank && !comm->peers[i].dead && comm->peers[i].sig_fd >= 0) {
                pfds[n]  = (struct pollfd){ .fd = comm->peers[i].sig_fd, .events = POLLIN };
                idx[n++] = i;
            }
        }
        start = i;
        if (n > 0 && poll(pfds, (nfds_t)n, 0) > 0) {
            for (i = 0; i < n; i++) {
                if (pfds[i].revents != 0) {
                    eep_gin_recv_progress(comm, idx[i]);
                }
            }
        }
    }
}

eep_nccl_result_t eep_gin_progress(void *coll_comm)
{
    eep_gin_comm_t *comm = coll_comm;

    if (comm == NULL || comm->magic != EEP_GIN_COMM_MAGIC) {
        return EEP_NCCL_INVALID_ARGUMENT;
    }
    pthread_mutex_lock(&comm->lock);
    eep_gin_progress_locked(comm);
    pthread_mutex_unlock(&comm->lock);
    return EEP_NCCL_SUCCESS;
}

eep_nccl_result_t eep_gin_test(void *coll_comm, void *request, int *done)
{
    eep_gin_comm_t   *comm = coll_comm;
    eep_gin_req_t    *r    = request;
    eep_gin_peer_t   *p;
    eep_nccl_result_t res = EEP_NCCL_SUCCESS;

    *done = 0;
    if (comm == NULL || comm->magic != EEP_GIN_COMM_MAGIC || r == NULL || r->comm != comm) {
        return EEP_NCCL_INVALID_ARGUMENT;
    }
    pthread_mutex_lock(&comm->lock);
    eep_gin_progress_locked(comm);
    p = &comm->peers[r->peer];
    if (r->state == EEP_GIN_REQ_DONE) {
        *done    = 1;
        r->state = EEP_GIN_REQ_FREE;
        while (p->head < p->prog && p->ring[p->head % EEP_GIN_RING].state == EEP_GIN_REQ_FREE) {
            p->head++;
        }
    } else if (r->state == EEP_GIN_REQ_FAILED) {
        /* A local CUDA failure.  NCCL 2.28.9's proxy ignores test's result: done lets its queue
         * drain so the GPU's flush returns; the source is consumed (nothing reads it again). */
        *done    = 1;
        r->state = EEP_GIN_REQ_FREE;
        while (p->head < p->prog && p->ring[p->head % EEP_GIN_RING].state == EEP_GIN_REQ_FREE) {
            p->head++;
        }
        res = EEP_NCCL_REMOTE_ERROR;
    }
    pthread_mutex_unlock(&comm->lock);
    return res;
}

void eep_gin_peer_drop_requests(eep_gin_comm_t *comm, eep_gin_peer_t *p)
{
    int i, cuda = eep_gin_cu.loaded && comm->cuctx != NULL;

    for (i = 0; i < EEP_GIN_RING; i++) {
        if (cuda && p->ring[i].event != NULL) {
            eep_gin_cu.cuEventDestroy(p->ring[i].event);
        }
        free(p->ring[i].stage);
    }
}
