/*
 * jit_cache.c - the on-disk cubin cache: checked entries, atomic stores, per-key locks.
 *
 * An entry "<dir>/v1/<key>.cubin" is a 64-byte header {magic, format version, header size,
 * payload length, SHA-256 of the payload, reserved} followed by the cubin.  Writers write a temp
 * file in the same directory and rename() it into place, so a reader sees either nothing or a
 * whole entry; no fsync, because a torn entry after a crash fails the checksum and is rebuilt.
 * Compiles of one key are serialised across processes and threads by flock() on "<key>.lock"
 * (each caller opens its own descriptor, so threads of one process exclude each other too); lock
 * files are never deleted, which would let two processes hold "the" lock on different inodes.
 * The holder notes its pid in the lock file; a waiter whose holder is stopped (a SIGSTOPped rank
 * whose background prefetch held the lock) compiles the key itself rather than wait on it.
 */
#include "elastic/jit/jit_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/log.h"

#define EEP_JIT_CACHE_MAGIC     "EEPJITC\0"
#define EEP_JIT_CACHE_VERSION   1u
#define EEP_JIT_CACHE_MAX_BYTES (1ull << 30)
/* A compile takes seconds; a lock held this long means a stuck compiler, not a slow one: the
   waiter then compiles the key itself. */
#define EEP_JIT_LOCK_WAIT_MS    (5 * 60 * 1000)

typedef struct {
    char     magic[8];
    uint32_t version;
    uint32_t header_size;
    uint64_t payload_size;
    uint8_t  payload_sha256[EEP_SHA256_BYTES];
    uint64_t reserved;
} eep_jit_cache_header_t;

_Static_assert(sizeof(eep_jit_cache_header_t) == 64, "cache entry header is 64 bytes");

eep_status_t eep_jit_mkdirs(const char *path)
{
    char   buf[PATH_MAX];
    size_t i, len = strlen(path);

    if (len == 0 || len >= sizeof(buf)) {
        eep_error(EEP_SUBSYS_JIT, "bad directory path '%s'", path);
        return EEP_ERR_INVALID_ARG;
    }
    memcpy(buf, path, len + 1);
    for (i = 1; i <= len; i++) {
        if (buf[i] == '/' || buf[i] == '\0') {
            buf[i] = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
                return eep_status_from_errno(errno, "mkdir(jit cache)");
            }
            buf[i] = path[i];
        }
    }
    return EEP_OK;
}

eep_status_t eep_jit_cache_path(const eep_jit_t *jit, const char *key, const char *suffix,
                                char *path_p, size_t len)
{
    int n = snprintf(path_p, len, "%s/v1/%s%s", jit->cache_dir, key, suffix);

    if (n < 0 || (size_t)n >= len) {
        eep_error(EEP_SUBSYS_JIT, "cache path under %s is too long", jit->cache_dir);
        return EEP_ERR_INVALID_ARG;
    }
    return EEP_OK;
}

static eep_status_t eep_jit_read_all(int fd, void *buf, size_t len, const char *path)
{
    size_t  done = 0;
    ssize_t got;

    while (done < len) {
        got = read(fd, (char *)buf + done, len - done);
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got < 0) {
            return eep_status_from_errno(errno, path);
        }
        if (got == 0) {
            return EEP_ERR_IO; /* shorter than it says */
        }
        done += (size_t)got;
    }
    return EEP_OK;
}

eep_status_t eep_jit_cache_read(const char *path, void **cubin_p, size_t *size_p)
{
    eep_jit_cache_header_t hdr;
    uint8_t                digest[EEP_SHA256_BYTES];
    struct stat            st;
    const char            *why;
    eep_status_t           status;
    void                  *buf = NULL;
    int                    fd;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return errno == ENOENT ? EEP_ERR_NOT_FOUND : eep_status_from_errno(errno, path);
    }
    if (fstat(fd, &st) != 0) {
        status = eep_status_from_errno(errno, path);
        goto out_close;
    }
    why = "truncated header";
    if ((size_t)st.st_size < sizeof(hdr) ||
        eep_jit_read_all(fd, &hdr, sizeof(hdr), path) != EEP_OK) {
        goto corrupt;
    }
    why = "bad magic or format version";
    if (memcmp(hdr.magic, EEP_JIT_CACHE_MAGIC, sizeof(hdr.magic)) != 0 ||
        hdr.version != EEP_JIT_CACHE_VERSION || hdr.header_size != sizeof(hdr)) {
        goto corrupt;
    }
    why = "length does not match the header (truncated?)";
    if (hdr.payload_size == 0 || hdr.payload_size > EEP_JIT_CACHE_MAX_BYTES ||
        (uint64_t)st.st_size != sizeof(hdr) + hdr.payload_size) {
        goto corrupt;
    }
    buf = malloc(hdr.payload_size);
    if (buf == NULL) {
        status = EEP_ERR_NO_MEMORY;
        goto out_close;
    }
    why = "short read";
    if (eep_jit_read_all(fd, buf, hdr.payload_size, path) != EEP_OK) {
        goto corrupt;
    }
    why = "checksum mismatch";
    eep_sha256(buf, hdr.payload_size, digest);
    if (memcmp(digest, hdr.payload_sha256, sizeof(digest)) != 0) {
        goto corrupt;
    }
    close(fd);
    *cubin_p = buf;
    *size_p  = hdr.payload_size;
    return EEP_OK;

corrupt:
    eep_warn(EEP_SUBSYS_JIT, "corrupt jit cache entry %s (%s): it will be rebuilt", path, why);
    status = EEP_ERR_IO;
out_close:
    free(buf);
    close(fd);
    return status;
}

static eep_status_t eep_jit_write_all(int fd, const void *buf, size_t len, const char *path)
{
    size_t  done = 0;
    ssize_t put;

    while (done < len) {
        put = write(fd, (const char *)buf + done, len - done);
        if (put < 0 && errno == EINTR) {
            continue;
        }
        if (put < 0) {
            return eep_status_from_errno(errno, path);
        }
        done += (size_t)put;
    }
    return EEP_OK;
}

eep_status_t eep_jit_cache_write(const char *path, const void *cubin, size_t size)
{
    eep_jit_cache_header_t hdr;
    char                   tmp[PATH_MAX];
    eep_status_t           status;
    int                    fd;

    memset(&hdr, 0, sizeof(hdr));
    memcpy(hdr.magic, EEP_JIT_CACHE_MAGIC, sizeof(hdr.magic));
    hdr.version      = EEP_JIT_CACHE_VERSION;
    hdr.header_size  = sizeof(hdr);
    hdr.payload_size = size;
    eep_sha256(cubin, size, hdr.payload_sha256);
    if (snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", path) >= (int)sizeof(tmp)) {
        return EEP_ERR_INVALID_ARG;
    }
    fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        return eep_status_from_errno(errno, "mkostemp(jit cache entry)");
    }
    (void)fchmod(fd, 0644); /* mkostemp makes 0600; others sharing the cache may read it */
    status = eep_jit_write_all(fd, &hdr, sizeof(hdr), tmp);
    if (status == EEP_OK) {
        status = eep_jit_write_all(fd, cubin, size, tmp);
    }
    if (close(fd) != 0 && status == EEP_OK) {
        status = eep_status_from_errno(errno, tmp);
    }
    if (status == EEP_OK && rename(tmp, path) != 0) {
        status = eep_status_from_errno(errno, "rename(jit cache entry)");
    }
    if (status != EEP_OK) {
        unlink(tmp);
    }
    return status;
}

/* Who holds a key's lock: "<pid> <pid namespace>" in the lock file, written by the holder, so that
   a waiter can tell a compiler at work from a process that is stopped (SIGSTOP, a debugger) while
   holding it.  Only a process of our own pid namespace is judged; anything else reads as "busy". */
static void eep_jit_pid_ns(char ns[64])
{
    memset(ns, 0, 64);
    if (readlink("/proc/self/ns/pid", ns, 63) < 0) {
        ns[0] = '\0';
    }
}

static void eep_jit_lock_note_holder(int fd, const char *ns)
{
    char text[128];
    int  len;

    len = snprintf(text, sizeof(text), "%ld %s\n", (long)getpid(), ns);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)len, 0) != len) {
        eep_debug(EEP_SUBSYS_JIT, "cannot note the jit lock's holder: %s", strerror(errno));
    }
}

/* 1 when the lock's noted holder is a stopped process of our pid namespace @p ns (not
   ourselves). */
static int eep_jit_lock_holder_stopped(int fd, const char *ns, long *pid_p)
{
    char    text[128], their_ns[64] = "", path[64], stat[512], *paren;
    ssize_t got = pread(fd, text, sizeof(text) - 1, 0);
    long    pid = 0;
    FILE   *f;
    size_t  n;

    if (got <= 0) {
        return 0;
    }
    text[got] = '\0';
    if (sscanf(text, "%ld %63s", &pid, their_ns) != 2 || pid <= 0 || pid == (long)getpid() ||
        ns[0] == '\0' || strcmp(ns, their_ns) != 0) {
        return 0;
    }
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    f = fopen(path, "re");
    if (f == NULL) {
        return 0;
    }
    n = fread(stat, 1, sizeof(stat) - 1, f);
    fclose(f);
    stat[n] = '\0';
    paren   = strrchr(stat, ')'); /* "pid (comm) S ...": comm may hold spaces and parens */
    *pid_p  = pid;
    return paren != NULL && (paren[1] == ' ') && (paren[2] == 'T' || paren[2] == 't');
}

/* The lock only saves a second compile of one key: stores are atomic renames, so two compilers of
   one key are safe.  A waiter therefore never depends on the holder: when the holder is stopped,
   or the wait passes EEP_JIT_LOCK_WAIT_MS, it compiles without the lock (*fd_p = -1). */
eep_status_t eep_jit_cache_lock(const eep_jit_t *jit, const char *key, int *fd_p)
{
    struct timespec nap = { 0, 2 * 1000 * 1000 };
    char            path[PATH_MAX], ns[64];
    eep_status_t    status;
    double          start  = eep_clock_ms(), waited;
    long            holder = 0;
    int             fd, warned = 0;

    *fd_p = -1;
    eep_jit_pid_ns(ns); /* once: the holder check below runs at every poll */
    status = eep_jit_cache_path(jit, key, ".lock", path, sizeof(path));
    if (status != EEP_OK) {
        return status;
    }
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        return eep_status_from_errno(errno, path);
    }
    /* Poll with a growing nap (2 ms .. 50 ms) rather than block, so the wait is bounded. */
    while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK && errno != EINTR) {
            status = eep_status_from_errno(errno, "flock(jit cache lock)");
            close(fd);
            return status;
        }
        if (eep_jit_lock_holder_stopped(fd, ns, &holder)) {
            eep_warn(EEP_SUBSYS_JIT,
                     "process %ld holds the lock compiling %.16s but is stopped; compiling it "
                     "here without the lock",
                     holder, key);
            close(fd);
            return EEP_OK;
        }
        waited = eep_clock_ms() - start;
        if (waited > EEP_JIT_LOCK_WAIT_MS) {
            eep_warn(EEP_SUBSYS_JIT,
                     "waited %.0f s for another process compiling %.16s (lock %s); compiling it "
                     "here without the lock",
                     waited / 1000, key, path);
            close(fd);
            return EEP_OK;
        }
        if (!warned && waited > 60 * 1000) {
            eep_warn(EEP_SUBSYS_JIT, "still waiting for another process compiling %.16s", key);
            warned = 1;
        }
        nanosleep(&nap, NULL);
        if (nap.tv_nsec < 50 * 1000 * 1000) {
            nap.tv_nsec *= 2;
        }
    }
    eep_jit_lock_note_holder(fd, ns);
    *fd_p = fd;
    return EEP_OK;
}

void eep_jit_cache_unlock(int fd)
{
    if (fd >= 0) {
        flock(fd, LOCK_UN);
        close(fd);
    }
}
