/*
 * etcd_test_util.h - shared pieces of the etcd client tests: a watch-event collector, a lease-lost
 * recorder and bounded waits.  Header-only (static functions) so each test stays one program.
 */
#ifndef EEP_ETCD_TEST_UTIL_H
#define EEP_ETCD_TEST_UTIL_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "control/etcd/etcd.h"

#define COLLECT_MAX 128

typedef struct {
    pthread_mutex_t mu;
    int             n;
    struct {
        eep_etcd_event_type_t type;
        char                  key[64];
        char                  value[64];
        int64_t               mod_revision;
    } ev[COLLECT_MAX];
    int          ended;
    eep_status_t end_status;
} collector_t;

static inline int64_t test_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void collector_init(collector_t *c)
{
    memset(c, 0, sizeof(*c));
    pthread_mutex_init(&c->mu, NULL);
}

static inline void collector_func(const eep_etcd_event_t *events, size_t count, int64_t revision,
                                  eep_status_t status, void *arg)
{
    collector_t *c = arg;
    size_t       i;

    (void)revision;
    pthread_mutex_lock(&c->mu);
    if (events == NULL) {
        c->ended      = 1;
        c->end_status = status;
    }
    for (i = 0; i < count && c->n < COLLECT_MAX; i++) {
        c->ev[c->n].type = events[i].type;
        snprintf(c->ev[c->n].key, sizeof(c->ev[c->n].key), "%.*s", (int)events[i].kv.key_len,
                 (const char *)events[i].kv.key);
        snprintf(c->ev[c->n].value, sizeof(c->ev[c->n].value), "%.*s",
                 (int)events[i].kv.value_len, (const char *)events[i].kv.value);
        c->ev[c->n].mod_revision = events[i].kv.mod_revision;
        c->n++;
    }
    pthread_mutex_unlock(&c->mu);
}

static inline int collector_count(collector_t *c)
{
    int n;

    pthread_mutex_lock(&c->mu);
    n = c->n;
    pthread_mutex_unlock(&c->mu);
    return n;
}

/* Wait until the collector holds at least @p n events; @return the count. */
static inline int collector_wait(collector_t *c, int n, int timeout_ms)
{
    int64_t deadline = test_now_ms() + timeout_ms;

    while (collector_count(c) < n && test_now_ms() < deadline) {
        usleep(10 * 1000);
    }
    return collector_count(c);
}

typedef struct {
    pthread_mutex_t mu;
    int             calls;
    int64_t         lease;
    eep_status_t    status;
    int64_t         at_ms;
} lost_t;

static inline void lost_init(lost_t *l)
{
    memset(l, 0, sizeof(*l));
    pthread_mutex_init(&l->mu, NULL);
}

static inline void lost_func(int64_t lease, eep_status_t status, void *arg)
{
    lost_t *l = arg;

    pthread_mutex_lock(&l->mu);
    l->calls++;
    l->lease  = lease;
    l->status = status;
    l->at_ms  = test_now_ms();
    pthread_mutex_unlock(&l->mu);
}

static inline int lost_calls(lost_t *l)
{
    int n;

    pthread_mutex_lock(&l->mu);
    n = l->calls;
    pthread_mutex_unlock(&l->mu);
    return n;
}

static inline int lost_wait(lost_t *l, int timeout_ms)
{
    int64_t deadline = test_now_ms() + timeout_ms;

    while (lost_calls(l) == 0 && test_now_ms() < deadline) {
        usleep(10 * 1000);
    }
    return lost_calls(l);
}

#endif
