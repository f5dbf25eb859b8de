/* gin/gin_sock.c - abstract-namespace Unix stream sockets: unique names, non-blocking connect and
 * accept, whole messages with a deadline (and a file descriptor passed with SCM_RIGHTS), and the
 * non-blocking pieces the progress loops use.  Abstract names need no file system and vanish with
 * their socket; each name carries the pid, a per-process counter and the process nonce, so several
 * communicators of one process, and processes forked from one parent, never collide.  Every
 * descriptor is close-on-exec and non-blocking; sends use MSG_NOSIGNAL (a dead peer is an error,
 * not a SIGPIPE). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "gin/gin_int.h"

static socklen_t eep_gin_sockaddr(const eep_gin_addr_t *addr, struct sockaddr_un *sa)
{
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    memcpy(sa->sun_path, addr->name, addr->len);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + addr->len);
}

int eep_gin_sock_listen(const char *kind, eep_gin_addr_t *addr, int *fd_p)
{
    static uint32_t    counter;
    struct sockaddr_un sa;
    uint32_t           n = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    int                len, fd;

    memset(addr, 0, sizeof(*addr));
    addr->magic = EEP_GIN_ADDR_MAGIC;
    /* name[0] stays NUL: the abstract namespace */
    len       = snprintf(addr->name + 1, sizeof(addr->name) - 1, "eep-gin-%s-%d-%u-%016llx", kind,
                         (int)getpid(), n, (unsigned long long)eep_gin_process_nonce());
    addr->len = (uint32_t)len + 1;
    fd        = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        EEP_GIN_WARN("socket: %m");
        return -1;
    }
    if (bind(fd, (struct sockaddr *)&sa, eep_gin_sockaddr(addr, &sa)) != 0 ||
        listen(fd, 512) != 0) {
        EEP_GIN_WARN("bind/listen %s: %m", addr->name + 1);
        close(fd);
        return -1;
    }
    *fd_p = fd;
    return 0;
}

int eep_gin_sock_connect(const eep_gin_addr_t *addr, int *fd_p)
{
    struct sockaddr_un sa;
    int                fd;

    if (addr->magic != EEP_GIN_ADDR_MAGIC || addr->len < 2 || addr->len > sizeof(addr->name)) {
        EEP_GIN_WARN("connect: not one of our handles (magic 0x%x)", addr->magic);
        return -1;
    }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        EEP_GIN_WARN("socket: %m");
        return -1;
    }
    if (connect(fd, (struct sockaddr *)&sa, eep_gin_sockaddr(addr, &sa)) != 0) {
        int err = errno;
        close(fd);
        if (err == EAGAIN || err == EINTR) {
            return 1;
        }
        errno = err;
        EEP_GIN_WARN("connect %s: %m", addr->name + 1);
        return -1;
    }
    *fd_p = fd;
    return 0;
}

int eep_gin_sock_accept(int lfd, int *fd_p)
{
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

    if (fd < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
            return 1;
        }
        EEP_GIN_WARN("accept: %m");
        return -1;
    }
    *fd_p = fd;
    return 0;
}

ssize_t eep_gin_sock_send_some(int fd, const void *buf, size_t len)
{
    ssize_t n = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);

    if (n >= 0) {
        return n;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        return 0;
    }
    return -1;
}

ssize_t eep_gin_sock_recv_some(int fd, void *buf, size_t len)
{
    ssize_t n = recv(fd, buf, len, MSG_DONTWAIT);

    if (n > 0) {
        return n;
    }
    if (n == 0) {
        return -1; /* the peer closed: never a zero-length read here, len > 0 */
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        return 0;
    }
    return -1;
}

/* Waits until fd is ready for events or the deadline passes: 0 ready, -1 timed out / error. */
static int eep_gin_sock_wait(int fd, short events, int64_t deadline)
{
    struct pollfd pfd = { .fd = fd, .events = events };
    int64_t       left;
    int           ret;

    for (;;) {
        left = deadline - eep_gin_now_ms();
        if (left <= 0) {
            return -1;
        }
        ret = poll(&pfd, 1, left > 100 ? 100 : (int)left);
        if (ret > 0) {
            return 0;
        }
        if (ret < 0 && errno != EINTR) {
            return -1;
        }
    }
}

int eep_gin_sock_send_all(int fd, const void *buf, size_t len, int pass_fd, int64_t deadline)
{
    const char *p    = buf;
    size_t      done = 0;
    ssize_t     n;

    while (done < len) {
        if (pass_fd >= 0 && done == 0) {
            char            cbuf[CMSG_SPACE(sizeof(int))];
            struct iovec    iov = { .iov_base = (void *)p, .iov_len = len };
            struct msghdr   msg = { .msg_iov        = &iov,
                                    .msg_iovlen     = 1,
                                    .msg_control    = cbuf,
                                    .msg_controllen = sizeof(cbuf) };
            struct cmsghdr *cm;

            memset(cbuf, 0, sizeof(cbuf));
            cm             = CMSG_FIRSTHDR(&msg);
            cm->cmsg_level = SOL_SOCKET;
            cm->cmsg_type  = SCM_RIGHTS;
            cm->cmsg_len   = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(cm), &pass_fd, sizeof(int));
            n = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        } else {
            n = send(fd, p + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            EEP_GIN_WARN("send: %m");
            return -1;
        }
        if (eep_gin_sock_wait(fd, POLLOUT, deadline) != 0) {
            EEP_GIN_WARN("send: no progress within the deadline");
            return -1;
        }
    }
    return 0;
}

int eep_gin_sock_recv_all(int fd, void *buf, size_t len, int *got_fd_p, int64_t deadline)
{
    char   *p    = buf;
    size_t  done = 0;
    ssize_t n;

    if (got_fd_p != NULL) {
        *got_fd_p = -1;
    }
    while (done < len) {
        char          cbuf[CMSG_SPACE(sizeof(int))];
        struct iovec  iov = { .iov_base = p + done, .iov_len = len - done };
        struct msghdr msg = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)
        };
        struct cmsghdr *cm;

        n = recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n > 0) {
            for (cm = CMSG_FIRSTHDR(&msg); cm != NULL; cm = CMSG_NXTHDR(&msg, cm)) {
                if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
                    int got;
                    memcpy(&got, CMSG_DATA(cm), sizeof(int));
                    if (got_fd_p != NULL && *got_fd_p < 0) {
                        *got_fd_p = got;
                    } else {
                        close(got);
                    }
                }
            }
            done += (size_t)n;
            continue;
        }
        if (n == 0) {
            EEP_GIN_WARN("recv: the peer closed its connection");
            goto err;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            EEP_GIN_WARN("recv: %m");
            goto err;
        }
        if (eep_gin_sock_wait(fd, POLLIN, deadline) != 0) {
            EEP_GIN_WARN("recv: nothing within the deadline");
            goto err;
        }
    }
    return 0;

err:
    if (got_fd_p != NULL && *got_fd_p >= 0) {
        close(*got_fd_p);
        *got_fd_p = -1;
    }
    return -1;
}
