/* test_jit_util.h - helpers shared by the JIT tests: temp trees, files, a log hook. */
#ifndef EEP_JIT_TEST_UTIL_H
#define EEP_JIT_TEST_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/log.h"

static int  jt_hook_errors, jt_hook_warns;
static char jt_hook_last[8192];

static inline void jt_hook(eep_log_level_t level, eep_log_subsys_t subsys, const char *msg,
                           void *arg)
{
    (void)subsys;
    (void)arg;
    if (level == EEP_LOG_LEVEL_ERROR || level == EEP_LOG_LEVEL_WARN) {
        jt_hook_errors += level == EEP_LOG_LEVEL_ERROR;
        jt_hook_warns += level == EEP_LOG_LEVEL_WARN;
        snprintf(jt_hook_last, sizeof(jt_hook_last), "%s", msg);
    }
}

static inline void jt_hook_reset(void)
{
    jt_hook_errors = jt_hook_warns = 0;
    jt_hook_last[0]                = '\0';
}

/* Write @p text to dir/rel, creating parent folders. */
static inline void jt_write(const char *dir, const char *rel, const char *text)
{
    char  path[4096], *slash;
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, rel);
    for (slash = strchr(path + strlen(dir) + 1, '/'); slash != NULL;
         slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        mkdir(path, 0755);
        *slash = '/';
    }
    f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
        abort();
    }
    fputs(text, f);
    fclose(f);
}

static inline char *jt_mkdtemp(const char *what)
{
    char  tmpl[256];
    char *dir;

    snprintf(tmpl, sizeof(tmpl), "/tmp/eep-test-%s.XXXXXX", what);
    dir = mkdtemp(tmpl);
    if (dir == NULL) {
        abort();
    }
    return strdup(dir);
}

static inline int jt_rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static inline void jt_rm_rf(char *dir)
{
    if (dir != NULL) {
        nftw(dir, jt_rm_one, 16, FTW_DEPTH | FTW_PHYS);
        free(dir);
    }
}

#endif
