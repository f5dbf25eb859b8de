/* gin/gin_log.c - the plugin's log, clock, timeout and process nonce.  Messages go through the
 * logger NCCL passed to init (so they land in NCCL_DEBUG's output with NCCL's prefix); before
 * init, or in our own tests, warnings go to stderr and info/trace only when EEP_GIN_DEBUG is set.
 * The one place the plugin reads its environment (EEP_GIN_TIMEOUT_MS, EEP_GIN_DEBUG, EEP_GIN_TRACE,
 * EEP_GIN_CUDA_CONTEXT). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "gin/gin_int.h"

static eep_nccl_logger_t eep_gin_logger;

void eep_gin_log_set(eep_nccl_logger_t logger)
{
    if (logger != NULL) {
        __atomic_store_n(&eep_gin_logger, logger, __ATOMIC_RELEASE);
    }
}

void eep_gin_log(int level, const char *file, int line, const char *fmt, ...)
{
    static int        debug  = -1;
    eep_nccl_logger_t logger = __atomic_load_n(&eep_gin_logger, __ATOMIC_ACQUIRE);
    char              msg[512];
    va_list           ap;

    if (debug < 0) {
        debug = getenv("EEP_GIN_DEBUG") != NULL;
    }
    if (logger == NULL && level > EEP_NCCL_LOG_WARN && !debug) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (logger != NULL) {
        logger(level, EEP_NCCL_SUBSYS_NET, file, line, "eep_gin: %s", msg);
    } else {
        fprintf(stderr, "eep_gin %d %s:%d %s%s\n", (int)getpid(), file, line,
                level == EEP_NCCL_LOG_WARN ? "WARN " : "", msg);
    }
}

int eep_gin_tracing(void)
{
    static int trace = -1;

    if (trace < 0) {
        trace = getenv("EEP_GIN_TRACE") != NULL;
    }
    return trace;
}

int eep_gin_own_context(void)
{
    static int  own = -1;
    const char *env;

    if (own < 0) {
        env = getenv("EEP_GIN_CUDA_CONTEXT");
        own = env == NULL || strcmp(env, "caller") != 0;
    }
    return own;
}

int64_t eep_gin_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t eep_gin_timeout_ms(void)
{
    static int64_t timeout = -1;
    const char    *env;

    if (timeout < 0) {
        env     = getenv("EEP_GIN_TIMEOUT_MS");
        timeout = (env != NULL && atoll(env) > 0) ? atoll(env) : 60000;
    }
    return timeout;
}

uint64_t eep_gin_process_nonce(void)
{
    static uint64_t nonce;
    static pid_t    owner;
    struct timespec ts;

    /* Drawn again in a forked child: a child must not share its parent's identity. */
    if (owner != getpid()) {
        if (getrandom(&nonce, sizeof(nonce), 0) != (ssize_t)sizeof(nonce)) {
            clock_gettime(CLOCK_MONOTONIC, &ts);
            nonce = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ (uint64_t)getpid();
        }
        owner = getpid();
    }
    return nonce;
}
