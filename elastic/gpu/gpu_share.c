/* gpu_share.c - the registry of runtimes per GPU (gpu_share.h says why and how). */
#include "elastic/gpu/gpu_share.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/log.h"

struct eep_gpu_share {
    char dir[PATH_MAX];  /* <dir>/eep-gpu-<uuid> */
    char path[PATH_MAX]; /* this runtime's entry */
    int  fd;             /* holds the entry's LOCK_EX while the runtime lives */
};

static uint64_t        eep_gpu_share_token_value;
static pid_t           eep_gpu_share_token_pid; /* the process it was made in */
static unsigned        eep_gpu_share_seq;
static pthread_mutex_t eep_gpu_share_lock = PTHREAD_MUTEX_INITIALIZER;

/* One random token per process, entries of one process count once; made again in a forked
   child, which is a process of its own; eep_gpu_share_lock held. */
static void eep_gpu_share_token_make(void)
{
    uint64_t t = 0;

    if (eep_gpu_share_token_pid == getpid()) {
        return;
    }
    eep_gpu_share_token_pid = getpid();

    if (getrandom(&t, sizeof(t), GRND_NONBLOCK) != (ssize_t)sizeof(t)) {
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        t = ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20);
    }
    eep_gpu_share_token_value = t != 0 ? t : 1;
}

eep_status_t eep_gpu_share_join(const char *dir, const unsigned char uuid[16],
                                eep_gpu_share_t **share_p)
{
    eep_gpu_share_t *s;
    char             tmp[PATH_MAX + 16], hex[33];
    unsigned         seq;
    int              i, n;

    if (share_p != NULL) {
        *share_p = NULL;
    }
    if (dir == NULL || dir[0] == '\0' || uuid == NULL || share_p == NULL) {
        eep_error(EEP_SUBSYS_RUNTIME, "eep_gpu_share_join: invalid argument %s: NULL or empty",
                  dir == NULL || dir[0] == '\0' ? "dir"
                  : uuid == NULL                ? "uuid"
                                                : "share_p");
        return EEP_ERR_INVALID_ARG;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    s->fd = -1;
    for (i = 0; i < 16; i++) {
        snprintf(hex + 2 * i, 3, "%02x", uuid[i]);
    }
    pthread_mutex_lock(&eep_gpu_share_lock);
    eep_gpu_share_token_make();
    seq = eep_gpu_share_seq++;
    pthread_mutex_unlock(&eep_gpu_share_lock);
    n = snprintf(s->dir, sizeof(s->dir), "%s/eep-gpu-%s", dir, hex);
    if (n < 0 || (size_t)n >= sizeof(s->dir) ||
        snprintf(s->path, sizeof(s->path), "%s/%016" PRIx64 ".%u", s->dir,
                 eep_gpu_share_token_value, seq) >= (int)sizeof(s->path)) {
        eep_error(EEP_SUBSYS_RUNTIME, "eep_gpu_share_join: invalid argument dir: '%s' is too long",
                  dir);
        free(s);
        return EEP_ERR_INVALID_ARG;
    }
    /* the folder is every user's, as /tmp is (each entry is its maker's) */
    if (mkdir(s->dir, 01777) == 0) {
        (void)chmod(s->dir, 01777);
    } else if (errno != EEXIST) {
        eep_debug(EEP_SUBSYS_RUNTIME, "GPU share registry %s: mkdir: %s", s->dir, strerror(errno));
        free(s);
        return EEP_ERR_IO;
    }
    /* made under a dot name, locked, then renamed: a count never sees it unlocked */
    if (snprintf(tmp, sizeof(tmp), "%s/.%016" PRIx64 ".%u", s->dir, eep_gpu_share_token_value,
                 seq) >= (int)sizeof(tmp)) {
        free(s);
        return EEP_ERR_INVALID_ARG; /* cannot be: the entry's own path fitted */
    }
    s->fd = open(tmp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (s->fd < 0 || flock(s->fd, LOCK_EX | LOCK_NB) != 0 || rename(tmp, s->path) != 0) {
        eep_debug(EEP_SUBSYS_RUNTIME, "GPU share registry %s: entry: %s", tmp, strerror(errno));
        if (s->fd >= 0) {
            close(s->fd);
            unlink(tmp);
        }
        free(s);
        return EEP_ERR_IO;
    }
    *share_p = s;
    return EEP_OK;
}

/* 1: @p path is held by a live runtime; 0: left by a dead process (removed here) or gone. */
static int eep_gpu_share_live(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC), live;

    if (fd < 0) {
        return 0;
    }
    live = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    if (!live) {
        unlink(path); /* its maker is gone: the kernel released its lock */
    }
    close(fd);
    return live;
}

int eep_gpu_share_count(eep_gpu_share_t *share)
{
    enum { MAX_TOKENS = 256 };
    uint64_t       tokens[MAX_TOKENS];
    int            n = 0, i;
    DIR           *d;
    struct dirent *e;
    char           path[PATH_MAX + 260];

    if (share == NULL) {
        return 1;
    }
    d = opendir(share->dir);
    if (d == NULL) {
        return 1;
    }
    while ((e = readdir(d)) != NULL && n < MAX_TOKENS) {
        uint64_t token;
        unsigned seq;
        char     end;

        if (e->d_name[0] == '.' ||
            sscanf(e->d_name, "%16" SCNx64 ".%u%c", &token, &seq, &end) != 2) {
            continue; /* being made (dot name), or not ours */
        }
        snprintf(path, sizeof(path), "%s/%s", share->dir, e->d_name);
        if (!eep_gpu_share_live(path)) {
            continue;
        }
        for (i = 0; i < n && tokens[i] != token; i++) {
        }
        if (i == n) {
            tokens[n++] = token;
        }
    }
    closedir(d);
    return n > 0 ? n : 1;
}

void eep_gpu_share_leave(eep_gpu_share_t *share)
{
    if (share == NULL) {
        return;
    }
    unlink(share->path);
    close(share->fd); /* drops the lock */
    free(share);
}
