/*
 * test_etcd_cluster.c - endpoint failover against a real 3-member etcd cluster.
 *
 * The client lists the three members, first one first.  Killing that member must not interrupt
 * anything: unary calls move to the next endpoint within their deadline, a watch streaming from
 * the dead member reconnects through the next one and misses no event, a keepalive holds its
 * lease, and a new client whose first endpoint is the dead one still works.  A hung (SIGSTOPped)
 * first member is noticed the same way: unary calls by their per-endpoint share of the deadline,
 * streams by the client's keepalive pings.  And the test server's own start: ports distinct and
 * never handed out twice, and a start whose port is taken before etcd binds it is retried.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "control/etcd/etcd.h"
#include "tests/control/etcd_test_util.h"
#include "tests/control/support/etcd_server.h"

static void test_failover_when_first_member_dies(void **state)
{
    eep_test_etcd_t   etcd;
    eep_etcd_t       *client, *late;
    eep_etcd_watch_t *watch = NULL;
    eep_etcd_range_t  r;
    eep_etcd_stats_t  st;
    collector_t       c;
    lost_t            lost;
    int64_t           lease, ttl, start, took;

    (void)state;
    if (eep_test_etcd_binary() == NULL) {
        printf("skip: no etcd binary (install etcd-server)\n");
        skip();
    }
    assert_int_equal(eep_test_etcd_start(&etcd, 3), 0);
    printf("etcd cluster at %s\n", etcd.endpoints);
    collector_init(&c);
    lost_init(&lost);
    client = connect_to(etcd.endpoints, 3000);
    assert_int_equal(eep_etcd_put(client, "/t/c/a", (const uint8_t *)"1", 1, 0, NULL), EEP_OK);
    assert_int_equal(eep_etcd_watch_create(client, "/t/c/", 1, 0, collector_func, &c, &watch),
                     EEP_OK);
    assert_int_equal(eep_etcd_lease_grant(client, 2, &lease, &ttl), EEP_OK);
    assert_int_equal(eep_etcd_put(client, "/t/c/leased", (const uint8_t *)"x", 1, lease, NULL),
                     EEP_OK);
    assert_int_equal(eep_etcd_lease_keepalive(client, lease, lost_func, &lost), EEP_OK);
    assert_int_equal(eep_etcd_put(client, "/t/c/b", (const uint8_t *)"2", 1, 0, NULL), EEP_OK);
    assert_int_equal(collector_wait(&c, 2, 3000), 2);

    eep_test_etcd_kill(&etcd, 0);
    start = test_now_ms();
    assert_int_equal(eep_etcd_put(client, "/t/c/c", (const uint8_t *)"3", 1, 0, NULL), EEP_OK);
    took = test_now_ms() - start;
    printf("first put after the first member died took %lld ms\n", (long long)took);
    assert_true(took < 3000);
    assert_int_equal(eep_etcd_range(client, "/t/c/", 1, &r), EEP_OK);
    assert_int_equal(r.count, 4);
    eep_etcd_range_free(&r);
    assert_int_equal(collector_wait(&c, 3, 5000), 3);
    assert_string_equal(c.ev[2].key, "/t/c/c");

    /* A client that starts on the dead member. */
    late  = connect_to(etcd.endpoints, 3000);
    start = test_now_ms();
    assert_int_equal(eep_etcd_put(late, "/t/c/d", (const uint8_t *)"4", 1, 0, NULL), EEP_OK);
    printf("a new client's first put (dead first endpoint) took %lld ms\n",
           (long long)(test_now_ms() - start));
    assert_int_equal(collector_wait(&c, 4, 5000), 4);

    /* The lease outlives two TTLs with its member gone. */
    start = test_now_ms();
    while (test_now_ms() - start < 2 * ttl * 1000 + 300) {
        usleep(100 * 1000);
    }
    assert_int_equal(lost_calls(&lost), 0);
    assert_int_equal(eep_etcd_range(late, "/t/c/leased", 0, &r), EEP_OK);
    assert_int_equal(r.count, 1);
    eep_etcd_range_free(&r);
    usleep(200 * 1000);
    assert_int_equal(collector_count(&c), 4); /* no duplicates */
    eep_etcd_stats(client, &st);
    printf("client: round trips %llu, failovers %llu, watch streams %llu\n",
           (unsigned long long)st.round_trips, (unsigned long long)st.failovers,
           (unsigned long long)st.watch_streams);
    eep_etcd_watch_cancel(watch);
    eep_etcd_destroy(late);
    eep_etcd_destroy(client);
    eep_test_etcd_destroy(&etcd);
}

static void test_failover_when_first_member_hangs(void **state)
{
    eep_test_etcd_t   etcd;
    eep_etcd_t       *client;
    eep_etcd_watch_t *watch = NULL;
    collector_t       c;
    lost_t            lost;
    int64_t           lease, ttl, start, took;
    int               i, n;

    (void)state;
    if (eep_test_etcd_binary() == NULL) {
        printf("skip: no etcd binary (install etcd-server)\n");
        skip();
    }
    assert_int_equal(eep_test_etcd_start(&etcd, 3), 0);
    collector_init(&c);
    lost_init(&lost);
    client = connect_to(etcd.endpoints, 4000);
    assert_int_equal(eep_etcd_watch_create(client, "/t/h/", 1, 0, collector_func, &c, &watch),
                     EEP_OK);
    assert_int_equal(eep_etcd_lease_grant(client, 3, &lease, &ttl), EEP_OK);
    assert_int_equal(eep_etcd_lease_keepalive(client, lease, lost_func, &lost), EEP_OK);
    assert_int_equal(eep_etcd_put(client, "/t/h/a", (const uint8_t *)"1", 1, 0, NULL), EEP_OK);
    assert_int_equal(collector_wait(&c, 1, 3000), 1);

    assert_int_equal(eep_test_etcd_pause(&etcd, 0, 1), 0);
    start = test_now_ms();
    assert_int_equal(eep_etcd_put(client, "/t/h/b", (const uint8_t *)"2", 1, 0, NULL), EEP_OK);
    took = test_now_ms() - start;
    printf("first put with the first member hung took %lld ms\n", (long long)took);
    assert_true(took < 4000);
    /* The watch was streaming from the hung member: pings time out, it resumes elsewhere. */
    collector_wait(&c, 2, 8000);
    usleep(200 * 1000);
    collector_dump(&c, "while the first member hangs");
    /* Exactly one put took effect: the hung member took nothing (see eep_test_etcd_pause). */
    assert_int_equal(collector_count(&c), 2);
    printf("watch event arrived %lld ms after the member hung\n",
           (long long)(test_now_ms() - start));
    assert_string_equal(c.ev[1].key, "/t/h/b");
    start = test_now_ms();
    while (test_now_ms() - start < ttl * 1000 + 500) {
        usleep(100 * 1000);
    }
    assert_int_equal(lost_calls(&lost), 0);
    eep_test_etcd_pause(&etcd, 0, 0);
    usleep(500 * 1000);
    /* The woken member may now apply the put that timed out on it (the retry went elsewhere):
     * a second "/t/h/b" at a NEW revision is etcd's at-least-once write, not a duplicate
     * delivery.  No revision may be delivered twice, and order holds. */
    n = collector_count(&c);
    printf("%d events after the member woke up\n", n);
    assert_true(n == 2 || n == 3);
    for (i = 1; i < n; i++) {
        assert_true(c.ev[i].mod_revision > c.ev[i - 1].mod_revision);
        assert_string_equal(c.ev[i].key, "/t/h/b");
    }
    eep_etcd_watch_cancel(watch);
    eep_etcd_destroy(client);
    eep_test_etcd_destroy(&etcd);
}

/* The port hook's state: the listener that takes member 0's client port on the first try. */
static int taken_fd = -1, taken_port = -1;

static int take_port(int port)
{
    struct sockaddr_in addr;
    int                fd, one = 1;

    fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    memset(&addr, 0, sizeof(addr));
    addr.sin_family      = AF_INET;
    addr.sin_port        = htons((uint16_t)port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
    assert_int_equal(listen(fd, 1), 0);
    return fd;
}

static void take_first_client_port(eep_test_etcd_t *etcd, int attempt)
{
    if (attempt == 0) {
        taken_port = etcd->client_port[0];
        taken_fd   = take_port(taken_port);
    }
}

/* Lets go of the taken port after 400 ms, while a restart is retrying. */
static void *release_later(void *arg)
{
    (void)arg;
    usleep(400 * 1000);
    close(taken_fd);
    return NULL;
}

static void test_server_ports_distinct_and_retried(void **state)
{
    eep_test_etcd_t etcd;
    pthread_t       releaser;
    int             ports[200], i, j;

    (void)state;
    /* Distinct, below the ephemeral range, and not the ones of the clusters above. */
    for (i = 0; i < 200; i++) {
        ports[i] = eep_test_free_port();
        assert_true(ports[i] >= 10000);
        for (j = 0; j < i; j++) {
            assert_int_not_equal(ports[i], ports[j]);
        }
    }
    if (eep_test_etcd_binary() == NULL) {
        printf("skip: no etcd binary (install etcd-server)\n");
        skip();
    }
    /* Another process takes a port between the pick and etcd's bind: a second try, new ports. */
    eep_test_etcd_ports_hook = take_first_client_port;
    assert_int_equal(eep_test_etcd_start(&etcd, 1), 0);
    eep_test_etcd_ports_hook = NULL;
    printf("port %d taken before etcd bound it; started on %s\n", taken_port, etcd.endpoints);
    assert_true(taken_port > 0);
    assert_int_not_equal(etcd.client_port[0], taken_port);
    close(taken_fd);
    /* A restart keeps its ports and is retried while one is taken (here for 400 ms). */
    eep_test_etcd_kill(&etcd, 0);
    taken_fd = take_port(etcd.client_port[0]);
    assert_int_equal(pthread_create(&releaser, NULL, release_later, NULL), 0);
    assert_int_equal(eep_test_etcd_restart(&etcd, 0), 0);
    pthread_join(releaser, NULL);
    eep_test_etcd_destroy(&etcd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_failover_when_first_member_dies),
        cmocka_unit_test(test_failover_when_first_member_hangs),
        cmocka_unit_test(test_server_ports_distinct_and_retried),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
