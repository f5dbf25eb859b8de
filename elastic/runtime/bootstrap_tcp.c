/*
 * bootstrap_tcp.c - bootstrap backend: a TCP rendezvous (star) on rank 0.
 *
 * Rank 0 listens on HOST:PORT and accepts one connection from every other rank, which says hello
 * with {magic, rank, nranks}.  An all-gather is one message up (each rank's bytes, tagged with the
 * round and length) and one down (everything, in rank order).  Every socket operation waits with
 * poll() against the exchange's deadline, so a missing or dead rank is a timeout, never a hang.
 */
#include "elastic/runtime/bootstrap.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/log.h"

#define EEP_BOOTSTRAP_TCP_MAGIC 0x45455042u /* "EEPB" */

typedef struct {
    uint32_t magic;
    uint32_t rank;
    uint32_t nranks;
    uint32_t round;
    uint64_t len;
} eep_bootstrap_tcp_hdr_t;

typedef struct {
    int  listen_fd; /* rank 0 only */
    int *fds;       /* rank 0: one per rank (fds[0] unused); others: fds[0] is rank 0 */
} eep_bootstrap_tcp_t;

static int eep_bootstrap_tcp_wait(int fd, short events, double deadline)
{
    struct pollfd pfd = { .fd = fd, .events = events };
    int           ret;

    for (;;) {
        double left = deadline - eep_clock_ms();

        if (left <= 0) {
            return 0;
        }
        ret = poll(&pfd, 1, left > 1000 ? 1000 : (int)left + 1);
        if (ret > 0) {
            return 1;
        }
        if (ret < 0 && errno != EINTR) {
            return -1;
        }
    }
}

static eep_status_t eep_bootstrap_tcp_send(int fd, const void *buf, size_t len, double deadline,
                                           int peer)
{
    size_t done = 0;

    while (done < len) {
        ssize_t n;
        int     ret = eep_bootstrap_tcp_wait(fd, POLLOUT, deadline);

        if (ret <= 0) {
            eep_error(EEP_SUBSYS_BOOTSTRAP, "tcp bootstrap: %s sending to rank %d",
                      ret == 0 ? "timed out" : "poll failed", peer);
            return ret == 0 ? EEP_ERR_TIMEOUT : EEP_ERR_IO;
        }
        n = send(fd, (const char *)buf + done, len - done, MSG_NOSIGNAL);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
            continue;
        }
        if (n <= 0) {
            eep_error(EEP_SUBSYS_BOOTSTRAP, "tcp bootstrap: send to rank %d failed: %m", peer);
            return EEP_ERR_IO;
        }
        done += (size_t)n;
    }
    return EEP_OK;
}

static eep_status_t eep_bootstrap_tcp_recv(int fd, void *buf, size_t len, double deadline, int peer)
{
    size_t done = 0;

    while (done < len) {
        ssize_t n;
        int     ret = eep_bootstrap_tcp_wait(fd, POLLIN, deadline);

        if (ret <= 0) {
            eep_error(EEP_SUBSYS_BOOTSTRAP, "tcp bootstrap: %s waiting for rank %d",
                      ret == 0 ? "timed out" : "poll failed", peer);
            return ret == 0 ? EEP_ERR_TIMEOUT : EEP_ERR_IO;
        }
        n = recv(fd, (char *)buf + done, len - done, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
            continue;
        }
        if (n <= 0) {
            eep_error(EEP_SUBSYS_BOOTSTRAP, "tcp bootstrap: rank %d %s", peer,
                      n == 0 ? "closed its connection" : "recv failed");
            return EEP_ERR_PEER_LOST;
        }
        done += (size_t)n;
    }
    return EEP_OK;
}

static eep_status_t eep_bootstrap_tcp_allgather(eep_bootstrap_t *bs, const void *mine, void *all,
                                                size_t len)
{
    eep_bootstrap_tcp_t    *t   = bs->impl;
    eep_bootstrap_tcp_hdr_t hdr = { EEP_BOOTSTRAP_TCP_MAGIC, (uint32_t)bs->rank,
                                    (uint32_t)bs->nranks, (uint32_t)bs->round, len };
    eep_bootstrap_tcp_hdr_t got;
    double                  deadline = eep_clock_ms() + bs->timeout_ms;
    eep_status_t            status;
    size_t                  total = len * (size_t)bs->nranks;
    int                     i;

    if (bs->rank != 0) {
        status = eep_bootstrap_tcp_send(t->fds[0], &hdr, sizeof(hdr), deadline, 0);
        if (status == EEP_OK) {
            status = eep_bootstrap_tcp_send(t->fds[0], mine, len, deadline, 0);
        }
        if (status == EEP_OK) {
            status = eep_bootstrap_tcp_recv(t->fds[0], all, total, deadline, 0);
        }
        return status;
    }
    memcpy(all, mine, len);
    for (i = 1; i < bs->nranks; i++) {
        status = eep_bootstrap_tcp_recv(t->fds[i], &got, sizeof(got), deadline, i);
        if (status != EEP_OK) {
            return status;
        }
        if (got.magic != hdr.magic || got.rank != (uint32_t)i || got.round != hdr.round ||
            got.len != len) {
            eep_error(EEP_SUBSYS_BOOTSTRAP,
                      "tcp bootstrap: rank %d sent round %u of %llu bytes, "
                      "expected round %u of %zu bytes: ranks disagree on the exchange",
                      i, got.round, (unsigned long long)got.len, hdr.round, len);
            return EEP_ERR_INVALID_ARG;
        }
        status = eep_bootstrap_tcp_recv(t->fds[i], (char *)all + (size_t)i * len, len, deadline, i);
        if (status != EEP_OK) {
            return status;
        }
    }
    for (i = 1; i < bs->nranks; i++) {
        status = eep_bootstrap_tcp_send(t->fds[i], all, total, deadline, i);
        if (status != EEP_OK) {
            return status;
        }
    }
    return EEP_OK;
}

static void eep_bootstrap_tcp_destroy(eep_bootstrap_t *bs)
{
    eep_bootstrap_tcp_t *t = bs->impl;
    int                  i;

    if (t == NULL) {
        return;
    }
    for (i = 0; i < (bs->rank == 0 ? bs->nranks : 1); i++) {
        if (t->fds[i] >= 0) {
            close(t->fds[i]);
        }
    }
    if (t->listen_fd >= 0) {
        close(t->listen_fd);
    }
    free(t->fds);
    free(t);
    bs->impl = NULL;
}

static const eep_bootstrap_ops_t eep_bootstrap_tcp_ops = {
    .name      = "tcp",
    .allgather = eep_bootstrap_tcp_allgather,
    .destroy   = eep_bootstrap_tcp_destroy,
};

static eep_status_t eep_bootstrap_tcp_resolve(const char *address, struct addrinfo **res_p)
{
    char            host[256];
    const char     *colon = strrchr(address, ':');
    size_t          hlen;
    int             ret;
    struct addrinfo hints;

    if (colon == NULL || colon == address || colon[1] == '\0' ||
        (hlen = (size_t)(colon - address)) >= sizeof(host)) {
        eep_error(EEP_SUBSYS_BOOTSTRAP, "tcp bootstrap address '%s' is not HOST:PORT", address);
        return EEP_ERR_INVALID_ARG;
    }
    memcpy(host, address, hlen);
    host[hlen] = '\0';
    memset(&hints, 0, sizeof(hints));
    hints.ai_family   = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    ret               = getaddrinfo(host, colon + 1, &hints, res_p);
    if (ret != 0) {
        eep_error(EEP_SUBSYS_BOOTSTRAP, "tcp bootstrap: cannot resolve '%s': %s", address,
                  gai_strerror(ret));
        return EEP_ERR_INVALID_ARG;
    }
    return EEP_OK;
}

static void eep_bootstrap_tcp_nodelay(int fd)
{
    int one = 1;

    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Rank 0: listen, then accept until every rank said hello. */
static eep_status_t eep_bootstrap_tcp_root(eep_bootstrap_t *bs, eep_bootstrap_tcp_t *t,
                                           struct addrinfo *ai, const char *address)
{
    double                  deadline = eep_clock_ms() + bs->timeout_ms;
    eep_bootstrap_tcp_hdr_t hello;
    eep_status_t            status;
    int                     one = 1, have = 1, fd, ret;

    t->listen_fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (t->listen_fd < 0) {
        return eep_status_from_errno(errno, "socket");
    }
    setsockopt(t->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(t->listen_fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(t->listen_fd, 128) != 0) {
        eep_error(EEP_SUBSYS_BOOTSTRAP, "tcp bootstrap: cannot listen on %s: %m", address);
        return EEP_ERR_IO;
    }
    while (have < bs->nranks) {
        ret = eep_bootstrap_tcp_wait(t->listen_fd, POLLIN, deadline);
        if (ret <= 0) {
            eep_error(EEP_SUBSYS_BOOTSTRAP, "tcp bootstrap: %d of %d ranks joined %s in %d ms",
                      have, bs->nranks, address, bs->timeout_ms);
            return ret == 0 ? EEP_ERR_TIMEOUT : EEP_ERR_IO;
        }
        fd = accept4(t->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            continue;
        }
        eep_bootstrap_tcp_nodelay(fd);
        status = eep_bootstrap_tcp_recv(fd, &hello, sizeof(hello), deadline, -1);
        if (status != EEP_OK || hello.magic != EEP_BOOTSTRAP_TCP_MAGIC ||
            hello.nranks != (uint32_t)bs->nranks || hello.rank == 0 ||
            hello.rank >= (uint32_t)bs->nranks || t->fds[hello.rank] >= 0) {
            eep_warn(EEP_SUBSYS_BOOTSTRAP,
                     "tcp bootstrap: dropped a connection with a bad hello "
                     "(rank %u of %u; expected a new rank of %d)",
                     hello.rank, hello.nranks, bs->nranks);
            close(fd);
            continue;
        }
        t->fds[hello.rank] = fd;
        have++;
    }
    return EEP_OK;
}

/* Other ranks: connect to rank 0 (retrying while it is not listening yet), say hello. */
static eep_status_t eep_bootstrap_tcp_leaf(eep_bootstrap_t *bs, eep_bootstrap_tcp_t *t,
                                           struct addrinfo *ai, const char *address)
{
    double                  deadline = eep_clock_ms() + bs->timeout_ms;
    eep_bootstrap_tcp_hdr_t hello    = { EEP_BOOTSTRAP_TCP_MAGIC, (uint32_t)bs->rank,
                                         (uint32_t)bs->nranks, 0, 0 };
    struct timespec         pause    = { 0, 10000000 };
    int                     fd;

    for (;;) {
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            return eep_status_from_errno(errno, "socket");
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
            break;
        }
        close(fd);
        if (eep_clock_ms() > deadline) {
            eep_error(EEP_SUBSYS_BOOTSTRAP,
                      "tcp bootstrap: rank 0 at %s did not accept within "
                      "%d ms",
                      address, bs->timeout_ms);
            return EEP_ERR_TIMEOUT;
        }
        nanosleep(&pause, NULL);
    }
    eep_bootstrap_tcp_nodelay(fd);
    t->fds[0] = fd;
    return eep_bootstrap_tcp_send(fd, &hello, sizeof(hello), deadline, 0);
}

eep_status_t eep_bootstrap_tcp_init(eep_bootstrap_t *bs, const char *address)
{
    eep_bootstrap_tcp_t *t;
    struct addrinfo     *ai = NULL;
    eep_status_t         status;
    int                  i;

    status = eep_bootstrap_tcp_resolve(address, &ai);
    if (status != EEP_OK) {
        return status;
    }
    t = calloc(1, sizeof(*t));
    if (t == NULL) {
        status = EEP_ERR_NO_MEMORY;
        goto err_free_ai;
    }
    t->listen_fd = -1;
    t->fds       = malloc(sizeof(int) * (size_t)bs->nranks);
    if (t->fds == NULL) {
        status = EEP_ERR_NO_MEMORY;
        goto err_free_t;
    }
    for (i = 0; i < bs->nranks; i++) {
        t->fds[i] = -1;
    }
    bs->ops  = &eep_bootstrap_tcp_ops;
    bs->impl = t;
    status   = bs->rank == 0 ? eep_bootstrap_tcp_root(bs, t, ai, address)
                             : eep_bootstrap_tcp_leaf(bs, t, ai, address);
    freeaddrinfo(ai);
    if (status != EEP_OK) {
        eep_bootstrap_tcp_destroy(bs);
        bs->ops = NULL;
    }
    return status;

err_free_t:
    free(t);
err_free_ai:
    freeaddrinfo(ai);
    return status;
}
