/*
 * jit_prefetch.c - compiling kernels ahead of need, on a background thread of the eep_jit_t.
 *
 * Why: a kernel compiled per shape (dispatch/combine fix the rank count) must be compiled again
 * when the group shrinks, in the middle of a survivor's recovery, and a compile is seconds.  A
 * caller that knows what it will ask for next (elastic/ep/ep.c: the same kernels for one rank
 * fewer) queues it here; the worker compiles it into the disk cache, so the later
 * eep_jit_compile / eep_jit_get_kernel is a cache hit.  The worker runs at nice 10, one compile
 * at a time, so it takes a core's spare time, not the training loop's, and starts a compile only
 * once the process's foreground compiles have been quiet for EEP_JIT_PREFETCH_QUIET_MS.
 *
 * The queue holds copies of the specs (strings included), at most EEP_JIT_PREFETCH_MAX, without
 * duplicates.  eep_jit_destroy drops what is queued and waits for the compile in progress (it
 * cannot be interrupted: up to a few seconds).
 */
#include "elastic/jit/jit_int.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "util/log.h"

struct eep_jit_prefetch_item {
    eep_jit_prefetch_item_t *next;
    eep_jit_spec_t           spec; /* its strings are owned by the item */
};

static int eep_jit_str_eq(const char *a, const char *b)
{
    return a == b || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

static int eep_jit_spec_eq(const eep_jit_spec_t *a, const eep_jit_spec_t *b)
{
    return eep_jit_str_eq(a->header, b->header) && eep_jit_str_eq(a->function, b->function) &&
           eep_jit_str_eq(a->template_args, b->template_args) &&
           eep_jit_str_eq(a->param_type, b->param_type) &&
           eep_jit_str_eq(a->extra_flags, b->extra_flags) &&
           eep_jit_str_eq(a->defines, b->defines) && a->launch_bounds == b->launch_bounds &&
           a->needs_gin == b->needs_gin && a->backend == b->backend;
}

static void eep_jit_prefetch_item_free(eep_jit_prefetch_item_t *item)
{
    free((char *)item->spec.header);
    free((char *)item->spec.function);
    free((char *)item->spec.template_args);
    free((char *)item->spec.param_type);
    free((char *)item->spec.extra_flags);
    free((char *)item->spec.defines);
    free(item);
}

/* A copy of @p spec (a spec of an older size gets NULL defines), or NULL without memory. */
static eep_jit_prefetch_item_t *eep_jit_prefetch_item_new(const eep_jit_spec_t *spec)
{
    eep_jit_prefetch_item_t *item = calloc(1, sizeof(*item));
    int                      ok   = 1;

    if (item == NULL) {
        return NULL;
    }
#define EEP_JIT_DUP(_field, _src)                                                                  \
    do {                                                                                           \
        if ((_src) != NULL) {                                                                      \
            item->spec._field = strdup(_src);                                                      \
            ok &= item->spec._field != NULL;                                                       \
        }                                                                                          \
    } while (0)
    EEP_JIT_DUP(header, spec->header);
    EEP_JIT_DUP(function, spec->function);
    EEP_JIT_DUP(template_args, spec->template_args);
    EEP_JIT_DUP(param_type, spec->param_type);
    EEP_JIT_DUP(extra_flags, spec->extra_flags);
    EEP_JIT_DUP(defines, eep_jit_spec_defines(spec));
#undef EEP_JIT_DUP
    item->spec.size          = sizeof(item->spec);
    item->spec.launch_bounds = spec->launch_bounds;
    item->spec.needs_gin     = spec->needs_gin;
    item->spec.backend       = spec->backend;
    if (!ok) {
        eep_jit_prefetch_item_free(item);
        return NULL;
    }
    return item;
}

static void *eep_jit_prefetch_main(void *arg)
{
    eep_jit_t *jit = arg;

    /* Below the training loop's host threads: a background compile takes spare time only. */
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10) != 0) {
        eep_debug(EEP_SUBSYS_JIT, "prefetch: could not lower the worker's priority: %m");
    }
    eep_jit_mark_worker_thread();
    pthread_mutex_lock(&jit->prefetch_lock);
    while (!jit->prefetch_stop) {
        eep_jit_prefetch_item_t *item = jit->prefetch_queue;
        eep_jit_info_t           info;
        eep_status_t             status;
        double                   quiet;

        if (item == NULL) {
            pthread_cond_broadcast(&jit->prefetch_idle);
            pthread_cond_wait(&jit->prefetch_wake, &jit->prefetch_lock);
            continue;
        }
        quiet = eep_jit_foreground_quiet_ms();
        if (quiet < EEP_JIT_PREFETCH_QUIET_MS) {
            /* a foreground compile runs or just ended: look again soon (or when stopped) */
            const long long wait_ms = quiet < 0
                                          ? 100
                                          : (long long)(EEP_JIT_PREFETCH_QUIET_MS - quiet) + 1;
            struct timespec until;

            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
            until.tv_sec += (time_t)(wait_ms / 1000) + until.tv_nsec / 1000000000L;
            until.tv_nsec %= 1000000000L;
            pthread_cond_timedwait(&jit->prefetch_wake, &jit->prefetch_lock, &until);
            continue;
        }
        jit->prefetch_queue = item->next;
        jit->prefetch_queued--;
        jit->prefetch_busy = 1;
        pthread_mutex_unlock(&jit->prefetch_lock);

        status = eep_jit_compile(jit, &item->spec, &info);
        if (status == EEP_OK) {
            eep_info(EEP_SUBSYS_JIT, "prefetched %s<%s> %s: %s (%.0f ms)", item->spec.function,
                     item->spec.template_args != NULL ? item->spec.template_args : "",
                     item->spec.defines != NULL ? item->spec.defines : "",
                     info.cache_hit ? "already cached" : "compiled", info.total_ms);
        } else {
            eep_warn(EEP_SUBSYS_JIT,
                     "prefetch of %s<%s> %s failed: %s; it will be compiled "
                     "when it is first used",
                     item->spec.function,
                     item->spec.template_args != NULL ? item->spec.template_args : "",
                     item->spec.defines != NULL ? item->spec.defines : "",
                     eep_status_string(status));
        }
        eep_jit_prefetch_item_free(item);

        pthread_mutex_lock(&jit->prefetch_lock);
        jit->prefetch_busy = 0;
        if (status == EEP_OK) {
            jit->prefetch_done++;
        } else {
            jit->prefetch_failed++;
        }
    }
    pthread_cond_broadcast(&jit->prefetch_idle);
    pthread_mutex_unlock(&jit->prefetch_lock);
    return NULL;
}

eep_status_t eep_jit_prefetch(eep_jit_t *jit, const eep_jit_spec_t *spec)
{
    eep_jit_prefetch_item_t *item, **tail;
    eep_jit_unit_t           unit;
    eep_status_t             status;

    if (jit == NULL || spec == NULL) {
        eep_error(EEP_SUBSYS_JIT, "eep_jit_prefetch: %s is NULL", jit == NULL ? "jit" : "spec");
        return EEP_ERR_INVALID_ARG;
    }
    /* A malformed spec is the caller's error now, not a warning from the worker later. */
    status = eep_jit_unit_build(jit, spec, &unit);
    if (status != EEP_OK) {
        return status;
    }
    eep_jit_unit_cleanup(&unit);
    item = eep_jit_prefetch_item_new(spec);
    if (item == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    pthread_mutex_lock(&jit->prefetch_lock);
    for (tail = &jit->prefetch_queue; *tail != NULL; tail = &(*tail)->next) {
        if (eep_jit_spec_eq(&(*tail)->spec, &item->spec)) {
            pthread_mutex_unlock(&jit->prefetch_lock);
            eep_jit_prefetch_item_free(item);
            return EEP_OK; /* already queued */
        }
    }
    if (jit->prefetch_queued >= EEP_JIT_PREFETCH_MAX) {
        pthread_mutex_unlock(&jit->prefetch_lock);
        eep_jit_prefetch_item_free(item);
        eep_debug(EEP_SUBSYS_JIT, "prefetch queue full (%d): %s<%s> not queued",
                  EEP_JIT_PREFETCH_MAX, spec->function,
                  spec->template_args != NULL ? spec->template_args : "");
        return EEP_ERR_NO_RESOURCE;
    }
    if (!jit->prefetch_started) {
        int rc = pthread_create(&jit->prefetch_thread, NULL, eep_jit_prefetch_main, jit);

        if (rc != 0) {
            pthread_mutex_unlock(&jit->prefetch_lock);
            eep_jit_prefetch_item_free(item);
            eep_error(EEP_SUBSYS_JIT, "eep_jit_prefetch: cannot start the worker thread: %s",
                      strerror(rc));
            return EEP_ERR_NO_RESOURCE;
        }
        jit->prefetch_started = 1;
    }
    *tail = item;
    jit->prefetch_queued++;
    pthread_cond_signal(&jit->prefetch_wake);
    pthread_mutex_unlock(&jit->prefetch_lock);
    return EEP_OK;
}

void eep_jit_prefetch_wait(eep_jit_t *jit, eep_jit_prefetch_stats_t *stats_p)
{
    if (jit == NULL) {
        return;
    }
    pthread_mutex_lock(&jit->prefetch_lock);
    while (jit->prefetch_started && !jit->prefetch_stop &&
           (jit->prefetch_queue != NULL || jit->prefetch_busy)) {
        pthread_cond_wait(&jit->prefetch_idle, &jit->prefetch_lock);
    }
    if (stats_p != NULL) {
        stats_p->done   = jit->prefetch_done;
        stats_p->failed = jit->prefetch_failed;
    }
    pthread_mutex_unlock(&jit->prefetch_lock);
}

void eep_jit_prefetch_init(eep_jit_t *jit)
{
    pthread_mutex_init(&jit->prefetch_lock, NULL);
    pthread_cond_init(&jit->prefetch_wake, NULL);
    pthread_cond_init(&jit->prefetch_idle, NULL);
}

void eep_jit_prefetch_shutdown(eep_jit_t *jit)
{
    eep_jit_prefetch_item_t *item, *next;
    int                      started;

    pthread_mutex_lock(&jit->prefetch_lock);
    jit->prefetch_stop = 1;
    started            = jit->prefetch_started;
    pthread_cond_broadcast(&jit->prefetch_wake);
    pthread_mutex_unlock(&jit->prefetch_lock);
    if (started) {
        pthread_join(jit->prefetch_thread, NULL); /* after its compile in progress, if any */
    }
    for (item = jit->prefetch_queue; item != NULL; item = next) {
        next = item->next;
        eep_jit_prefetch_item_free(item);
    }
    jit->prefetch_queue = NULL;
    pthread_cond_destroy(&jit->prefetch_idle);
    pthread_cond_destroy(&jit->prefetch_wake);
    pthread_mutex_destroy(&jit->prefetch_lock);
}
