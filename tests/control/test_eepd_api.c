/*
 * test_eepd_api.c - eepd's request handlers on valid, garbage and oversized input, without etcd
 * or a network (the handler returns the gRPC code it would send).  Also the rules: mutating
 * calls refused without a verified certificate under TLS, InjectFault refused unless enabled.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "control/eepd/eepd.h"
#include "util/log.h"

static eepd_t *make_eepd(int tls, int injection)
{
    eepd_config_t cfg;
    eepd_t       *eepd = NULL;

    assert_int_equal(eep_config_load(&eepd_knob_table, &cfg), EEP_OK);
    if (tls) {
        strcpy(cfg.tls_cert, "/nonexistent/cert.pem");
    }
    cfg.fault_injection = injection;
    assert_int_equal(eepd_create(&cfg, 0, &eepd), EEP_OK);
    return eepd;
}

static size_t pack_member_req(const char *member, uint8_t *buf)
{
    Eep__V1__MemberRequest r = EEP__V1__MEMBER_REQUEST__INIT;

    r.member = (char *)member;
    return eep__v1__member_request__pack(&r, buf);
}

static void test_valid_reads(void **state)
{
    eepd_t *eepd = make_eepd(0, 0);
    uint8_t buf[64];

    (void)state;
    assert_int_equal(eepd_api_handle(eepd, EEPD_M_GET_STATUS, NULL, buf, 0, 0), EEP_RPC_OK);
    assert_int_equal(eepd_api_handle(eepd, EEPD_M_HEALTH, NULL, buf, 0, 0), EEP_RPC_OK);
    assert_int_equal(eepd_api_handle(eepd, EEPD_M_WATCH_VIEWS, NULL, buf, 0, 0), EEP_RPC_OK);
    assert_int_equal(eepd_api_handle(eepd, 99, NULL, buf, 0, 0), EEP_RPC_UNIMPLEMENTED);
    eepd_destroy(eepd);
}

static void test_garbage_and_oversized(void **state)
{
    eepd_t  *eepd = make_eepd(0, 1);
    size_t   big  = 4u << 20, i;
    uint8_t *junk = malloc(big);
    int      m;

    (void)state;
    assert_non_null(junk);
    /* 0xff bytes: an unterminated varint, invalid for every message. */
    memset(junk, 0xff, big);
    for (m = 0; m < EEPD_M_COUNT; m++) {
        assert_int_equal(eepd_api_handle(eepd, m, NULL, junk, 16, 1), EEP_RPC_INVALID_ARGUMENT);
        assert_int_equal(eepd_api_handle(eepd, m, NULL, junk, big, 1), EEP_RPC_INVALID_ARGUMENT);
    }
    /* Pseudo-random bytes: any code, never a crash (ASan/valgrind would see one). */
    srand(7);
    for (i = 0; i < 20000; i++) {
        size_t len = (size_t)(rand() % 64), k;

        for (k = 0; k < len; k++) {
            junk[k] = (uint8_t)rand();
        }
        (void)eepd_api_handle(eepd, rand() % (EEPD_M_COUNT + 1), NULL, junk, len, rand() & 1);
    }
    free(junk);
    eepd_destroy(eepd);
}

static void test_member_id_checked(void **state)
{
    eepd_t *eepd = make_eepd(0, 0);
    uint8_t buf[512];
    char    longid[300];
    size_t  n;

    (void)state;
    n = pack_member_req("../../leader", buf);
    assert_int_equal(eepd_api_handle(eepd, EEPD_M_DRAIN, NULL, buf, n, 0),
                     EEP_RPC_INVALID_ARGUMENT);
    n = pack_member_req("", buf);
    assert_int_equal(eepd_api_handle(eepd, EEPD_M_CORDON, NULL, buf, n, 0),
                     EEP_RPC_INVALID_ARGUMENT);
    memset(longid, 'a', sizeof(longid) - 1);
    longid[sizeof(longid) - 1] = '\0';
    n                          = pack_member_req(longid, buf);
    assert_int_equal(eepd_api_handle(eepd, EEPD_M_UNCORDON, NULL, buf, n, 0),
                     EEP_RPC_INVALID_ARGUMENT);
    /* A good id, but no etcd here. */
    n = pack_member_req("host-1-abc", buf);
    assert_int_equal(eepd_api_handle(eepd, EEPD_M_CORDON, NULL, buf, n, 0), EEP_RPC_UNAVAILABLE);
    eepd_destroy(eepd);
}

static void test_tls_requires_certificate(void **state)
{
    eepd_t                     *eepd = make_eepd(1, 1);
    uint8_t                     buf[64];
    size_t                      n   = pack_member_req("host-1-abc", buf);
    Eep__V1__InjectFaultRequest inj = EEP__V1__INJECT_FAULT_REQUEST__INIT;
    uint8_t                     ibuf[64];
    size_t                      in;

    (void)state;
    inj.kind   = EEP__V1__FAULT_KIND__FAULT_EVICT;
    inj.member = "host-1-abc";
    in         = eep__v1__inject_fault_request__pack(&inj, ibuf);
    assert_int_equal(eepd_api_handle(eepd, EEPD_M_DRAIN, NULL, buf, n, 0), EEP_RPC_UNAUTHENTICATED);
    assert_int_equal(eepd_api_handle(eepd, EEPD_M_INJECT_FAULT, NULL, ibuf, in, 0),
                     EEP_RPC_UNAUTHENTICATED);
    /* Authenticated: past the check (and then no etcd). */
    assert_int_equal(eepd_api_handle(eepd, EEPD_M_DRAIN, NULL, buf, n, 1), EEP_RPC_UNAVAILABLE);
    /* Reads stay open. */
    assert_int_equal(eepd_api_handle(eepd, EEPD_M_GET_STATUS, NULL, buf, 0, 0), EEP_RPC_OK);
    eepd_destroy(eepd);
}

static void test_injection_disabled(void **state)
{
    eepd_t *eepd   = make_eepd(0, 0);
    uint8_t buf[8] = { 0 };

    (void)state;
    assert_int_equal(eepd_api_handle(eepd, EEPD_M_INJECT_FAULT, NULL, buf, 0, 1),
                     EEP_RPC_PERMISSION_DENIED);
    eepd_destroy(eepd);
}

/* FAULT_DATA_PLANE: the spec is checked first (printable, 1..255), whoever leads. */
static void test_data_plane_fault_checked(void **state)
{
    eepd_t                     *eepd = make_eepd(0, 1);
    Eep__V1__InjectFaultRequest inj  = EEP__V1__INJECT_FAULT_REQUEST__INIT;
    char                        longer[300];
    uint8_t                     buf[512];
    size_t                      n;

    (void)state;
    memset(longer, 'a', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = '\0';
    inj.kind                   = EEP__V1__FAULT_KIND__FAULT_DATA_PLANE;
    inj.member                 = "host-1-abc";
    inj.spec                   = "";
    n                          = eep__v1__inject_fault_request__pack(&inj, buf);
    assert_int_equal(eepd_api_handle(eepd, EEPD_M_INJECT_FAULT, NULL, buf, n, 1),
                     EEP_RPC_INVALID_ARGUMENT);
    inj.spec = "stall\nms=5";
    n        = eep__v1__inject_fault_request__pack(&inj, buf);
    assert_int_equal(eepd_api_handle(eepd, EEPD_M_INJECT_FAULT, NULL, buf, n, 1),
                     EEP_RPC_INVALID_ARGUMENT);
    inj.spec = longer;
    n        = eep__v1__inject_fault_request__pack(&inj, buf);
    assert_int_equal(eepd_api_handle(eepd, EEPD_M_INJECT_FAULT, NULL, buf, n, 1),
                     EEP_RPC_INVALID_ARGUMENT);
    /* a good spec: past the check (and then no etcd; the member is looked up by the leader) */
    inj.spec = "stall phase=combine ms=800";
    n        = eep__v1__inject_fault_request__pack(&inj, buf);
    assert_int_equal(eepd_api_handle(eepd, EEPD_M_INJECT_FAULT, NULL, buf, n, 1),
                     EEP_RPC_UNAVAILABLE);
    eepd_destroy(eepd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_reads),        cmocka_unit_test(test_garbage_and_oversized),
        cmocka_unit_test(test_member_id_checked),  cmocka_unit_test(test_tls_requires_certificate),
        cmocka_unit_test(test_injection_disabled), cmocka_unit_test(test_data_plane_fault_checked),
    };

    eep_log_set_level(EEP_LOG_LEVEL_ERROR);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
