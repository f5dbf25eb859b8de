/*
 * etcd_test_util.h - shared pieces of the etcd client tests: one etcd member for a test group
 * (start/stop, skip without etcd), a client on given endpoints, a watch-event collector, a
 * lease-lost recorder and bounded waits.  Header-only (static functions) so each test stays one
 * program; include after cmocka.h.
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
#include "tests/control/support/etcd_server.h"

/*
 * Group setup: start one etcd member into @p etcd and set *up_p.  Without an etcd binary, print
 * the skip reason and return 0 with *up_p 0 (the tests then skip, see NEED_ETCD).
 * @return 0; -1 when etcd is installed but could not be started.
 */
static inline int etcd_test_group_start(eep_test_etcd_t *etcd, int *up_p)
{
    if (eep_test_etcd_binary() == NULL) {
        printf("skip: no etcd binary (install etcd-server)\n");
        return 0;
    }
    *up_p = eep_test_etcd_start(etcd, 1) == 0;
    return *up_p ? 0 : -1;
}

/* Group teardown: stop the member started by etcd_test_group_start(), if it is up. */
static inline void etcd_test_group_stop(eep_test_etcd_t *etcd, int up)
{
    if (up) {
        eep_test_etcd_destroy(etcd);
    }
}

/* In a test: skip, with the reason, when the group has no etcd (@p up from the group start). */
#define NEED_ETCD(up)                                                                              \
    do {                                                                                           \
        if (!(up)) {                                                                               \
            printf("skip: no etcd binary (install etcd-server)\n");                                \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

/* A client on @p endpoints with the deadline @p timeout_ms and 1 s keepalive pings. */
static inline eep_etcd_t *connect_to(const char *endpoints, int timeout_ms)
{
    eep_etcd_params_t params;
    eep_etcd_t       *client = NULL;

    memset(&params, 0, sizeof(params));
    params.size         = sizeof(params);
    params.endpoints    = endpoints;
    params.timeout_ms   = timeout_ms;
    params.keepalive_ms = 1000;
    assert_int_equal(eep_etcd_create(&params, &client), EEP_OK);
    assert_non_null(client);
    return client;
}

#define COLLECT_MAX 128

typedef struct {
    pthread_mutex_t mu;
    int             n;
    struct {
        eep_etcd_event_type_t type;
        char                  key[64];
        char                  value[64];
        int64_t               mod_revision;
        int64_t               at_ms; /* test_now_ms() when it arrived */
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
        snprintf(c->ev[c->n].value, sizeof(c->ev[c->n].value), "%.*s", (int)events[i].kv.value_len,
                 (const char *)events[i].kv.value);
        c->ev[c->n].mod_revision = events[i].kv.mod_revision;
        c->ev[c->n].at_ms        = test_now_ms();
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

/* Print every collected event (type, key, value, mod revision): a failing count says why. */
static inline void collector_dump(collector_t *c, const char *when)
{
    int i;

    pthread_mutex_lock(&c->mu);
    printf("%d event(s) %s:\n", c->n, when);
    for (i = 0; i < c->n; i++) {
        printf("  [%d] %s %s=%s mod_revision %lld, arrived at %lld ms\n", i,
               c->ev[i].type == EEP_ETCD_EVENT_PUT ? "put" : "delete", c->ev[i].key, c->ev[i].value,
               (long long)c->ev[i].mod_revision, (long long)c->ev[i].at_ms);
    }
    pthread_mutex_unlock(&c->mu);
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
