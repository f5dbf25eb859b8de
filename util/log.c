/*
 * log.c - the log singleton.
 *
 * Lazily configured from the core knob table on the first call.  Configuration itself may log
 * (a malformed knob), so initialisation is a three-state atomic rather than pthread_once: a call
 * made while the configuring thread is inside it uses the defaults instead of deadlocking.
 */
#include "util/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "util/config.h"
#include "util/core_knobs.h"

enum { EEP_LOG_UNINIT, EEP_LOG_INITING, EEP_LOG_READY };

static struct {
    int                 state;
    eep_log_level_t     level;
    uint32_t            subsys_mask;
    FILE               *file;
    int                 rank;
    char                host[64];
    eep_log_hook_func_t hook;
    void               *hook_arg;
    pthread_mutex_t     lock;
} eep_log_ctx = {
    .state       = EEP_LOG_UNINIT,
    .level       = EEP_LOG_LEVEL_WARN,
    .subsys_mask = ~0u,
    .rank        = -1,
    .lock        = PTHREAD_MUTEX_INITIALIZER,
};

static const char *const eep_log_level_names[] = {
    "none", "error", "warn", "info", "debug", "trace",
};

static const char *const eep_log_subsys_names[EEP_SUBSYS_COUNT] = {
    [EEP_SUBSYS_CORE]      = "core",
    [EEP_SUBSYS_CONFIG]    = "config",
    [EEP_SUBSYS_JIT]       = "jit",
    [EEP_SUBSYS_RUNTIME]   = "runtime",
    [EEP_SUBSYS_BARRIER]   = "barrier",
    [EEP_SUBSYS_KERNEL]    = "kernel",
    [EEP_SUBSYS_BOOTSTRAP] = "bootstrap",
    [EEP_SUBSYS_ETCD]      = "etcd",
    [EEP_SUBSYS_AGENT]     = "agent",
    [EEP_SUBSYS_EEPD]      = "eepd",
    [EEP_SUBSYS_RPC]       = "rpc",
    [EEP_SUBSYS_TOOL]      = "tool",
    [EEP_SUBSYS_TEST]      = "test",
};

const char *eep_log_level_name(eep_log_level_t level)
{
    if ((unsigned)level >= sizeof(eep_log_level_names) / sizeof(eep_log_level_names[0])) {
        return NULL;
    }
    return eep_log_level_names[level];
}

int eep_log_level_parse(const char *name, eep_log_level_t *level_p)
{
    size_t i;

    for (i = 0; i < sizeof(eep_log_level_names) / sizeof(eep_log_level_names[0]); i++) {
        if (strcasecmp(name, eep_log_level_names[i]) == 0) {
            *level_p = (eep_log_level_t)i;
            return 0;
        }
    }
    return -1;
}

const char *eep_log_subsys_name(eep_log_subsys_t subsys)
{
    return (unsigned)subsys < EEP_SUBSYS_COUNT ? eep_log_subsys_names[subsys] : "?";
}

/* Parse "jit,runtime" or "all"; unknown names are reported once the log works. */
static uint32_t eep_log_parse_subsys(const char *spec, char *unknown, size_t unknown_len)
{
    char     buf[EEP_KNOB_STRING_MAX];
    char    *save = NULL;
    char    *tok;
    uint32_t mask = 0;
    int      i;

    unknown[0] = '\0';
    snprintf(buf, sizeof(buf), "%s", spec);
    for (tok = strtok_r(buf, ", ", &save); tok != NULL; tok = strtok_r(NULL, ", ", &save)) {
        if (strcasecmp(tok, "all") == 0) {
            return ~0u;
        }
        for (i = 0; i < EEP_SUBSYS_COUNT; i++) {
            if (strcasecmp(tok, eep_log_subsys_names[i]) == 0) {
                mask |= 1u << i;
                break;
            }
        }
        if (i == EEP_SUBSYS_COUNT && unknown[0] == '\0') {
            snprintf(unknown, unknown_len, "%s", tok);
        }
    }
    return mask;
}

/* Expand %h (host) and %p (pid) in a log file name, as NCCL_DEBUG_FILE does. */
static void eep_log_expand_path(const char *pattern, char *out, size_t len)
{
    size_t o = 0;

    for (; *pattern != '\0' && o + 1 < len; pattern++) {
        if (pattern[0] == '%' && (pattern[1] == 'h' || pattern[1] == 'p')) {
            int n = pattern[1] == 'h' ? snprintf(out + o, len - o, "%s", eep_log_ctx.host)
                                      : snprintf(out + o, len - o, "%d", (int)getpid());
            o += n > 0 ? (size_t)n : 0;
            pattern++;
        } else {
            out[o++] = *pattern;
        }
    }
    out[o < len ? o : len - 1] = '\0';
}

static void eep_log_configure(void)
{
    eep_core_config_t cfg;
    eep_log_level_t   level;
    char              unknown[64];
    char              path[EEP_KNOB_STRING_MAX];
    uint32_t          mask;

    gethostname(eep_log_ctx.host, sizeof(eep_log_ctx.host) - 1);
    if (eep_config_load(&eep_core_knob_table, &cfg) != EEP_OK) {
        return; /* the loader said what was wrong; keep the defaults */
    }
    if (eep_log_level_parse(cfg.log_level, &level) == 0) {
        eep_log_ctx.level = level;
    } else {
        fprintf(stderr,
                "eep: EEP_LOG_LEVEL '%s' is not one of none, error, warn, info, debug, "
                "trace; using warn\n",
                cfg.log_level);
    }
    mask = eep_log_parse_subsys(cfg.log_subsys, unknown, sizeof(unknown));
    if (unknown[0] != '\0') {
        fprintf(stderr, "eep: EEP_LOG_SUBSYS names unknown subsystem '%s'\n", unknown);
    }
    eep_log_ctx.subsys_mask = mask;
    if (cfg.log_file[0] != '\0') {
        eep_log_expand_path(cfg.log_file, path, sizeof(path));
        eep_log_ctx.file = fopen(path, "a");
        if (eep_log_ctx.file == NULL) {
            fprintf(stderr, "eep: cannot open EEP_LOG_FILE %s: %s; logging to stderr\n", path,
                    strerror(errno));
        } else {
            setvbuf(eep_log_ctx.file, NULL, _IOLBF, 0);
        }
    }
}

static void eep_log_init(void)
{
    int expected = EEP_LOG_UNINIT;

    if (__atomic_load_n(&eep_log_ctx.state, __ATOMIC_ACQUIRE) == EEP_LOG_READY) {
        return;
    }
    if (__atomic_compare_exchange_n(&eep_log_ctx.state, &expected, EEP_LOG_INITING, 0,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        eep_log_configure();
        __atomic_store_n(&eep_log_ctx.state, EEP_LOG_READY, __ATOMIC_RELEASE);
    }
}

int eep_log_enabled(eep_log_level_t level, eep_log_subsys_t subsys)
{
    eep_log_init();
    return level <= eep_log_ctx.level && level != EEP_LOG_LEVEL_NONE &&
           (unsigned)subsys < EEP_SUBSYS_COUNT && (eep_log_ctx.subsys_mask & (1u << subsys));
}

/* The calling thread's last error message (eep_last_error): errors are formatted and kept here
   even when the log level would not print them. */
static _Thread_local char eep_log_last_error[2048]; /* a log line's message, whole */

const char *eep_last_error(void)
{
    return eep_log_last_error;
}

void eep_last_error_clear(void)
{
    eep_log_last_error[0] = '\0';
}

void eep_log_write(eep_log_level_t level, eep_log_subsys_t subsys, const char *file, int line,
                   const char *fmt, ...)
{
    int         saved_errno = errno;
    char        message[2048];
    char        rank[16];
    const char *base = strrchr(file, '/');
    va_list     ap;
    FILE       *out;

    va_start(ap, fmt);
    vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
    if (level == EEP_LOG_LEVEL_ERROR) {
        snprintf(eep_log_last_error, sizeof(eep_log_last_error), "%s", message);
        if (!eep_log_enabled(level, subsys)) {
            errno = saved_errno;
            return;
        }
    }
    if (eep_log_ctx.rank >= 0) {
        snprintf(rank, sizeof(rank), "%d", eep_log_ctx.rank);
    } else {
        snprintf(rank, sizeof(rank), "-");
    }

    pthread_mutex_lock(&eep_log_ctx.lock);
    out = eep_log_ctx.file != NULL ? eep_log_ctx.file : stderr;
    fprintf(out, "%s:%d:%ld [%s] %s %s %s:%d %s\n", eep_log_ctx.host, (int)getpid(),
            (long)syscall(SYS_gettid), rank, eep_log_level_name(level), eep_log_subsys_name(subsys),
            base != NULL ? base + 1 : file, line, message);
    if (eep_log_ctx.hook != NULL) {
        eep_log_ctx.hook(level, subsys, message, eep_log_ctx.hook_arg);
    }
    pthread_mutex_unlock(&eep_log_ctx.lock);
    errno = saved_errno;
}

void eep_log_set_rank(int rank)
{
    eep_log_ctx.rank = rank;
}

void eep_log_set_hook(eep_log_hook_func_t hook, void *arg)
{
    eep_log_init();
    pthread_mutex_lock(&eep_log_ctx.lock);
    eep_log_ctx.hook     = hook;
    eep_log_ctx.hook_arg = arg;
    pthread_mutex_unlock(&eep_log_ctx.lock);
}

void eep_log_set_level(eep_log_level_t level)
{
    eep_log_init();
    eep_log_ctx.level = level;
}
