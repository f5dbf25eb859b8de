/* gin/gin_mesh.c - a GIN communicator's life: listen, the collective connect that builds a full
 * mesh among the comm's ranks, and closeColl.  Each pair of ranks holds two sockets: "ctl" for the
 * collective registrations (only the thread calling regMrSym uses it) and "sig" for puts through
 * the socket and signal records (only the progress thread uses it), so the two threads NCCL runs
 * on one comm never read the same socket.  The higher rank connects (Unix connects complete in the
 * listener's backlog, so nobody waits on an accept), the lower accepts; every wait has a deadline.
 * Teardown never waits on a peer: it closes the sockets and drops the registrations, which
 * releases the mappings of peers' memory, dead or alive. */
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gin/gin_int.h"

typedef struct {
    int            fd;
    eep_gin_addr_t addr;
} eep_gin_listen_t;

typedef struct {
    uint32_t magic;
    int32_t  rank, channel, nranks;
} eep_gin_hello_t;

enum { EEP_GIN_CH_CTL = 0, EEP_GIN_CH_SIG = 1 };

eep_nccl_result_t eep_gin_listen(void *ctx, int dev, void *handle, void **listen_comm)
{
    eep_gin_listen_t *l = calloc(1, sizeof(*l));

    (void)ctx;
    (void)dev;
    if (l == NULL) {
        return EEP_NCCL_SYSTEM_ERROR;
    }
    if (eep_gin_sock_listen("gin", &l->addr, &l->fd) != 0) {
        free(l);
        return EEP_NCCL_SYSTEM_ERROR;
    }
    memset(handle, 0, EEP_NCCL_NET_HANDLE_MAXSIZE);
    memcpy(handle, &l->addr, sizeof(l->addr));
    *listen_comm = l;
    return EEP_NCCL_SUCCESS;
}

eep_nccl_result_t eep_gin_close_listen(void *listen_comm)
{
    eep_gin_listen_t *l = listen_comm;

    if (l != NULL) {
        close(l->fd);
        free(l);
    }
    return EEP_NCCL_SUCCESS;
}

static void eep_gin_sleep_ms(int ms)
{
    struct timespec ts = { .tv_sec = 0, .tv_nsec = (long)ms * 1000000 };

    nanosleep(&ts, NULL);
}

/* The higher rank's side: two connections to each lower rank, each opened with a hello. */
static int eep_gin_mesh_connect_down(eep_gin_comm_t *comm, void *handles[], int64_t deadline)
{
    eep_gin_addr_t  addr;
    eep_gin_hello_t hello = { .magic  = EEP_GIN_ADDR_MAGIC,
                              .rank   = comm->rank,
                              .nranks = comm->nranks };
    int             j, ch, fd, ret;

    for (j = 0; j < comm->rank; j++) {
        memcpy(&addr, handles[j], sizeof(addr));
        for (ch = 0; ch < 2; ch++) {
            while ((ret = eep_gin_sock_connect(&addr, &fd)) == 1) {
                if (eep_gin_now_ms() > deadline) {
                    EEP_GIN_WARN("connect to rank %d: backlog full until the deadline", j);
                    return -1;
                }
                eep_gin_sleep_ms(1);
            }
            if (ret < 0) {
                EEP_GIN_WARN("connect to rank %d failed", j);
                return -1;
            }
            hello.channel = ch;
            if (ch == EEP_GIN_CH_CTL) {
                comm->peers[j].ctl_fd = fd;
            } else {
                comm->peers[j].sig_fd = fd;
            }
            if (eep_gin_sock_send_all(fd, &hello, sizeof(hello), -1, deadline) != 0) {
                return -1;
            }
        }
    }
    return 0;
}

/* The lower rank's side: accept the two connections of every higher rank. */
static int eep_gin_mesh_accept_up(eep_gin_comm_t *comm, int lfd, int64_t deadline)
{
    int             want = 2 * (comm->nranks - 1 - comm->rank);
    eep_gin_hello_t hello;
    struct pollfd   pfd = { .fd = lfd, .events = POLLIN };
    int             fd, ret, *slot;

    while (want > 0) {
        ret = eep_gin_sock_accept(lfd, &fd);
        if (ret < 0) {
            return -1;
        }
        if (ret > 0) {
            if (eep_gin_now_ms() > deadline) {
                EEP_GIN_WARN("rank %d: %d connections of higher ranks missing at the deadline",
                             comm->rank, want);
                return -1;
            }
            poll(&pfd, 1, 100);
            continue;
        }
        if (eep_gin_sock_recv_all(fd, &hello, sizeof(hello), NULL, deadline) != 0 ||
            hello.magic != EEP_GIN_ADDR_MAGIC || hello.nranks != comm->nranks ||
            hello.rank <= comm->rank || hello.rank >= comm->nranks ||
            (hello.channel != EEP_GIN_CH_CTL && hello.channel != EEP_GIN_CH_SIG)) {
            EEP_GIN_WARN("rank %d: a bad hello on the GIN listener", comm->rank);
            close(fd);
            return -1;
        }
        slot = hello.channel == EEP_GIN_CH_CTL ? &comm->peers[hello.rank].ctl_fd
                                               : &comm->peers[hello.rank].sig_fd;
        if (*slot >= 0) {
            EEP_GIN_WARN("rank %d: rank %d connected twice", comm->rank, hello.rank);
            close(fd);
            return -1;
        }
        *slot = fd;
        want--;
    }
    return 0;
}

eep_nccl_result_t eep_gin_connect(void *ctx, void *handles[], int nranks, int rank,
                                  void *listen_comm, void **coll_comm)
{
    eep_gin_listen_t *l        = listen_comm;
    int64_t           deadline = eep_gin_now_ms() + eep_gin_timeout_ms();
    eep_gin_comm_t   *comm;
    int               i;

    (void)ctx; /* NULL on every comm but the first: all state is in the listen comm */
    *coll_comm = NULL;
    if (l == NULL || nranks < 1 || rank < 0 || rank >= nranks) {
        return EEP_NCCL_INVALID_ARGUMENT;
    }
    comm = calloc(1, sizeof(*comm));
    if (comm == NULL) {
        return EEP_NCCL_SYSTEM_ERROR;
    }
    comm->magic       = EEP_GIN_COMM_MAGIC;
    comm->nranks      = nranks;
    comm->rank        = rank;
    comm->broken_peer = -1;
    comm->next_gen    = 1;
    pthread_mutex_init(&comm->lock, NULL);
    comm->peers = calloc((size_t)nranks, sizeof(*comm->peers));
    if (comm->peers == NULL) {
        goto err;
    }
    for (i = 0; i < nranks; i++) {
        comm->peers[i].ctl_fd = -1;
        comm->peers[i].sig_fd = -1;
        comm->peers[i].ring   = calloc(EEP_GIN_RING, sizeof(eep_gin_req_t));
        if (comm->peers[i].ring == NULL) {
            goto err;
        }
    }
    if (eep_gin_mesh_connect_down(comm, handles, deadline) != 0 ||
        eep_gin_mesh_accept_up(comm, l->fd, deadline) != 0) {
        goto err;
    }
    /* The caller's thread has the comm's device current; the progress thread will not. */
    if (eep_gin_cu.loaded && eep_gin_cu.cuCtxGetCurrent(&comm->cuctx) == CUDA_SUCCESS &&
        comm->cuctx != NULL) {
        EEP_GIN_CU(cuCtxGetDevice(&comm->cudev));
        comm->workctx = eep_gin_cuda_work_context(comm->cuctx, comm->cudev);
    }
    EEP_GIN_INFO("rank %d of %d: GIN mesh up (CUDA context %p, the plugin's work in %p)", rank,
                 nranks, (void *)comm->cuctx, (void *)comm->workctx);
    *coll_comm = comm;
    return EEP_NCCL_SUCCESS;

err:
    eep_gin_close_coll(comm);
    return EEP_NCCL_SYSTEM_ERROR;
}

int eep_gin_comm_bind_cuda(eep_gin_comm_t *comm)
{
    CUcontext cur = NULL;

    if (!eep_gin_cu.loaded || comm->workctx == NULL) {
        return -1;
    }
    if (eep_gin_cu.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == comm->workctx) {
        return 0; /* every entry point pushes it (gin_plugin.c) */
    }
    return EEP_GIN_CU(cuCtxSetCurrent(comm->workctx));
}

static uint64_t eep_gin_lost_total; /* (comm, peer) losses seen by this process */

void eep_gin_peer_lost(eep_gin_comm_t *comm, int peer, const char *why)
{
    if (comm->peers[peer].dead) {
        return;
    }
    comm->peers[peer].dead = 1;
    if (comm->broken_peer < 0) {
        comm->broken_peer = peer;
    }
    __atomic_fetch_add(&eep_gin_lost_total, 1, __ATOMIC_RELEASE);
    EEP_GIN_WARN("rank %d: peer rank %d lost (%s); GIN requests to it are dropped", comm->rank,
                 peer, why);
}

/* The plugin's own death report (NCCL has none that leaves the comm shrinkable, gin/README.md):
 * how many (comm, peer) losses this process has seen.  Found with dlopen(RTLD_NOLOAD) + dlsym. */
__attribute__((visibility("default"))) uint64_t eep_gin_peers_lost(void)
{
    return __atomic_load_n(&eep_gin_lost_total, __ATOMIC_ACQUIRE);
}

eep_nccl_result_t eep_gin_close_coll(void *coll_comm)
{
    eep_gin_comm_t *comm = coll_comm;
    int             cuda, i, rank, leftover = 0, exports, imports;
    size_t          import_bytes;
    uint32_t        r;

    if (comm == NULL) {
        return EEP_NCCL_SUCCESS;
    }
    pthread_mutex_lock(&comm->lock);
    cuda = eep_gin_comm_bind_cuda(comm) == 0;
    for (i = 0; comm->peers != NULL && i < comm->nranks; i++) {
        eep_gin_peer_t *p = &comm->peers[i];

        if (p->ring != NULL) {
            eep_gin_peer_drop_requests(comm, p);
            free(p->ring);
        }
        if (p->ctl_fd >= 0) {
            close(p->ctl_fd);
        }
        if (p->sig_fd >= 0) {
            close(p->sig_fd);
        }
        if (cuda && p->stream != NULL) {
            /* copies into peers' memory finish on their own (the mapping keeps it alive) */
            eep_gin_cu.cuStreamSynchronize(p->stream);
            eep_gin_cu.cuStreamDestroy(p->stream);
        }
        free(p->rx.stage);
    }
    for (r = 0; r < comm->nregs; r++) {
        if (comm->regs[r] != NULL) {
            eep_gin_reg_free(comm->regs[r]);
            leftover++;
        }
    }
    if (cuda && comm->apply_stream != NULL) {
        eep_gin_cu.cuStreamSynchronize(comm->apply_stream);
        eep_gin_cu.cuStreamDestroy(comm->apply_stream);
    }
    rank = comm->rank;
    pthread_mutex_unlock(&comm->lock);
    pthread_mutex_destroy(&comm->lock);
    free(comm->regs);
    free(comm->peers);
    comm->magic = 0;
    eep_gin_share_census(&exports, &imports, &import_bytes);
    EEP_GIN_INFO("rank %d: comm closed, %d registrations freed at close (not deregistered); this "
                 "process now exports %d allocations and maps %d of peers (%zu MiB)",
                 rank, leftover, exports, imports, import_bytes >> 20);
    free(comm);
    return EEP_NCCL_SUCCESS;
}
