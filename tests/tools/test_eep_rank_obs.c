/*
 * test_eep_rank_obs.c - what eep-rank shows of itself (tools/eep_rank_obs.c), on the CPU: the
 * endpoint starts from EEP_RANK_METRICS_ADDR and its URL becomes the member key's endpoint;
 * steps fill the histograms, bytes and faults that /metrics then serves; EEP_RANK_SLOW_MS makes
 * the rank sleep before a dispatch; a bad address is refused naming the knob; off means no
 * endpoint and no URL.
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

#include "control/tool/prom.h"
#include "tools/eep_rank_obs.h"
#include "util/clock.h"

static char *get_page(const char *url)
{
    struct sockaddr_in a;
    char              *buf = calloc(1, 1 << 16), *body;
    size_t             len = 0;
    ssize_t            r;
    int                port = 0, fd;

    assert_non_null(buf);
    assert_int_equal(sscanf(url, "http://127.0.0.1:%d/metrics", &port), 1);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&a, 0, sizeof(a));
    a.sin_family      = AF_INET;
    a.sin_port        = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(write(fd, "GET /metrics HTTP/1.0\r\n\r\n", 25), 25);
    while (len < (1 << 16) - 1 && (r = read(fd, buf + len, (1 << 16) - 1 - len)) > 0) {
        len += (size_t)r;
    }
    close(fd);
    body = strstr(buf, "\r\n\r\n");
    assert_non_null(body);
    memmove(buf, body + 4, strlen(body + 4) + 1);
    return buf;
}

static void test_endpoint_and_steps(void **state)
{
    static eep_rank_obs_t obs;
    eep_agent_params_t    ap;
    eep_rank_obs_step_t   s;
    eep_prom_page_t       page;
    char                 *text;

    (void)state;
    setenv("EEP_RANK_METRICS_ADDR", "127.0.0.1:0", 1);
    memset(&ap, 0, sizeof(ap));
    assert_int_equal(eep_rank_obs_start(&obs, &ap), EEP_OK);
    assert_non_null(ap.endpoint);
    assert_int_equal(strncmp(ap.endpoint, "http://127.0.0.1:", 17), 0);
    text = get_page(ap.endpoint); /* published at start: step 0, no rank yet */
    assert_int_equal(eep_prom_page_parse(text, &page), EEP_OK);
    assert_true(eep_prom_find(&page, "eep_step", NULL, NULL)->value == 0);
    assert_true(eep_prom_find(&page, "eep_rank", NULL, NULL)->value == -1);
    eep_prom_page_cleanup(&page);
    free(text);

    memset(&s, 0, sizeof(s));
    s.step        = 1;
    s.epoch       = 3;
    s.rank        = 1;
    s.world       = 2;
    s.status      = EEP_OK;
    s.dispatch_us = 400;
    s.combine_us  = 30;
    s.bytes       = 1000;
    eep_rank_obs_step(&obs, NULL, &s);
    s.step        = 2;
    s.status      = EEP_ERR_PEER_TIMEOUT;
    s.dispatch_us = 0; /* the failed step ran no phase to its end */
    s.combine_us  = 0;
    eep_rank_obs_step(&obs, NULL, &s);
    text = get_page(ap.endpoint);
    assert_int_equal(eep_prom_page_parse(text, &page), EEP_OK);
    assert_true(eep_prom_find(&page, "eep_step", NULL, NULL)->value == 2);
    assert_true(eep_prom_find(&page, "eep_epoch", NULL, NULL)->value == 3);
    assert_true(eep_prom_find(&page, "eep_world", NULL, NULL)->value == 2);
    assert_true(eep_prom_find(&page, "eep_dispatch_duration_seconds_count", NULL, NULL)->value ==
                1);
    assert_true(eep_prom_quantile(&page, "eep_dispatch_duration_seconds", 0.5) > 250e-6);
    assert_true(eep_prom_quantile(&page, "eep_combine_duration_seconds", 0.5) <= 50e-6);
    assert_true(eep_prom_find(&page, "eep_bytes_total", "op", "dispatch")->value == 1000);
    assert_true(eep_prom_find(&page, "eep_faults_total", "kind", "EEP_ERR_PEER_TIMEOUT")->value ==
                1);
    eep_prom_page_cleanup(&page);
    free(text);
    eep_rank_obs_stop(&obs);
    unsetenv("EEP_RANK_METRICS_ADDR");
}

static void test_slow_and_off(void **state)
{
    static eep_rank_obs_t obs;
    eep_agent_params_t    ap;
    double                t0;

    (void)state;
    setenv("EEP_RANK_METRICS_ADDR", "off", 1);
    setenv("EEP_RANK_SLOW_MS", "60", 1);
    memset(&ap, 0, sizeof(ap));
    assert_int_equal(eep_rank_obs_start(&obs, &ap), EEP_OK);
    assert_null(ap.endpoint);
    assert_null(obs.metrics);
    t0 = eep_clock_ms();
    eep_rank_obs_slow(&obs);
    assert_true(eep_clock_ms() - t0 >= 59.0);
    eep_rank_obs_stop(&obs);

    setenv("EEP_RANK_SLOW_MS", "0", 1);
    assert_int_equal(eep_rank_obs_start(&obs, &ap), EEP_OK);
    t0 = eep_clock_ms();
    eep_rank_obs_slow(&obs);
    assert_true(eep_clock_ms() - t0 < 50.0);
    eep_rank_obs_stop(&obs);

    setenv("EEP_RANK_SLOW_MS", "-1", 1);
    assert_int_equal(eep_rank_obs_start(&obs, &ap), EEP_ERR_INVALID_ARG);
    unsetenv("EEP_RANK_SLOW_MS");
    setenv("EEP_RANK_METRICS_ADDR", "rank0:9400", 1);
    assert_int_equal(eep_rank_obs_start(&obs, &ap), EEP_ERR_INVALID_ARG);
    unsetenv("EEP_RANK_METRICS_ADDR");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_endpoint_and_steps),
        cmocka_unit_test(test_slow_and_off),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
