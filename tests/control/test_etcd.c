/*
 * test_etcd.c - the etcd client against one real etcd: KV, txn, leases, watches, a dead
 * endpoint, bad arguments, and a watch and a keepalive living through an etcd restart.
 *
 * One etcd member is started for the whole group (free ports, temp data dir, killed at the end).
 * Without an etcd binary every test is skipped with the reason.  Keys are under /t/<test>/.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "control/etcd/etcd.h"
#include "util/log.h"
#include "tests/control/etcd_test_util.h"
#include "tests/control/support/etcd_server.h"

static eep_test_etcd_t g_etcd;
static int             g_up;

static int group_setup(void **state)
{
    (void)state;
    if (etcd_test_group_start(&g_etcd, &g_up) != 0) {
        printf("could not start etcd\n");
        return -1;
    }
    if (g_up) {
        printf("etcd at %s (dir %s)\n", g_etcd.endpoints, g_etcd.dir);
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    etcd_test_group_stop(&g_etcd, g_up);
    return 0;
}

static void put_str(eep_etcd_t *client, const char *key, const char *value, int64_t lease)
{
    assert_int_equal(eep_etcd_put(client, key, (const uint8_t *)value, strlen(value), lease, NULL),
                     EEP_OK);
}

/* Bad arguments are refused before anything is sent, naming the argument. */
static void test_bad_arguments(void **state)
{
    eep_etcd_params_t params;
    eep_etcd_t       *client = NULL;
    eep_etcd_range_t  range;
    eep_etcd_watch_t *watch = NULL;
    eep_etcd_cmp_t    cmp   = { .key = NULL };
    eep_etcd_op_t     op    = { .type = EEP_ETCD_OP_PUT, .key = "/t/x" };
    int64_t           lease;
    uint8_t           v = 1;

    (void)state;
    memset(&params, 0, sizeof(params));
    params.endpoints = "127.0.0.1:1";
    assert_int_equal(eep_etcd_create(&params, &client), EEP_ERR_INVALID_ARG); /* size 0 */
    params.size = sizeof(params);
    assert_int_equal(eep_etcd_create(&params, NULL), EEP_ERR_INVALID_ARG);
    params.endpoints = " , ";
    assert_int_equal(eep_etcd_create(&params, &client), EEP_ERR_INVALID_ARG);
    assert_null(client);

    client = connect_to("127.0.0.1:1", 500);
    assert_int_equal(eep_etcd_range(client, NULL, 0, &range), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_etcd_range(client, "", 0, &range), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_etcd_range(client, "/t/x", 0, NULL), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_etcd_range(NULL, "/t/x", 0, &range), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_etcd_put(client, NULL, &v, 1, 0, NULL), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_etcd_put(client, "/t/x", NULL, 1, 0, NULL), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_etcd_put(client, "/t/x", &v, 1, -1, NULL), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_etcd_delete(client, NULL, 1, NULL), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_etcd_txn(client, NULL, 1, NULL, 0, NULL, 0, NULL, NULL),
                     EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_etcd_txn(client, &cmp, 1, NULL, 0, NULL, 0, NULL, NULL),
                     EEP_ERR_INVALID_ARG); /* compare key NULL */
    op.type = (eep_etcd_op_type_t)42;
    assert_int_equal(eep_etcd_txn(client, NULL, 0, &op, 1, NULL, 0, NULL, NULL),
                     EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_etcd_lease_grant(client, 0, &lease, NULL), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_etcd_lease_grant(client, 5, NULL, NULL), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_etcd_lease_keepalive(client, 0, NULL, NULL), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_etcd_lease_revoke(client, 0), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_etcd_watch_create(client, "/t/x", 0, 0, NULL, NULL, &watch),
                     EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_etcd_watch_create(client, NULL, 0, 0, collector_func, NULL, &watch),
                     EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_etcd_watch_create(client, "/t/x", 0, -1, collector_func, NULL, &watch),
                     EEP_ERR_INVALID_ARG);
    assert_null(watch);
    eep_etcd_watch_cancel(NULL);
    eep_etcd_destroy(client);
    eep_etcd_destroy(NULL);
}

/* With no params every setting comes from the EEP_ETCD_* knobs; a bad knob value is refused. */
static void test_settings_from_knobs(void **state)
{
    eep_etcd_t      *client = NULL;
    eep_etcd_range_t r;

    (void)state;
    NEED_ETCD(g_up);
    setenv("EEP_ETCD_ENDPOINTS", g_etcd.endpoints, 1);
    setenv("EEP_ETCD_TIMEOUT_MS", "2000", 1);
    assert_int_equal(eep_etcd_create(NULL, &client), EEP_OK);
    assert_int_equal(eep_etcd_range(client, "/t/knobs", 0, &r), EEP_OK);
    assert_int_equal(r.count, 0);
    eep_etcd_destroy(client);
    client = NULL;
    setenv("EEP_ETCD_TIMEOUT_MS", "soon", 1);
    assert_int_equal(eep_etcd_create(NULL, &client), EEP_ERR_INVALID_ARG);
    assert_null(client);
    unsetenv("EEP_ETCD_TIMEOUT_MS");
    unsetenv("EEP_ETCD_ENDPOINTS");
}

static void test_put_range_delete_prefix(void **state)
{
    eep_etcd_t      *client;
    eep_etcd_range_t r;
    eep_etcd_stats_t before, after;
    int64_t          rev1, rev2, deleted;

    (void)state;
    NEED_ETCD(g_up);
    client = connect_to(g_etcd.endpoints, 3000);
    assert_int_equal(eep_etcd_put(client, "/t/kv/a", (const uint8_t *)"1", 1, 0, &rev1), EEP_OK);
    assert_int_equal(eep_etcd_put(client, "/t/kv/b", (const uint8_t *)"22", 2, 0, &rev2), EEP_OK);
    assert_true(rev2 > rev1);
    put_str(client, "/t/kvx", "outside", 0);

    eep_etcd_stats(client, &before);
    assert_int_equal(eep_etcd_range(client, "/t/kv/a", 0, &r), EEP_OK);
    eep_etcd_stats(client, &after);
    assert_int_equal(after.round_trips - before.round_trips, 1);
    assert_int_equal(after.ranges - before.ranges, 1);
    assert_int_equal(r.count, 1);
    assert_int_equal(r.kvs[0].key_len, 7);
    assert_memory_equal(r.kvs[0].key, "/t/kv/a", 7);
    assert_int_equal(r.kvs[0].value_len, 1);
    assert_string_equal((const char *)r.kvs[0].value, "1"); /* NUL-terminated */
    assert_int_equal(r.kvs[0].mod_revision, rev1);
    assert_int_equal(r.kvs[0].version, 1);
    assert_true(r.revision >= rev2);
    eep_etcd_range_free(&r);

    assert_int_equal(eep_etcd_range(client, "/t/kv/", 1, &r), EEP_OK);
    assert_int_equal(r.count, 2);
    assert_string_equal((const char *)r.kvs[0].key, "/t/kv/a");
    assert_string_equal((const char *)r.kvs[1].key, "/t/kv/b");
    assert_string_equal((const char *)r.kvs[1].value, "22");
    eep_etcd_range_free(&r);

    assert_int_equal(eep_etcd_range(client, "/t/kv/missing", 0, &r), EEP_OK);
    assert_int_equal(r.count, 0);
    assert_null(r.kvs);
    eep_etcd_range_free(&r);

    assert_int_equal(eep_etcd_delete(client, "/t/kv/", 1, &deleted), EEP_OK);
    assert_int_equal(deleted, 2);
    assert_int_equal(eep_etcd_range(client, "/t/kv/", 1, &r), EEP_OK);
    assert_int_equal(r.count, 0);
    eep_etcd_range_free(&r);
    assert_int_equal(eep_etcd_range(client, "/t/kvx", 0, &r), EEP_OK);
    assert_int_equal(r.count, 1); /* the prefix did not reach past "/t/kv/" */
    eep_etcd_range_free(&r);
    assert_int_equal(eep_etcd_delete(client, "/t/kvx", 0, &deleted), EEP_OK);
    assert_int_equal(deleted, 1);
    eep_etcd_destroy(client);
}

static void test_txn_compare_and_swap(void **state)
{
    eep_etcd_t      *client;
    eep_etcd_range_t r;
    int64_t          rev, rev2;
    int              succeeded = -1;

    (void)state;
    NEED_ETCD(g_up);
    client = connect_to(g_etcd.endpoints, 3000);
    assert_int_equal(eep_etcd_put(client, "/t/txn/k", (const uint8_t *)"v1", 2, 0, &rev), EEP_OK);
    {
        eep_etcd_cmp_t cmp = {
            .key = "/t/txn/k", .target = EEP_ETCD_CMP_MOD, .op = EEP_ETCD_EQUAL, .number = rev
        };
        eep_etcd_op_t ok_op  = { .type      = EEP_ETCD_OP_PUT,
                                 .key       = "/t/txn/k",
                                 .value     = (const uint8_t *)"v2",
                                 .value_len = 2 };
        eep_etcd_op_t bad_op = { .type      = EEP_ETCD_OP_PUT,
                                 .key       = "/t/txn/lost",
                                 .value     = (const uint8_t *)"x",
                                 .value_len = 1 };

        /* The compare holds: the success branch runs. */
        assert_int_equal(eep_etcd_txn(client, &cmp, 1, &ok_op, 1, &bad_op, 1, &succeeded, &rev2),
                         EEP_OK);
        assert_int_equal(succeeded, 1);
        assert_true(rev2 > rev);
        /* Same compare again: the revision moved, so the failure branch runs. */
        succeeded = -1;
        assert_int_equal(eep_etcd_txn(client, &cmp, 1, &ok_op, 1, &bad_op, 1, &succeeded, NULL),
                         EEP_OK);
        assert_int_equal(succeeded, 0);
    }
    assert_int_equal(eep_etcd_range(client, "/t/txn/k", 0, &r), EEP_OK);
    assert_int_equal(r.count, 1);
    assert_string_equal((const char *)r.kvs[0].value, "v2");
    eep_etcd_range_free(&r);
    assert_int_equal(eep_etcd_range(client, "/t/txn/lost", 0, &r), EEP_OK);
    assert_int_equal(r.count, 1);
    eep_etcd_range_free(&r);
    {
        /* Create-if-absent (version == 0), value compare, delete-by-prefix op. */
        eep_etcd_cmp_t absent = {
            .key = "/t/txn/new", .target = EEP_ETCD_CMP_VERSION, .op = EEP_ETCD_EQUAL, .number = 0
        };
        eep_etcd_cmp_t value = { .key       = "/t/txn/k",
                                 .target    = EEP_ETCD_CMP_VALUE,
                                 .op        = EEP_ETCD_EQUAL,
                                 .value     = (const uint8_t *)"v2",
                                 .value_len = 2 };
        eep_etcd_cmp_t both[2];
        eep_etcd_op_t  create = { .type      = EEP_ETCD_OP_PUT,
                                  .key       = "/t/txn/new",
                                  .value     = (const uint8_t *)"n",
                                  .value_len = 1 };
        eep_etcd_op_t  wipe   = { .type = EEP_ETCD_OP_DELETE, .key = "/t/txn/", .prefix = 1 };

        assert_int_equal(eep_etcd_txn(client, &absent, 1, &create, 1, NULL, 0, &succeeded, NULL),
                         EEP_OK);
        assert_int_equal(succeeded, 1);
        assert_int_equal(eep_etcd_txn(client, &absent, 1, &create, 1, NULL, 0, &succeeded, NULL),
                         EEP_OK);
        assert_int_equal(succeeded, 0);
        both[0]    = value;
        both[1]    = absent;
        both[1].op = EEP_ETCD_NOT_EQUAL;
        assert_int_equal(eep_etcd_txn(client, both, 2, &wipe, 1, NULL, 0, &succeeded, NULL),
                         EEP_OK);
        assert_int_equal(succeeded, 1);
    }
    assert_int_equal(eep_etcd_range(client, "/t/txn/", 1, &r), EEP_OK);
    assert_int_equal(r.count, 0);
    eep_etcd_range_free(&r);
    eep_etcd_destroy(client);
}

static void test_lease_keepalive_and_revoke(void **state)
{
    eep_etcd_t      *client;
    eep_etcd_range_t r;
    eep_etcd_stats_t st;
    lost_t           lost;
    int64_t          lease = 0, ttl = 0, start;

    (void)state;
    NEED_ETCD(g_up);
    lost_init(&lost);
    client = connect_to(g_etcd.endpoints, 3000);
    assert_int_equal(eep_etcd_lease_grant(client, 1, &lease, &ttl), EEP_OK);
    assert_true(lease != 0);
    assert_true(ttl >= 1 && ttl <= 3); /* etcd may raise it to its minimum */
    put_str(client, "/t/lease/k", "held", lease);
    assert_int_equal(eep_etcd_lease_keepalive(client, lease, lost_func, &lost), EEP_OK);
    assert_int_equal(eep_etcd_lease_keepalive(client, lease, lost_func, &lost), EEP_ERR_EXISTS);

    /* Held past twice the TTL by the keepalive alone. */
    start = test_now_ms();
    while (test_now_ms() - start < 2 * ttl * 1000 + 500) {
        usleep(100 * 1000);
    }
    assert_int_equal(eep_etcd_range(client, "/t/lease/k", 0, &r), EEP_OK);
    assert_int_equal(r.count, 1);
    assert_int_equal(r.kvs[0].lease, lease);
    eep_etcd_range_free(&r);
    eep_etcd_stats(client, &st);
    assert_true(st.keepalives_sent >= 4);
    assert_true(st.keepalive_replies >= 4);
    assert_int_equal(lost_calls(&lost), 0);

    /* Revoke: the key goes, and no lost callback (we let go of it ourselves). */
    assert_int_equal(eep_etcd_lease_revoke(client, lease), EEP_OK);
    assert_int_equal(eep_etcd_range(client, "/t/lease/k", 0, &r), EEP_OK);
    assert_int_equal(r.count, 0);
    eep_etcd_range_free(&r);
    usleep(300 * 1000);
    assert_int_equal(lost_calls(&lost), 0);
    /* A lease etcd no longer has cannot be kept alive. */
    assert_int_equal(eep_etcd_lease_keepalive(client, lease, lost_func, &lost), EEP_ERR_LEASE_LOST);
    eep_etcd_destroy(client);
}

/* Another client revokes the lease: the keepalive hears TTL <= 0 and reports it lost. */
static void test_lease_lost_when_revoked_elsewhere(void **state)
{
    eep_etcd_t *a, *b;
    lost_t      lost;
    int64_t     lease = 0, ttl = 0;

    (void)state;
    NEED_ETCD(g_up);
    lost_init(&lost);
    a = connect_to(g_etcd.endpoints, 3000);
    b = connect_to(g_etcd.endpoints, 3000);
    assert_int_equal(eep_etcd_lease_grant(a, 2, &lease, &ttl), EEP_OK);
    assert_int_equal(eep_etcd_lease_keepalive(a, lease, lost_func, &lost), EEP_OK);
    assert_int_equal(eep_etcd_lease_revoke(b, lease), EEP_OK);
    assert_int_equal(lost_wait(&lost, (int)ttl * 1000 + 1000), 1);
    assert_int_equal(lost.lease, lease);
    assert_int_equal(lost.status, EEP_ERR_LEASE_LOST);
    usleep(200 * 1000);
    assert_int_equal(lost_calls(&lost), 1); /* once */
    eep_etcd_destroy(b);
    eep_etcd_destroy(a);
}

static void test_watch_puts_and_deletes_in_order(void **state)
{
    eep_etcd_t       *client;
    eep_etcd_watch_t *watch = NULL, *replay = NULL;
    collector_t       c, h;
    int64_t           first;
    int               i;

    (void)state;
    NEED_ETCD(g_up);
    collector_init(&c);
    collector_init(&h);
    client = connect_to(g_etcd.endpoints, 3000);
    put_str(client, "/t/w/before", "old", 0); /* before the watch: not delivered */
    assert_int_equal(eep_etcd_watch_create(client, "/t/w/", 1, 0, collector_func, &c, &watch),
                     EEP_OK);
    assert_int_equal(eep_etcd_put(client, "/t/w/a", (const uint8_t *)"1", 1, 0, &first), EEP_OK);
    put_str(client, "/t/w/b", "2", 0);
    assert_int_equal(eep_etcd_delete(client, "/t/w/a", 0, NULL), EEP_OK);
    put_str(client, "/t/w/a", "3", 0);
    put_str(client, "/t/other", "x", 0); /* outside the prefix */
    assert_int_equal(collector_wait(&c, 4, 3000), 4);
    usleep(200 * 1000);
    assert_int_equal(collector_count(&c), 4);
    assert_int_equal(c.ev[0].type, EEP_ETCD_EVENT_PUT);
    assert_string_equal(c.ev[0].key, "/t/w/a");
    assert_string_equal(c.ev[0].value, "1");
    assert_int_equal(c.ev[0].mod_revision, first);
    assert_string_equal(c.ev[1].key, "/t/w/b");
    assert_int_equal(c.ev[2].type, EEP_ETCD_EVENT_DELETE);
    assert_string_equal(c.ev[2].key, "/t/w/a");
    assert_int_equal(c.ev[3].type, EEP_ETCD_EVENT_PUT);
    assert_string_equal(c.ev[3].value, "3");
    for (i = 1; i < 4; i++) {
        assert_true(c.ev[i].mod_revision > c.ev[i - 1].mod_revision);
    }
    /* A watch from a past revision replays the same history. */
    assert_int_equal(eep_etcd_watch_create(client, "/t/w/", 1, first, collector_func, &h, &replay),
                     EEP_OK);
    assert_int_equal(collector_wait(&h, 4, 3000), 4);
    for (i = 0; i < 4; i++) {
        assert_int_equal(h.ev[i].mod_revision, c.ev[i].mod_revision);
        assert_int_equal(h.ev[i].type, c.ev[i].type);
    }
    eep_etcd_watch_cancel(replay);
    eep_etcd_watch_cancel(watch);
    put_str(client, "/t/w/after", "cancelled", 0);
    usleep(200 * 1000);
    assert_int_equal(collector_count(&c), 4); /* nothing after cancel */
    assert_int_equal(eep_etcd_delete(client, "/t/w/", 1, NULL), EEP_OK);
    eep_etcd_destroy(client);
}

/* A watch from a compacted revision is refused; one from the compaction point works. */
static void test_watch_from_compacted_revision(void **state)
{
    eep_etcd_t       *client;
    eep_etcd_watch_t *watch = NULL;
    collector_t       c, old;
    char              cmd[512];
    int64_t           rev1, rev3;
    eep_status_t      status;

    (void)state;
    NEED_ETCD(g_up);
    if (access("/usr/bin/etcdctl", X_OK) != 0) {
        printf("skip: no etcdctl to compact with (install etcd-client)\n");
        skip();
    }
    collector_init(&c);
    collector_init(&old);
    client = connect_to(g_etcd.endpoints, 3000);
    assert_int_equal(eep_etcd_put(client, "/t/cmp/k", (const uint8_t *)"1", 1, 0, &rev1), EEP_OK);
    put_str(client, "/t/cmp/k", "2", 0);
    assert_int_equal(eep_etcd_put(client, "/t/cmp/k", (const uint8_t *)"3", 1, 0, &rev3), EEP_OK);
    snprintf(cmd, sizeof(cmd),
             "ETCDCTL_API=3 /usr/bin/etcdctl --endpoints=%s compact %lld "
             ">/dev/null",
             g_etcd.endpoints, (long long)rev3);
    assert_int_equal(system(cmd), 0);
    /* etcd acknowledges the watch before it finds the revision compacted, so the error comes
     * either from the create or, right after, through the callback. */
    status = eep_etcd_watch_create(client, "/t/cmp/k", 0, rev1, collector_func, &old, &watch);
    if (status == EEP_OK) {
        int64_t deadline = test_now_ms() + 3000;

        while (!old.ended && test_now_ms() < deadline) {
            usleep(10 * 1000);
        }
        assert_int_equal(old.ended, 1);
        assert_int_equal(old.end_status, EEP_ERR_ETCD);
        assert_int_equal(collector_count(&old), 0);
        eep_etcd_watch_cancel(watch);
        watch = NULL;
    } else {
        assert_int_equal(status, EEP_ERR_ETCD);
        assert_null(watch);
    }
    assert_int_equal(eep_etcd_watch_create(client, "/t/cmp/k", 0, rev3, collector_func, &c, &watch),
                     EEP_OK);
    assert_int_equal(collector_wait(&c, 1, 3000), 1);
    assert_string_equal(c.ev[0].value, "3");
    eep_etcd_watch_cancel(watch);
    assert_int_equal(eep_etcd_delete(client, "/t/cmp/k", 0, NULL), EEP_OK);
    eep_etcd_destroy(client);
}

/* Nobody listens on the endpoint: calls fail within their deadline, as "unavailable". */
static void test_dead_endpoint_fails_within_deadline(void **state)
{
    char              ep[64];
    eep_etcd_t       *client;
    eep_etcd_watch_t *watch = NULL;
    eep_etcd_range_t  r;
    collector_t       c;
    int64_t           start, took;

    (void)state;
    collector_init(&c);
    snprintf(ep, sizeof(ep), "127.0.0.1:%d", eep_test_free_port());
    client = connect_to(ep, 800);
    start  = test_now_ms();
    assert_int_equal(eep_etcd_put(client, "/t/dead", (const uint8_t *)"x", 1, 0, NULL),
                     EEP_ERR_CONTROL_UNAVAILABLE);
    took = test_now_ms() - start;
    printf("put to a dead endpoint failed after %lld ms (deadline 800)\n", (long long)took);
    assert_true(took <= 800 + 300);
    start = test_now_ms();
    assert_int_equal(eep_etcd_range(client, "/t/dead", 0, &r), EEP_ERR_CONTROL_UNAVAILABLE);
    assert_true(test_now_ms() - start <= 800 + 300);
    start = test_now_ms();
    assert_int_equal(eep_etcd_watch_create(client, "/t/dead", 0, 0, collector_func, &c, &watch),
                     EEP_ERR_CONTROL_UNAVAILABLE);
    assert_true(test_now_ms() - start <= 800 + 300);
    assert_null(watch);
    eep_etcd_destroy(client);
}

/*
 * Kill etcd: the lease is unconfirmed (its deadline passed) and lost no later than one TTL after
 * its last answered request (no grace: no member even takes a connection, so none is electing
 * a leader that would keep the lease); restart etcd on the same data dir and port: the watch
 * resumes and every event written after the restart arrives exactly once.
 */
static void test_watch_and_keepalive_survive_restart(void **state)
{
    eep_etcd_t       *client;
    eep_etcd_watch_t *watch = NULL;
    eep_etcd_stats_t  st;
    collector_t       c;
    lost_t            lost;
    int64_t           lease, ttl, killed_at, deadline;
    int               i;

    (void)state;
    NEED_ETCD(g_up);
    collector_init(&c);
    lost_init(&lost);
    client = connect_to(g_etcd.endpoints, 5000);
    assert_int_equal(eep_etcd_watch_create(client, "/t/r/", 1, 0, collector_func, &c, &watch),
                     EEP_OK);
    put_str(client, "/t/r/1", "before", 0);
    put_str(client, "/t/r/2", "before", 0);
    assert_int_equal(collector_wait(&c, 2, 3000), 2);
    assert_int_equal(eep_etcd_lease_grant(client, 2, &lease, &ttl), EEP_OK);
    assert_int_equal(eep_etcd_lease_keepalive(client, lease, lost_func, &lost), EEP_OK);

    eep_test_etcd_kill(&g_etcd, 0);
    killed_at = test_now_ms();
    assert_int_equal(eep_etcd_lease_deadline(client, lease, &deadline), EEP_OK);
    assert_true(deadline <= killed_at + ttl * 1000);
    /* The keepalive gets no reply: lost no later than one TTL after its last answered request. */
    assert_int_equal(lost_wait(&lost, (int)ttl * 1000 + 1500), 1);
    printf("lease lost reported %lld ms after etcd died (TTL %lld s, unconfirmed after %lld ms)\n",
           (long long)(lost.at_ms - killed_at), (long long)ttl, (long long)(deadline - killed_at));
    assert_true(lost.at_ms - killed_at <= ttl * 1000 + 500);
    assert_int_equal(lost.status, EEP_ERR_LEASE_LOST);

    assert_int_equal(eep_test_etcd_restart(&g_etcd, 0), 0);
    for (i = 3; i <= 5; i++) {
        char key[32];

        snprintf(key, sizeof(key), "/t/r/%d", i);
        put_str(client, key, "after", 0); /* retried within the deadline while etcd comes up */
    }
    assert_int_equal(collector_wait(&c, 5, 5000), 5);
    usleep(300 * 1000);
    assert_int_equal(collector_count(&c), 5); /* none duplicated */
    for (i = 0; i < 5; i++) {
        char key[32];

        snprintf(key, sizeof(key), "/t/r/%d", i + 1);
        assert_string_equal(c.ev[i].key, key);
    }
    assert_int_equal(c.ended, 0);
    eep_etcd_stats(client, &st);
    printf("watch streams opened %llu, round trips %llu, failovers %llu\n",
           (unsigned long long)st.watch_streams, (unsigned long long)st.round_trips,
           (unsigned long long)st.failovers);
    assert_true(st.watch_streams >= 2);
    assert_int_equal(st.watch_events, 5);
    eep_etcd_watch_cancel(watch);
    assert_int_equal(eep_etcd_delete(client, "/t/r/", 1, NULL), EEP_OK);
    eep_etcd_destroy(client);
}

/* Destroying a client ends its live watches through their callbacks. */
static void test_destroy_ends_watches(void **state)
{
    eep_etcd_t       *client;
    eep_etcd_watch_t *watch = NULL;
    collector_t       c;

    (void)state;
    NEED_ETCD(g_up);
    collector_init(&c);
    client = connect_to(g_etcd.endpoints, 3000);
    assert_int_equal(eep_etcd_watch_create(client, "/t/d/", 1, 0, collector_func, &c, &watch),
                     EEP_OK);
    eep_etcd_destroy(client);
    assert_int_equal(c.ended, 1);
    assert_int_equal(c.end_status, EEP_ERR_ABORTED);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_settings_from_knobs),
        cmocka_unit_test(test_put_range_delete_prefix),
        cmocka_unit_test(test_txn_compare_and_swap),
        cmocka_unit_test(test_lease_keepalive_and_revoke),
        cmocka_unit_test(test_lease_lost_when_revoked_elsewhere),
        cmocka_unit_test(test_watch_puts_and_deletes_in_order),
        cmocka_unit_test(test_watch_from_compacted_revision),
        cmocka_unit_test(test_dead_endpoint_fails_within_deadline),
        cmocka_unit_test(test_destroy_ends_watches),
        cmocka_unit_test(test_watch_and_keepalive_survive_restart),
    };

    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
