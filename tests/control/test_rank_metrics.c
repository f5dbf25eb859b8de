/*
 * test_rank_metrics.c - a rank's Prometheus text (control/rank/rank_metrics.c), the reader eepctl
 * top scrapes it with (control/tool/prom.c), and the rank's /metrics endpoint on 127.0.0.1.
 *
 * Rendering is checked by reading it back: every value the stats hold comes out of the parsed
 * page, histograms are cumulative with a +Inf bucket, and the p50 interpolated from the buckets
 * lands in the bucket of the observed durations.  The reader is fed hostile lines (long names,
 * broken label sets, bad numbers) that it must skip without losing the good ones.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "control/rank/rank_metrics.h"
#include "control/tool/prom.h"

static char *render(const eep_rank_stats_t *s)
{
    char  *text = NULL;
    size_t len  = 0;
    FILE  *f    = open_memstream(&text, &len);

    assert_non_null(f);
    assert_int_equal(eep_rank_metrics_render(f, s), EEP_OK);
    assert_int_equal(fclose(f), 0);
    return text;
}

static void test_render_roundtrip(void **state)
{
    static eep_rank_stats_t  s;
    eep_prom_page_t          page;
    const eep_prom_sample_t *x;
    char                    *text;
    double                   p50;
    int                      i;

    (void)state;
    memset(&s, 0, sizeof(s));
    s.step           = 42;
    s.epoch          = 7;
    s.world          = 4;
    s.rank           = 1;
    s.dispatch_bytes = 1u << 20;
    s.combine_bytes  = 3u << 20;
    s.jit_compiles   = 2;
    s.jit_cache_hits = 5;
    for (i = 0; i < 9; i++) {
        eep_rank_stats_observe(&s.dispatch, 300e-6); /* the (250 us, 500 us] bucket */
    }
    eep_rank_stats_observe(&s.dispatch, 4.0);
    eep_rank_stats_observe(&s.dispatch, 99.0); /* past the last bound: +Inf */
    eep_rank_stats_observe(&s.dispatch, -1.0); /* ignored */
    eep_rank_stats_observe(&s.combine, 20e-6);
    eep_rank_stats_fault(&s, EEP_ERR_PEER_TIMEOUT);
    eep_rank_stats_fault(&s, EEP_ERR_PEER_TIMEOUT);
    eep_rank_stats_fault(&s, EEP_ERR_ABORTED);
    eep_rank_stats_fault(&s, EEP_OK); /* not a fault */
    s.wait_s[EEP_RANK_WAIT_DISPATCH_DATA][3] = 1.25;
    s.wait_s[EEP_RANK_WAIT_DISPATCH_DATA][0] = 0.5;
    s.wait_s[EEP_RANK_WAIT_COMBINE][2]       = 0.125;
    s.wait_s[EEP_RANK_WAIT_BARRIER][9]       = 5.0; /* past the world: not rendered */

    text = render(&s);
    assert_int_equal(eep_prom_page_parse(text, &page), EEP_OK);
    assert_non_null(x = eep_prom_find(&page, "eep_step", NULL, NULL));
    assert_true(x->value == 42);
    assert_true(eep_prom_find(&page, "eep_epoch", NULL, NULL)->value == 7);
    assert_true(eep_prom_find(&page, "eep_world", NULL, NULL)->value == 4);
    assert_true(eep_prom_find(&page, "eep_rank", NULL, NULL)->value == 1);
    assert_true(eep_prom_find(&page, "eep_bytes_total", "op", "dispatch")->value == 1 << 20);
    assert_true(eep_prom_find(&page, "eep_bytes_total", "op", "combine")->value == 3 << 20);
    assert_true(eep_prom_find(&page, "eep_calls_total", "op", "dispatch")->value == 11);
    assert_true(eep_prom_find(&page, "eep_jit_compiles_total", NULL, NULL)->value == 2);
    assert_true(eep_prom_find(&page, "eep_jit_cache_hits_total", NULL, NULL)->value == 5);
    assert_true(eep_prom_find(&page, "eep_faults_total", "kind", "EEP_ERR_PEER_TIMEOUT")->value ==
                2);
    assert_true(eep_prom_find(&page, "eep_faults_total", "kind", "EEP_ERR_ABORTED")->value == 1);
    assert_null(eep_prom_find(&page, "eep_faults_total", "kind", "EEP_OK"));
    /* histogram: cumulative, +Inf holds every observation, count and sum agree */
    assert_true(
        eep_prom_find(&page, "eep_dispatch_duration_seconds_bucket", "le", "0.00025")->value == 0);
    assert_true(
        eep_prom_find(&page, "eep_dispatch_duration_seconds_bucket", "le", "0.0005")->value == 9);
    assert_true(eep_prom_find(&page, "eep_dispatch_duration_seconds_bucket", "le", "5")->value ==
                10);
    assert_true(eep_prom_find(&page, "eep_dispatch_duration_seconds_bucket", "le", "+Inf")->value ==
                11);
    assert_true(eep_prom_find(&page, "eep_dispatch_duration_seconds_count", NULL, NULL)->value ==
                11);
    assert_true(eep_prom_find(&page, "eep_dispatch_duration_seconds_sum", NULL, NULL)->value >
                103.0);
    p50 = eep_prom_quantile(&page, "eep_dispatch_duration_seconds", 0.5);
    assert_true(p50 > 250e-6 && p50 <= 500e-6);
    /* p99 falls in +Inf: the highest finite bound, as histogram_quantile() says */
    assert_true(eep_prom_quantile(&page, "eep_dispatch_duration_seconds", 0.99) == 10.0);
    p50 = eep_prom_quantile(&page, "eep_combine_duration_seconds", 0.5);
    assert_true(p50 > 10e-6 && p50 <= 25e-6);
    assert_true(eep_prom_quantile(&page, "eep_no_such_histogram", 0.5) < 0);
    /* waits: every peer of a phase that has some, none of a phase without */
    assert_true(eep_prom_sum(&page, "eep_wait_seconds_total", "phase", "dispatch_data") == 1.75);
    assert_true(eep_prom_sum(&page, "eep_wait_seconds_total", "peer", "3") == 1.25);
    assert_true(eep_prom_sum(&page, "eep_wait_seconds_total", "peer", "2") == 0.125);
    assert_true(eep_prom_sum(&page, "eep_wait_seconds_total", NULL, NULL) == 1.875);
    assert_null(eep_prom_find(&page, "eep_wait_seconds_total", "phase", "barrier"));
    assert_null(eep_prom_find(&page, "eep_wait_seconds_total", "peer", "9"));
    assert_non_null(strstr(text, "# TYPE eep_dispatch_duration_seconds histogram\n"));
    assert_non_null(strstr(text, "# TYPE eep_wait_seconds_total counter\n"));
    eep_prom_page_cleanup(&page);
    free(text);
}

static void test_fault_kinds_bounded(void **state)
{
    static eep_rank_stats_t s;
    int                     i;

    (void)state;
    memset(&s, 0, sizeof(s));
    for (i = 0; i < EEP_RANK_FAULT_KINDS + 5; i++) {
        eep_rank_stats_fault(&s, (eep_status_t)(-100 - i));
    }
    assert_int_equal(s.n_fault_kinds, EEP_RANK_FAULT_KINDS);
    assert_int_equal(s.faults[EEP_RANK_FAULT_KINDS - 1].count, 6);
    assert_int_equal(eep_rank_metrics_render(NULL, &s), EEP_ERR_INVALID_ARG);
}

static void test_parse_lines(void **state)
{
    eep_prom_sample_t s;
    char              buf[64], longname[300];

    (void)state;
    assert_int_equal(eep_prom_parse_line("", &s), 0);
    assert_int_equal(eep_prom_parse_line("# HELP x y", &s), 0);
    assert_int_equal(eep_prom_parse_line("up 1", &s), 1);
    assert_string_equal(s.name, "up");
    assert_string_equal(s.labels, "");
    assert_true(s.value == 1);
    assert_int_equal(
        eep_prom_parse_line("a:b_c{x=\"1\",y=\"q\\\"u\\\\o\\nte\",} 2.5e-3 1700000000000", &s), 1);
    assert_true(s.value == 2.5e-3);
    assert_int_equal(eep_prom_label(s.labels, "y", buf, sizeof(buf)), 0);
    assert_string_equal(buf, "q\"u\\o\nte");
    assert_int_equal(eep_prom_label(s.labels, "x", buf, sizeof(buf)), 0);
    assert_string_equal(buf, "1");
    assert_int_equal(eep_prom_label(s.labels, "z", buf, sizeof(buf)), -1);
    assert_int_equal(eep_prom_label(s.labels, "y", buf, 4), -1); /* does not fit */
    assert_int_equal(eep_prom_parse_line("x{le=\"+Inf\"} +Inf", &s), 1);
    assert_int_equal(eep_prom_parse_line("x NaN", &s), 1);
    /* malformed: each is skipped */
    assert_int_equal(eep_prom_parse_line("9x 1", &s), -1);
    assert_int_equal(eep_prom_parse_line("x", &s), -1);
    assert_int_equal(eep_prom_parse_line("x abc", &s), -1);
    assert_int_equal(eep_prom_parse_line("x 1 2 3", &s), -1);
    assert_int_equal(eep_prom_parse_line("x{a=\"1\" 1", &s), -1);
    assert_int_equal(eep_prom_parse_line("x{a=1} 1", &s), -1);
    assert_int_equal(eep_prom_parse_line("x{a=\"\\q\"} 1", &s), -1);
    assert_int_equal(eep_prom_parse_line("x{=\"1\"} 1", &s), -1);
    assert_int_equal(eep_prom_parse_line("x{a=\"1\"}1", &s), -1);
    memset(longname, 'n', sizeof(longname) - 3);
    memcpy(longname + sizeof(longname) - 3, " 1", 3);
    assert_int_equal(eep_prom_parse_line(longname, &s), -1);
}

static void test_page_skips_bad_lines(void **state)
{
    eep_prom_page_t page;
    char           *text;
    size_t          n = 8000;

    (void)state;
    text = malloc(n + 200);
    assert_non_null(text);
    strcpy(text, "good 1\r\nbad{ 2\n");
    memset(text + strlen(text), 'z', n); /* one very long line */
    strcpy(text + 15 + n, " 3\n# c\n\ngood2{a=\"b\"} 4");
    assert_int_equal(eep_prom_page_parse(text, &page), EEP_OK);
    assert_int_equal(page.n, 2);
    assert_true(eep_prom_find(&page, "good", NULL, NULL)->value == 1);
    assert_true(eep_prom_find(&page, "good2", "a", "b")->value == 4);
    assert_null(eep_prom_find(&page, "good2", "a", "c"));
    assert_true(eep_prom_sum(&page, "none", NULL, NULL) == 0);
    assert_int_equal(eep_prom_page_parse(NULL, &page), EEP_ERR_INVALID_ARG);
    eep_prom_page_cleanup(&page);
    eep_prom_page_cleanup(NULL);
    free(text);
}

/* GET http://127.0.0.1:port/path; @return the whole reply (malloc'd). */
/* One request (@p method, e.g. "GET") on 127.0.0.1:@p port; the whole reply, status line first. */
static char *http_req(int port, const char *method, const char *path)
{
    struct sockaddr_in a;
    char               req[128], *buf = calloc(1, 65536);
    size_t             len = 0;
    ssize_t            r;
    int                fd = socket(AF_INET, SOCK_STREAM, 0);

    assert_true(fd >= 0 && buf != NULL);
    memset(&a, 0, sizeof(a));
    a.sin_family      = AF_INET;
    a.sin_port        = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    snprintf(req, sizeof(req), "%s %s HTTP/1.0\r\n\r\n", method, path);
    assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
    while (len < 65535 && (r = read(fd, buf + len, 65535 - len)) > 0) {
        len += (size_t)r;
    }
    close(fd);
    return buf;
}

static char *http_get(int port, const char *path)
{
    return http_req(port, "GET", path);
}

static void test_endpoint(void **state)
{
    static eep_rank_stats_t   s;
    eep_rank_metrics_params_t p = { .size = sizeof(p), .addr = "127.0.0.1:0" };
    eep_rank_metrics_t       *m = NULL;
    const char               *url;
    char                     *reply;
    int                       port = 0;

    (void)state;
    assert_int_equal(eep_rank_metrics_create(&p, &m), EEP_OK);
    assert_non_null(m);
    url = eep_rank_metrics_url(m);
    assert_int_equal(sscanf(url, "http://127.0.0.1:%d/metrics", &port), 1);
    assert_true(port > 0);
    reply = http_get(port, "/metrics");
    assert_non_null(strstr(reply, " 200 "));
    free(reply);
    memset(&s, 0, sizeof(s));
    s.step                             = 3;
    s.world                            = 2;
    s.wait_s[EEP_RANK_WAIT_COMBINE][1] = 0.25;
    assert_int_equal(eep_rank_metrics_publish(m, &s), EEP_OK);
    reply = http_get(port, "/metrics");
    assert_non_null(strstr(reply, "\neep_step 3\n"));
    assert_non_null(strstr(reply, "eep_wait_seconds_total{phase=\"combine\",peer=\"1\"} 0.25\n"));
    assert_non_null(strstr(reply, "text/plain; version=0.0.4"));
    free(reply);
    reply = http_get(port, "/other");
    assert_non_null(strstr(reply, " 404 "));
    free(reply);
    reply = http_req(port, "DELETE", "/metrics"); /* control/tool/http_page.c: GET only */
    assert_non_null(strstr(reply, " 405 "));
    assert_non_null(strstr(reply, "only GET"));
    free(reply);
    eep_rank_metrics_destroy(m);
    eep_rank_metrics_destroy(NULL);
    assert_int_equal(eep_rank_metrics_publish(NULL, &s), EEP_OK);

    p.addr = "off";
    m      = (eep_rank_metrics_t *)&p; /* must be overwritten */
    assert_int_equal(eep_rank_metrics_create(&p, &m), EEP_OK);
    assert_null(m);
    p.addr = "";
    assert_int_equal(eep_rank_metrics_create(&p, &m), EEP_OK);
    assert_null(m);
    p.addr = "localhost:80"; /* not an IPv4 address */
    assert_int_equal(eep_rank_metrics_create(&p, &m), EEP_ERR_INVALID_ARG);
    p.addr = "127.0.0.1:65536";
    assert_int_equal(eep_rank_metrics_create(&p, &m), EEP_ERR_INVALID_ARG);
    p.addr = "127.0.0.1";
    assert_int_equal(eep_rank_metrics_create(&p, &m), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_rank_metrics_create(NULL, &m), EEP_ERR_INVALID_ARG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render_roundtrip), cmocka_unit_test(test_fault_kinds_bounded),
        cmocka_unit_test(test_parse_lines),      cmocka_unit_test(test_page_skips_bad_lines),
        cmocka_unit_test(test_endpoint),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
