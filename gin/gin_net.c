/* gin/gin_net.c - the host network NCCL needs beside GIN (ncclNet_v11): one device, host memory
 * only, one abstract Unix stream socket per connection.  A message is an 8-byte length and its
 * bytes; a receive takes a message of at most the posted size and reports its real size (a larger
 * message is an error, as in NCCL's socket network).  Tags are ignored (one sender per
 * connection, FIFO).  Requests of a connection form a ring of NCCL_NET_MAX_REQUESTS and complete
 * in order: a test moves the oldest incomplete ones forward as far as the socket allows, never
 * blocking.  connect and accept never block: they return a NULL comm and are called again. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gin/gin_int.h"

#define EEP_GIN_NET_RING EEP_NCCL_NET_MAX_REQUESTS

typedef struct eep_gin_net_comm eep_gin_net_comm_t;

typedef struct {
    eep_gin_net_comm_t *comm;
    int                 state; /* EEP_GIN_REQ_* */
    char               *data;
    uint64_t            size; /* send: bytes; recv: the posted size, then the message's */
    uint64_t            hdr;  /* the length on the wire */
    size_t              hdr_done, done;
} eep_gin_net_req_t;

struct eep_gin_net_comm {
    int               fd;
    int               is_send;
    int               failed;
    uint64_t          head, prog, tail;
    eep_gin_net_req_t ring[EEP_GIN_NET_RING];
};

typedef struct {
    int            fd;
    eep_gin_addr_t addr;
} eep_gin_net_listen_t;

static eep_nccl_result_t eep_gin_net_init(void **ctx, uint64_t comm_id,
                                          eep_nccl_net_comm_config_t *config, eep_nccl_logger_t log,
                                          eep_nccl_profiler_cb_t prof)
{
    (void)comm_id;
    (void)config;
    (void)prof;
    eep_gin_log_set(log);
    if (ctx != NULL) {
        *ctx = NULL; /* nothing per communicator */
    }
    return EEP_NCCL_SUCCESS;
}

static eep_nccl_result_t eep_gin_net_devices(int *ndev)
{
    *ndev = 1;
    return EEP_NCCL_SUCCESS;
}

static eep_nccl_result_t eep_gin_net_get_properties(int dev, eep_nccl_net_props_t *props)
{
    if (eep_gin_props_common(dev, props) != EEP_NCCL_SUCCESS) {
        return EEP_NCCL_INVALID_ARGUMENT;
    }
    props->name            = "eep_gin_net";
    props->guid            = 0x6565702d67696e00ull;
    props->ptr_support     = EEP_NCCL_PTR_HOST;
    props->max_recvs       = 1;
    props->net_device_type = EEP_NCCL_NET_DEVICE_HOST;
    return EEP_NCCL_SUCCESS;
}

static eep_nccl_result_t eep_gin_net_listen(void *ctx, int dev, void *handle, void **listen_comm)
{
    eep_gin_net_listen_t *l = calloc(1, sizeof(*l));

    (void)ctx;
    (void)dev;
    if (l == NULL) {
        return EEP_NCCL_SYSTEM_ERROR;
    }
    if (eep_gin_sock_listen("net", &l->addr, &l->fd) != 0) {
        free(l);
        return EEP_NCCL_SYSTEM_ERROR;
    }
    memset(handle, 0, EEP_NCCL_NET_HANDLE_MAXSIZE);
    memcpy(handle, &l->addr, sizeof(l->addr));
    *listen_comm = l;
    return EEP_NCCL_SUCCESS;
}

static eep_gin_net_comm_t *eep_gin_net_comm_new(int fd, int is_send)
{
    eep_gin_net_comm_t *c = calloc(1, sizeof(*c));

    if (c == NULL) {
        close(fd);
        return NULL;
    }
    c->fd      = fd;
    c->is_send = is_send;
    return c;
}

static eep_nccl_result_t eep_gin_net_connect(void *ctx, int dev, void *handle, void **send_comm,
                                             eep_nccl_net_dev_handle_t **send_dev_comm)
{
    eep_gin_addr_t addr;
    int            fd = -1, ret;

    (void)ctx;
    (void)dev;
    (void)send_dev_comm;
    *send_comm = NULL;
    memcpy(&addr, handle, sizeof(addr));
    ret = eep_gin_sock_connect(&addr, &fd);
    if (ret < 0) {
        return EEP_NCCL_SYSTEM_ERROR;
    }
    if (ret > 0) {
        return EEP_NCCL_SUCCESS; /* NCCL calls again */
    }
    *send_comm = eep_gin_net_comm_new(fd, 1);
    return *send_comm != NULL ? EEP_NCCL_SUCCESS : EEP_NCCL_SYSTEM_ERROR;
}

static eep_nccl_result_t eep_gin_net_accept(void *listen_comm, void **recv_comm,
                                            eep_nccl_net_dev_handle_t **recv_dev_comm)
{
    eep_gin_net_listen_t *l  = listen_comm;
    int                   fd = -1, ret;

    (void)recv_dev_comm;
    *recv_comm = NULL;
    ret        = eep_gin_sock_accept(l->fd, &fd);
    if (ret < 0) {
        return EEP_NCCL_SYSTEM_ERROR;
    }
    if (ret > 0) {
        return EEP_NCCL_SUCCESS;
    }
    *recv_comm = eep_gin_net_comm_new(fd, 0);
    return *recv_comm != NULL ? EEP_NCCL_SUCCESS : EEP_NCCL_SYSTEM_ERROR;
}

static eep_nccl_result_t eep_gin_net_reg_mr(void *comm, void *data, size_t size, int type,
                                            void **mhandle)
{
    (void)data;
    (void)size;
    if (type != EEP_NCCL_PTR_HOST) {
        EEP_GIN_WARN("net regMr: only host memory (type %d)", type);
        return EEP_NCCL_INTERNAL_ERROR;
    }
    *mhandle = comm; /* nothing to register for a socket; any non-NULL handle */
    return EEP_NCCL_SUCCESS;
}

static eep_nccl_result_t eep_gin_net_reg_mr_dmabuf(void *comm, void *data, size_t size, int type,
                                                   uint64_t offset, int fd, void **mhandle)
{
    (void)offset;
    (void)fd;
    return eep_gin_net_reg_mr(comm, data, size, type, mhandle);
}

static eep_nccl_result_t eep_gin_net_dereg_mr(void *comm, void *mhandle)
{
    (void)comm;
    (void)mhandle;
    return EEP_NCCL_SUCCESS;
}

static eep_nccl_result_t eep_gin_net_post(eep_gin_net_comm_t *c, void *data, uint64_t size,
                                          void **request)
{
    eep_gin_net_req_t *r;

    *request = NULL;
    if (c->failed) {
        return EEP_NCCL_REMOTE_ERROR;
    }
    if (c->tail - c->head >= EEP_GIN_NET_RING) {
        return EEP_NCCL_SUCCESS; /* full: NCCL posts again later */
    }
    r = &c->ring[c->tail % EEP_GIN_NET_RING];
    memset(r, 0, sizeof(*r));
    r->comm  = c;
    r->state = EEP_GIN_REQ_ISSUED;
    r->data  = data;
    r->size  = size;
    r->hdr   = size;
    c->tail++;
    *request = r;
    return EEP_NCCL_SUCCESS;
}

static eep_nccl_result_t eep_gin_net_isend(void *send_comm, void *data, size_t size, int tag,
                                           void *mhandle, void *phandle, void **request)
{
    (void)tag;
    (void)mhandle;
    (void)phandle;
    return eep_gin_net_post(send_comm, data, size, request);
}

static eep_nccl_result_t eep_gin_net_irecv(void *recv_comm, int n, void **data, size_t *sizes,
                                           int *tags, void **mhandles, void **phandles,
                                           void **request)
{
    (void)tags;
    (void)mhandles;
    (void)phandles;
    if (n != 1) {
        EEP_GIN_WARN("net irecv: %d receives grouped, at most 1", n);
        return EEP_NCCL_INTERNAL_ERROR;
    }
    return eep_gin_net_post(recv_comm, data[0], sizes[0], request);
}

static eep_nccl_result_t eep_gin_net_iflush(void *recv_comm, int n, void **data, int *sizes,
                                            void **mhandles, void **request)
{
    (void)recv_comm;
    (void)n;
    (void)data;
    (void)sizes;
    (void)mhandles;
    *request = NULL; /* host memory only: nothing to flush */
    return EEP_NCCL_INTERNAL_ERROR;
}

/* Moves one request as far as the socket allows: 1 complete, 0 not yet, -1 failed. */
static int eep_gin_net_step(eep_gin_net_comm_t *c, eep_gin_net_req_t *r)
{
    ssize_t n;

    while (r->hdr_done < sizeof(r->hdr)) {
        n = c->is_send ? eep_gin_sock_send_some(c->fd, (char *)&r->hdr + r->hdr_done,
                                                sizeof(r->hdr) - r->hdr_done)
                       : eep_gin_sock_recv_some(c->fd, (char *)&r->hdr + r->hdr_done,
                                                sizeof(r->hdr) - r->hdr_done);
        if (n < 0) {
            return -1;
        }
        if (n == 0) {
            return 0;
        }
        r->hdr_done += (size_t)n;
        if (r->hdr_done == sizeof(r->hdr) && !c->is_send) {
            if (r->hdr > r->size) {
                EEP_GIN_WARN("net: a message of %llu bytes for a receive of %llu",
                             (unsigned long long)r->hdr, (unsigned long long)r->size);
                return -1;
            }
            r->size = r->hdr;
        }
    }
    while (r->done < r->size) {
        n = c->is_send ? eep_gin_sock_send_some(c->fd, r->data + r->done, r->size - r->done)
                       : eep_gin_sock_recv_some(c->fd, r->data + r->done, r->size - r->done);
        if (n < 0) {
            return -1;
        }
        if (n == 0) {
            return 0;
        }
        r->done += (size_t)n;
    }
    return 1;
}

static eep_nccl_result_t eep_gin_net_test(void *request, int *done, int *sizes)
{
    eep_gin_net_req_t  *r = request;
    eep_gin_net_comm_t *c = r->comm;
    int                 ret;

    *done = 0;
    while (!c->failed && c->prog < c->tail) {
        ret = eep_gin_net_step(c, &c->ring[c->prog % EEP_GIN_NET_RING]);
        if (ret < 0) {
            EEP_GIN_WARN("net: the connection to the peer is lost (%s)",
                         c->is_send ? "send" : "receive");
            c->failed = 1;
            break;
        }
        if (ret == 0) {
            break;
        }
        c->ring[c->prog % EEP_GIN_NET_RING].state = EEP_GIN_REQ_DONE;
        c->prog++;
    }
    if (r->state != EEP_GIN_REQ_DONE) {
        return c->failed ? EEP_NCCL_REMOTE_ERROR : EEP_NCCL_SUCCESS;
    }
    *done = 1;
    if (sizes != NULL) {
        *sizes = (int)r->size;
    }
    r->state = EEP_GIN_REQ_FREE;
    while (c->head < c->prog && c->ring[c->head % EEP_GIN_NET_RING].state == EEP_GIN_REQ_FREE) {
        c->head++;
    }
    return EEP_NCCL_SUCCESS;
}

static eep_nccl_result_t eep_gin_net_close(void *comm)
{
    eep_gin_net_comm_t *c = comm;

    if (c != NULL) {
        close(c->fd);
        free(c);
    }
    return EEP_NCCL_SUCCESS;
}

static eep_nccl_result_t eep_gin_net_close_listen(void *listen_comm)
{
    eep_gin_net_listen_t *l = listen_comm;

    if (l != NULL) {
        close(l->fd);
        free(l);
    }
    return EEP_NCCL_SUCCESS;
}

static eep_nccl_result_t eep_gin_net_finalize(void *ctx)
{
    (void)ctx;
    return EEP_NCCL_SUCCESS;
}

/* The exported symbol NCCL looks up (its only version of the network table we provide). */
__attribute__((visibility("default"))) const eep_nccl_net_v11_t ncclNetPlugin_v11 = {
    .name           = "eep_gin",
    .init           = eep_gin_net_init,
    .devices        = eep_gin_net_devices,
    .get_properties = eep_gin_net_get_properties,
    .listen         = eep_gin_net_listen,
    .connect        = eep_gin_net_connect,
    .accept         = eep_gin_net_accept,
    .reg_mr         = eep_gin_net_reg_mr,
    .reg_mr_dmabuf  = eep_gin_net_reg_mr_dmabuf,
    .dereg_mr       = eep_gin_net_dereg_mr,
    .isend          = eep_gin_net_isend,
    .irecv          = eep_gin_net_irecv,
    .iflush         = eep_gin_net_iflush,
    .test           = eep_gin_net_test,
    .close_send     = eep_gin_net_close,
    .close_recv     = eep_gin_net_close,
    .close_listen   = eep_gin_net_close_listen,
    .get_device_mr  = NULL,
    .irecv_consumed = NULL,
    .make_vdevice   = NULL,
    .finalize       = eep_gin_net_finalize,
    .set_net_attr   = NULL,
};
