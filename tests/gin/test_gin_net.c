/* tests/gin/test_gin_net.c - the plugin's host network (ncclNetPlugin_v11) between forked
 * processes: both tables' properties, connect/accept that return NULL until ready, messages of many sizes both ways at
 * once (a receive posted larger than the message reports the real size), a ring of four ranks,
 * and a peer SIGKILLed with a receive posted (the survivor's test errors within a bound). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/gin/gin_harness.h"

#define NET_MAX_MSG (256 * 1024)
#define NET_MSGS    300
#define NET_WINDOW  8

typedef struct {
    void *send_comm, *recv_comm;
} net_pair_t;

/* A send comm to rank `to` and a receive comm from rank `from`, through board slot `slot`. */
static int net_connect(gt_t *t, int slot, int to, int from, net_pair_t *p)
{
    char    handle[EEP_NCCL_NET_HANDLE_MAXSIZE];
    void   *all[GT_MAX_RANKS], *lc = NULL;
    void   *ctx = NULL;
    int64_t deadline;

    (void)from; /* whoever connects to our listener is `from` */
    memset(p, 0, sizeof(*p));
    GT_CHECK(t->net->init(&ctx, 1, NULL, NULL, NULL) == EEP_NCCL_SUCCESS, "init");
    GT_CHECK(t->net->listen(ctx, 0, handle, &lc) == EEP_NCCL_SUCCESS, "listen");
    GT_CHECK(gt_exchange(t, slot, handle, all) == 0, "exchange");
    deadline = gt_now_ms() + 10000;
    while (p->send_comm == NULL || p->recv_comm == NULL) {
        if (p->send_comm == NULL) {
            GT_CHECK(t->net->connect(ctx, 0, all[to], &p->send_comm, NULL) == EEP_NCCL_SUCCESS,
                     "connect");
        }
        if (p->recv_comm == NULL) {
            GT_CHECK(t->net->accept(lc, &p->recv_comm, NULL) == EEP_NCCL_SUCCESS, "accept");
        }
        GT_CHECK(gt_now_ms() < deadline, "connect/accept within 10 s");
    }
    GT_CHECK(gt_barrier(t, slot, t->nranks, 10000) == 0, "barrier");
    t->net->close_listen(lc);
    return 0;
}

static size_t net_msg_size(int from, int i)
{
    uint64_t s = (uint64_t)(from + 1) * 0x9e3779b97f4a7c15ull + (uint64_t)i * 7919 + 1;

    gt_rand(&s);
    gt_rand(&s);
    switch (i % 4) {
    case 0:
        return gt_rand(&s) % 64; /* 0 included */
    case 1:
        return gt_rand(&s) % 4096;
    default:
        return gt_rand(&s) % NET_MAX_MSG + 1;
    }
}

static unsigned char net_byte(int from, int i, size_t k)
{
    return (unsigned char)(k * 31 + (size_t)i * 7 + (size_t)from * 101 + 3);
}

/* Streams NET_MSGS messages to `to` and receives as many from `from`, both at once. */
static int net_stream(gt_t *t, net_pair_t *p, int to, int from)
{
    char   *sbuf[NET_WINDOW], *rbuf[NET_WINDOW];
    void   *sreq[NET_WINDOW] = { 0 }, *rreq[NET_WINDOW] = { 0 }, *mh;
    int     sent = 0, rcvd = 0, posted_s = 0, posted_r = 0, i, done, size;
    int64_t deadline = gt_now_ms() + 60000;

    for (i = 0; i < NET_WINDOW; i++) {
        sbuf[i] = malloc(NET_MAX_MSG);
        rbuf[i] = malloc(NET_MAX_MSG);
        GT_CHECK(sbuf[i] != NULL && rbuf[i] != NULL, "malloc");
    }
    GT_CHECK(t->net->reg_mr(p->send_comm, sbuf[0], NET_MAX_MSG, EEP_NCCL_PTR_HOST, &mh) ==
                 EEP_NCCL_SUCCESS,
             "regMr");
    GT_CHECK(t->net->dereg_mr(p->send_comm, mh) == EEP_NCCL_SUCCESS, "deregMr");
    while (sent < NET_MSGS || rcvd < NET_MSGS) {
        GT_CHECK(gt_now_ms() < deadline, "stream within 60 s (sent %d, received %d)", sent, rcvd);
        if (posted_s < NET_MSGS && posted_s - sent < NET_WINDOW) {
            int    w = posted_s % NET_WINDOW;
            size_t n = net_msg_size(t->rank, posted_s), k;

            for (k = 0; k < n; k++) {
                sbuf[w][k] = (char)net_byte(t->rank, posted_s, k);
            }
            GT_CHECK(t->net->isend(p->send_comm, sbuf[w], n, 0, NULL, NULL, &sreq[w]) ==
                         EEP_NCCL_SUCCESS,
                     "isend");
            if (sreq[w] != NULL) {
                posted_s++;
            }
        }
        if (posted_r < NET_MSGS && posted_r - rcvd < NET_WINDOW) {
            int    w    = posted_r % NET_WINDOW;
            void  *data = rbuf[w];
            size_t n    = NET_MAX_MSG; /* always larger than the message */
            int    tag  = 0;

            GT_CHECK(t->net->irecv(p->recv_comm, 1, &data, &n, &tag, NULL, NULL, &rreq[w]) ==
                         EEP_NCCL_SUCCESS,
                     "irecv");
            if (rreq[w] != NULL) {
                posted_r++;
            }
        }
        if (sent < posted_s) {
            GT_CHECK(t->net->test(sreq[sent % NET_WINDOW], &done, &size) == EEP_NCCL_SUCCESS,
                     "test send");
            if (done) {
                GT_CHECK((size_t)size == net_msg_size(t->rank, sent), "send size");
                sent++;
            }
        }
        if (rcvd < posted_r) {
            GT_CHECK(t->net->test(rreq[rcvd % NET_WINDOW], &done, &size) == EEP_NCCL_SUCCESS,
                     "test recv");
            if (done) {
                size_t want = net_msg_size(from, rcvd), k;
                char  *b    = rbuf[rcvd % NET_WINDOW];

                GT_CHECK((size_t)size == want, "message %d: size %d, sent %zu", rcvd, size, want);
                for (k = 0; k < want; k++) {
                    GT_CHECK((unsigned char)b[k] == net_byte(from, rcvd, k), "message %d byte %zu",
                             rcvd, k);
                }
                rcvd++;
            }
        }
    }
    for (i = 0; i < NET_WINDOW; i++) {
        free(sbuf[i]);
        free(rbuf[i]);
    }
    (void)to;
    return 0;
}

/* Two ranks, both directions at once. */
static int case_net_pair(gt_t *t)
{
    net_pair_t p;
    int        peer = 1 - t->rank;

    if (net_connect(t, 0, peer, peer, &p) != 0 || net_stream(t, &p, peer, peer) != 0) {
        return 1;
    }
    GT_CHECK(gt_barrier(t, 1, t->nranks, 20000) == 0, "barrier");
    t->net->close_send(p.send_comm);
    t->net->close_recv(p.recv_comm);
    return 0;
}

/* Four ranks in a ring: send to the next, receive from the previous. */
static int case_net_ring(gt_t *t)
{
    net_pair_t p;
    int        to = (t->rank + 1) % t->nranks, from = (t->rank + t->nranks - 1) % t->nranks;

    if (net_connect(t, 0, to, from, &p) != 0 || net_stream(t, &p, to, from) != 0) {
        return 1;
    }
    GT_CHECK(gt_barrier(t, 1, t->nranks, 20000) == 0, "barrier");
    t->net->close_send(p.send_comm);
    t->net->close_recv(p.recv_comm);
    return 0;
}

/* Rank 1 dies with messages in flight; rank 0's receive errors within 5 s, close returns. */
static int case_net_peer_killed(gt_t *t)
{
    net_pair_t        p;
    char             *buf = malloc(NET_MAX_MSG);
    void             *req = NULL, *data = buf;
    size_t            n   = NET_MAX_MSG;
    int               tag = 0, done = 0, size, i;
    int64_t           start, deadline;
    eep_nccl_result_t res = EEP_NCCL_SUCCESS;

    GT_CHECK(buf != NULL, "malloc");
    if (net_connect(t, 0, 1 - t->rank, 1 - t->rank, &p) != 0) {
        return 1;
    }
    if (t->rank == 1) {
        memset(buf, 1, NET_MAX_MSG);
        for (i = 0; i < 4; i++) { /* a few messages, the last one cut by the kill */
            GT_CHECK(t->net->isend(p.send_comm, buf, NET_MAX_MSG, 0, NULL, NULL, &req) ==
                         EEP_NCCL_SUCCESS,
                     "isend");
            t->net->test(req, &done, &size);
        }
        raise(SIGKILL);
    }
    start    = gt_now_ms();
    deadline = start + 5000;
    while (res == EEP_NCCL_SUCCESS && gt_now_ms() < deadline) {
        if (req == NULL) {
            GT_CHECK(t->net->irecv(p.recv_comm, 1, &data, &n, &tag, NULL, NULL, &req) ==
                         EEP_NCCL_SUCCESS,
                     "irecv");
        }
        if (req != NULL) {
            res = t->net->test(req, &done, &size);
            if (res == EEP_NCCL_SUCCESS && done) {
                req = NULL;
            }
        }
    }
    GT_CHECK(res != EEP_NCCL_SUCCESS, "test errors after the peer died");
    start = gt_now_ms();
    t->net->close_send(p.send_comm);
    t->net->close_recv(p.recv_comm);
    GT_CHECK(gt_now_ms() - start < 1000, "close returns at once");
    free(buf);
    return 0;
}

/* What NCCL reads to pick a transport: the host net a CPU device with host memory only, the GIN
 * table a proxy device taking host and CUDA memory, a power-of-two receive count (NCCL's queue
 * size); one device, number 0, in both; any other is refused. */
static int case_properties(gt_t *t)
{
    eep_nccl_net_props_t net, gin;
    int                  n = 0;

    GT_CHECK(t->net->devices(&n) == EEP_NCCL_SUCCESS && n == 1, "net: one device (%d)", n);
    GT_CHECK(t->gin->devices(&n) == EEP_NCCL_SUCCESS && n == 1, "gin: one device (%d)", n);
    GT_CHECK(t->net->get_properties(0, &net) == EEP_NCCL_SUCCESS, "net: properties");
    GT_CHECK(t->gin->get_properties(0, &gin) == EEP_NCCL_SUCCESS, "gin: properties");
    GT_CHECK(t->net->get_properties(1, &net) == EEP_NCCL_INVALID_ARGUMENT, "net: device 1 refused");
    GT_CHECK(t->gin->get_properties(-1, &gin) == EEP_NCCL_INVALID_ARGUMENT,
             "gin: device -1 refused");
    t->net->get_properties(0, &net);
    t->gin->get_properties(0, &gin);
    GT_CHECK(strcmp(net.name, "eep_gin_net") == 0 && strcmp(gin.name, "eep_gin") == 0, "names");
    GT_CHECK(net.guid != gin.guid, "distinct guids");
    GT_CHECK(net.net_device_type == EEP_NCCL_NET_DEVICE_HOST, "net: a host device");
    GT_CHECK(gin.net_device_type == EEP_NCCL_NET_DEVICE_GIN_PROXY, "gin: a proxy GIN device");
    GT_CHECK(net.ptr_support == EEP_NCCL_PTR_HOST, "net: host memory only");
    GT_CHECK(gin.ptr_support == (EEP_NCCL_PTR_HOST | EEP_NCCL_PTR_CUDA), "gin: host and CUDA");
    GT_CHECK(net.max_recvs == 1, "net: one receive at a time (%d)", net.max_recvs);
    GT_CHECK(gin.max_recvs > 0 && (gin.max_recvs & (gin.max_recvs - 1)) == 0,
             "gin: a power-of-two receive count (%d)", gin.max_recvs);
    GT_CHECK(net.pci_path == NULL && gin.pci_path == NULL, "attached to the CPU");
    GT_CHECK(net.vprops.ndevs == 1 && net.vprops.devs[0] == 0 && gin.vprops.ndevs == 1 &&
                 gin.vprops.devs[0] == 0,
             "one virtual device, number 0");
    GT_CHECK(net.max_p2p_bytes == EEP_NCCL_MAX_NET_SIZE_BYTES &&
                 gin.max_coll_bytes == EEP_NCCL_MAX_NET_SIZE_BYTES && net.speed_mbps > 0 &&
                 gin.max_comms > 0,
             "NCCL's size limits, a speed, comms");
    return 0;
}

int main(void)
{
    static const gt_case_t cases[] = {
        { "properties", 1, case_properties, 0, 30 },
        { "net_pair_both_directions", 2, case_net_pair, 0, 90 },
        { "net_ring_four_ranks", 4, case_net_ring, 0, 90 },
        { "net_peer_killed", 2, case_net_peer_killed, 1u << 1, 30 },
    };

    return gt_main(cases, (int)(sizeof(cases) / sizeof(cases[0])));
}
