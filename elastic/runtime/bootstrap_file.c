/*
 * bootstrap_file.c - bootstrap backend over a shared directory.
 *
 * Round r of the all-gather: each rank writes its bytes to DIR/r<r>.<rank> (written to a temporary
 * name, then renamed, so a reader never sees a partial file) and polls until every rank's file of
 * round r exists.  Entering round r proves every rank finished reading round r-2 (it wrote round
 * r-1 only after reading r-2), so each rank removes its own round r-2 file then; the last two
 * rounds stay, and the directory must be fresh for each job.
 */
#include "elastic/runtime/bootstrap.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/log.h"

typedef struct {
    char dir[PATH_MAX];
} eep_bootstrap_file_t;

static void eep_bootstrap_file_name(const eep_bootstrap_file_t *f, unsigned long round, int rank,
                                    char *buf, size_t len)
{
    snprintf(buf, len, "%s/r%lu.%d", f->dir, round, rank);
}

static eep_status_t eep_bootstrap_file_write(const char *path, const void *data, size_t len)
{
    char        tmp[PATH_MAX + 40];
    const char *p    = data;
    size_t      done = 0;
    int         fd;

    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        return eep_status_from_errno(errno, tmp);
    }
    while (done < len) {
        ssize_t n = write(fd, p + done, len - done);

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            int err = n < 0 ? errno : EIO;

            close(fd);
            unlink(tmp);
            return eep_status_from_errno(err, tmp);
        }
        done += (size_t)n;
    }
    if (close(fd) != 0 || rename(tmp, path) != 0) {
        int err = errno;

        unlink(tmp);
        return eep_status_from_errno(err, path);
    }
    return EEP_OK;
}

/* @return 1 when read, 0 when not there yet, <0 on an error. */
static int eep_bootstrap_file_read(const char *path, void *data, size_t len)
{
    struct stat st;
    size_t      done = 0;
    int         fd;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return errno == ENOENT ? 0 : -1;
    }
    if (fstat(fd, &st) != 0 || (size_t)st.st_size != len) {
        eep_error(EEP_SUBSYS_BOOTSTRAP,
                  "%s holds %lld bytes, expected %zu: ranks disagree on "
                  "the exchange, or the directory is not fresh",
                  path, (long long)st.st_size, len);
        close(fd);
        return -2;
    }
    while (done < len) {
        ssize_t n = read(fd, (char *)data + done, len - done);

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            close(fd);
            return -1;
        }
        done += (size_t)n;
    }
    close(fd);
    return 1;
}

static eep_status_t eep_bootstrap_file_allgather(eep_bootstrap_t *bs, const void *mine, void *all,
                                                 size_t len)
{
    eep_bootstrap_file_t *f = bs->impl;
    char                  path[PATH_MAX + 32];
    double                deadline = eep_clock_ms() + bs->timeout_ms;
    struct timespec       pause    = { 0, 1000000 };
    eep_status_t          status;
    int                   have = 0, i, ret;
    char                 *got;

    got = calloc((size_t)bs->nranks, 1);
    if (got == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    if (bs->round >= 2) {
        eep_bootstrap_file_name(f, bs->round - 2, bs->rank, path, sizeof(path));
        unlink(path);
    }
    eep_bootstrap_file_name(f, bs->round, bs->rank, path, sizeof(path));
    status = eep_bootstrap_file_write(path, mine, len);
    if (status != EEP_OK) {
        goto out;
    }
    for (;;) {
        for (i = 0; i < bs->nranks; i++) {
            if (got[i]) {
                continue;
            }
            eep_bootstrap_file_name(f, bs->round, i, path, sizeof(path));
            ret = eep_bootstrap_file_read(path, (char *)all + (size_t)i * len, len);
            if (ret < 0) {
                if (ret == -1) {
                    eep_status_from_errno(errno, path);
                }
                status = EEP_ERR_IO;
                goto out;
            }
            if (ret == 1) {
                got[i] = 1;
                have++;
            }
        }
        if (have == bs->nranks) {
            break;
        }
        if (eep_clock_ms() > deadline) {
            for (i = 0; i < bs->nranks && got[i]; i++) {
            }
            eep_error(EEP_SUBSYS_BOOTSTRAP,
                      "file bootstrap round %lu: %d of %d ranks after %d ms; "
                      "rank %d (at least) is missing",
                      bs->round, have, bs->nranks, bs->timeout_ms, i);
            status = EEP_ERR_TIMEOUT;
            goto out;
        }
        nanosleep(&pause, NULL);
    }
out:
    free(got);
    return status;
}

static void eep_bootstrap_file_destroy(eep_bootstrap_t *bs)
{
    free(bs->impl);
    bs->impl = NULL;
}

static const eep_bootstrap_ops_t eep_bootstrap_file_ops = {
    .name      = "file",
    .allgather = eep_bootstrap_file_allgather,
    .destroy   = eep_bootstrap_file_destroy,
};

eep_status_t eep_bootstrap_file_init(eep_bootstrap_t *bs, const char *dir)
{
    eep_bootstrap_file_t *f;
    struct stat           st;

    if (strlen(dir) >= PATH_MAX - 32) {
        eep_error(EEP_SUBSYS_BOOTSTRAP, "bootstrap directory name is too long");
        return EEP_ERR_INVALID_ARG;
    }
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        return eep_status_from_errno(errno, dir);
    }
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        eep_error(EEP_SUBSYS_BOOTSTRAP, "bootstrap path %s is not a directory", dir);
        return EEP_ERR_INVALID_ARG;
    }
    f = calloc(1, sizeof(*f));
    if (f == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    memcpy(f->dir, dir, strlen(dir) + 1);
    bs->ops  = &eep_bootstrap_file_ops;
    bs->impl = f;
    return EEP_OK;
}
