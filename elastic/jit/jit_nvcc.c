/*
 * jit_nvcc.c - the nvcc backend: compile a unit with nvcc as a subprocess.
 *
 * Needed for kernels that use NCCL 2.28.9's GIN headers, which NVRTC cannot compile.  The unit is
 * written to a private temp directory under the cache, nvcc is spawned directly (no shell) with
 * its output captured to a log file, and the wait is bounded.  The compiler identity in the key
 * is the size and mtime of nvcc, ptxas and cicc, read with stat() once per eep_jit_t: a warm
 * lookup never executes nvcc (not even --version).
 */
#include "elastic/jit/jit_int.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/log.h"

#define EEP_JIT_NVCC_WAIT_MS (10 * 60 * 1000)

extern char **environ;

static void eep_jit_nvcc_stat(eep_sha256_t *hash, const char *path)
{
    struct stat st;
    char        id[PATH_MAX + 96];

    if (stat(path, &st) == 0) {
        snprintf(id, sizeof(id), "%s %lld %lld.%09ld", path, (long long)st.st_size,
                 (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    } else {
        snprintf(id, sizeof(id), "%s absent", path);
    }
    eep_sha256_update(hash, id, strlen(id) + 1);
}

static eep_status_t eep_jit_nvcc_identity(eep_jit_t *jit, eep_sha256_t *hash)
{
    eep_sha256_t id;
    char         dir[PATH_MAX], path[PATH_MAX + 32];

    pthread_mutex_lock(&jit->lock);
    if (!jit->nvcc_identity_done) {
        if (jit->nvcc[0] == '\0') {
            eep_error(EEP_SUBSYS_JIT,
                      "no nvcc: EEP_JIT_NVCC is unset or missing and none is on "
                      "PATH; the nvcc backend (GIN kernels) needs the CUDA toolkit");
            jit->nvcc_identity_status = EEP_ERR_JIT;
        } else {
            eep_sha256_init(&id);
            eep_jit_nvcc_stat(&id, jit->nvcc);
            snprintf(dir, sizeof(dir), "%s", jit->nvcc);
            snprintf(path, sizeof(path), "%s/ptxas", dirname(dir));
            eep_jit_nvcc_stat(&id, path);
            snprintf(path, sizeof(path), "%s/../nvvm/bin/cicc", dir);
            eep_jit_nvcc_stat(&id, path);
            eep_sha256_final(&id, jit->nvcc_identity);
            jit->nvcc_identity_status = EEP_OK;
        }
        jit->nvcc_identity_done = 1;
    }
    pthread_mutex_unlock(&jit->lock);
    if (jit->nvcc_identity_status == EEP_OK) {
        eep_sha256_update(hash, "compiler", sizeof("compiler"));
        eep_sha256_update(hash, jit->nvcc_identity, sizeof(jit->nvcc_identity));
    }
    return jit->nvcc_identity_status;
}

static eep_status_t eep_jit_nvcc_write(const char *path, const char *text)
{
    size_t  len = strlen(text), done = 0;
    ssize_t put;
    int     fd;

    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        return eep_status_from_errno(errno, path);
    }
    while (done < len) {
        put = write(fd, text + done, len - done);
        if (put < 0 && errno == EINTR) {
            continue;
        }
        if (put < 0) {
            eep_status_t status = eep_status_from_errno(errno, path);

            close(fd);
            return status;
        }
        done += (size_t)put;
    }
    return close(fd) == 0 ? EEP_OK : eep_status_from_errno(errno, path);
}

static void *eep_jit_nvcc_slurp(const char *path, size_t *size_p)
{
    struct stat st;
    char       *buf;
    size_t      done = 0;
    ssize_t     got;
    int         fd;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return NULL;
    }
    if (fstat(fd, &st) != 0 || (buf = malloc((size_t)st.st_size + 1)) == NULL) {
        close(fd);
        return NULL;
    }
    while (done < (size_t)st.st_size && (got = read(fd, buf + done, st.st_size - done)) > 0) {
        done += (size_t)got;
    }
    close(fd);
    buf[done] = '\0';
    *size_p   = done;
    return buf;
}

/* Run nvcc; @p status_p gets its exit status (or -1 when killed for running too long). */
static eep_status_t eep_jit_nvcc_run(const char *const *argv, const char *log_path, int *exit_p)
{
    struct timespec            nap = { 0, 5 * 1000 * 1000 };
    posix_spawn_file_actions_t fa;
    eep_status_t               status = EEP_OK;
    double                     start  = eep_clock_ms();
    pid_t                      pid, done;
    int                        ret, wstatus = 0;

    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    ret = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (ret != 0) {
        eep_error(EEP_SUBSYS_JIT, "cannot run nvcc %s: %s (set EEP_JIT_NVCC)", argv[0],
                  strerror(ret));
        return EEP_ERR_JIT;
    }
    for (;;) {
        done = waitpid(pid, &wstatus, WNOHANG);
        if (done == pid) {
            break;
        }
        if (done < 0 && errno != EINTR) {
            status = eep_status_from_errno(errno, "waitpid(nvcc)");
            break;
        }
        if (eep_clock_ms() - start > EEP_JIT_NVCC_WAIT_MS) {
            eep_error(EEP_SUBSYS_JIT, "nvcc (pid %d) ran for more than %d s: killed", (int)pid,
                      EEP_JIT_NVCC_WAIT_MS / 1000);
            kill(pid, SIGKILL);
            waitpid(pid, &wstatus, 0);
            *exit_p = -1;
            return EEP_ERR_TIMEOUT;
        }
        nanosleep(&nap, NULL);
    }
    if (status == EEP_OK) {
        *exit_p = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
    }
    return status;
}

static eep_status_t eep_jit_nvcc_compile(eep_jit_t *jit, const eep_jit_unit_t *unit, void **cubin_p,
                                         size_t *size_p, char **log_p)
{
    const char  *argv[EEP_JIT_MAX_OPTIONS + 8];
    char         dir[PATH_MAX], src[PATH_MAX + 128], out[PATH_MAX + 32], log[PATH_MAX + 32];
    eep_status_t status;
    size_t       size = 0, log_size;
    void        *cubin;
    int          i, argc = 0, exit_code = 0;

    *log_p = NULL;
    if (jit->nvcc[0] == '\0') {
        eep_error(EEP_SUBSYS_JIT, "no nvcc to compile %s (set EEP_JIT_NVCC)", unit->name);
        return EEP_ERR_JIT;
    }
    if (eep_jit_pathf(dir, sizeof(dir), "%s/tmp", jit->cache_dir) != 0) {
        return EEP_ERR_INVALID_ARG;
    }
    status = eep_jit_mkdirs(dir);
    if (status != EEP_OK) {
        return status;
    }
    if (eep_jit_pathf(dir, sizeof(dir), "%s/tmp/%.16s.XXXXXX", jit->cache_dir, unit->key) != 0) {
        return EEP_ERR_INVALID_ARG;
    }
    if (mkdtemp(dir) == NULL) {
        return eep_status_from_errno(errno, "mkdtemp(nvcc work dir)");
    }
    snprintf(src, sizeof(src), "%s/%s", dir, unit->name);
    snprintf(out, sizeof(out), "%s/out.cubin", dir);
    snprintf(log, sizeof(log), "%s/nvcc.log", dir);
    status = eep_jit_nvcc_write(src, unit->source);
    if (status != EEP_OK) {
        goto out_rmdir;
    }
    argv[argc++] = jit->nvcc;
    argv[argc++] = "-cubin";
    for (i = 0; i < unit->n_options; i++) {
        argv[argc++] = unit->options[i];
    }
    argv[argc++] = "-o";
    argv[argc++] = out;
    argv[argc++] = src;
    argv[argc]   = NULL;
    eep_jit_count_compiler_run();
    status = eep_jit_nvcc_run(argv, log, &exit_code);
    *log_p = eep_jit_nvcc_slurp(log, &log_size);
    if (status != EEP_OK) {
        goto out_rmdir;
    }
    if (exit_code != 0) {
        status = EEP_ERR_JIT; /* the caller logs the compiler's own words */
        goto out_rmdir;
    }
    cubin = eep_jit_nvcc_slurp(out, &size);
    if (cubin == NULL || size == 0) {
        free(cubin);
        eep_error(EEP_SUBSYS_JIT, "nvcc exited 0 but wrote no cubin at %s", out);
        status = EEP_ERR_JIT;
        goto out_rmdir;
    }
    *cubin_p = cubin;
    *size_p  = size;
out_rmdir:
    unlink(src);
    unlink(out);
    unlink(log);
    rmdir(dir);
    return status;
}

const eep_jit_backend_ops_t eep_jit_nvcc_ops = {
    .name          = "nvcc",
    .identity      = eep_jit_nvcc_identity,
    .flags         = NULL,
    .mem_headers   = NULL,
    .n_mem_headers = 0,
    .unit_prologue = NULL,
    .compile       = eep_jit_nvcc_compile,
};
