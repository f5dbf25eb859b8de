/*
 * test_etcd_tls.c - the etcd client over TLS with a client certificate (mutual TLS).
 *
 * etcd serves https and requires client certificates signed by a test CA made with openssl.  A
 * client with the CA, certificate and key works; one without a certificate, or in plaintext, is
 * refused as "control plane unavailable" within its deadline; bad TLS settings are refused at
 * creation.  Skipped without etcd or openssl.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "control/etcd/etcd.h"
#include "tests/control/etcd_test_util.h"
#include "tests/control/support/etcd_server.h"

static eep_status_t connect_tls(const eep_test_etcd_t *etcd, const char *ca, const char *cert,
                                const char *key, eep_etcd_t **client_p)
{
    eep_etcd_params_t params;

    memset(&params, 0, sizeof(params));
    params.size       = sizeof(params);
    params.endpoints  = etcd->endpoints;
    params.timeout_ms = 1500;
    params.ca_file    = ca;
    params.cert_file  = cert;
    params.key_file   = key;
    return eep_etcd_create(&params, client_p);
}

static void test_mutual_tls(void **state)
{
    eep_test_etcd_t  etcd;
    eep_etcd_t      *client = NULL, *nocert = NULL, *plain = NULL, *bad = NULL;
    eep_etcd_range_t r;
    int64_t          start;
    int              ret;

    (void)state;
    if (eep_test_etcd_binary() == NULL) {
        printf("skip: no etcd binary (install etcd-server)\n");
        skip();
    }
    ret = eep_test_etcd_start_tls(&etcd, 1);
    if (ret == 77) {
        printf("skip: no openssl to make test certificates\n");
        skip();
    }
    assert_int_equal(ret, 0);

    assert_int_equal(connect_tls(&etcd, etcd.ca_file, etcd.cert_file, etcd.key_file, &client),
                     EEP_OK);
    assert_int_equal(eep_etcd_put(client, "/t/tls", (const uint8_t *)"secure", 6, 0, NULL), EEP_OK);
    assert_int_equal(eep_etcd_range(client, "/t/tls", 0, &r), EEP_OK);
    assert_int_equal(r.count, 1);
    assert_string_equal((const char *)r.kvs[0].value, "secure");
    eep_etcd_range_free(&r);

    /* No client certificate: etcd refuses the handshake. */
    assert_int_equal(connect_tls(&etcd, etcd.ca_file, NULL, NULL, &nocert), EEP_OK);
    start = test_now_ms();
    assert_int_equal(eep_etcd_range(nocert, "/t/tls", 0, &r), EEP_ERR_CONTROL_UNAVAILABLE);
    assert_true(test_now_ms() - start <= 1500 + 300);

    /* Plaintext against a TLS server. */
    assert_int_equal(connect_tls(&etcd, NULL, NULL, NULL, &plain), EEP_OK);
    assert_int_equal(eep_etcd_range(plain, "/t/tls", 0, &r), EEP_ERR_CONTROL_UNAVAILABLE);

    /* Settings refused at creation. */
    assert_int_equal(connect_tls(&etcd, etcd.ca_file, etcd.cert_file, NULL, &bad),
                     EEP_ERR_INVALID_ARG);
    assert_int_equal(connect_tls(&etcd, NULL, etcd.cert_file, etcd.key_file, &bad),
                     EEP_ERR_INVALID_ARG);
    assert_int_equal(connect_tls(&etcd, "/nonexistent/ca.crt", NULL, NULL, &bad), EEP_ERR_IO);
    assert_null(bad);

    eep_etcd_destroy(plain);
    eep_etcd_destroy(nocert);
    eep_etcd_destroy(client);
    eep_test_etcd_destroy(&etcd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mutual_tls),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
