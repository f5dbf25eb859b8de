/*
 * test_eepd_view.c - eepd's pure view logic: stable rank order, expert placement, settle window
 * and the epoch rule.  No etcd, no network.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "control/eepd/eepd_view.h"

static void test_order_survivors_keep_order_joiners_append(void **state)
{
    /* Current view: c, a, b.  a died, d and e joined (e registered first). */
    const char      *cur[]   = { "c", "a", "b" };
    eepd_candidate_t cands[] = {
        { "b", 10, 1 },
        { "d", 40, 1 },
        { "c", 5, 1 },
        { "e", 30, 1 },
    };
    size_t order[4], n = 99;

    (void)state;
    assert_int_equal(eepd_view_order(cur, 3, cands, 4, 0, order, &n), EEP_OK);
    assert_int_equal(n, 4);
    assert_string_equal(cands[order[0]].id, "c");
    assert_string_equal(cands[order[1]].id, "b");
    assert_string_equal(cands[order[2]].id, "e");
    assert_string_equal(cands[order[3]].id, "d");
}

static void test_order_ineligible_and_max(void **state)
{
    const char      *cur[]   = { "a", "b" };
    eepd_candidate_t cands[] = {
        { "a", 1, 0 },
        { "b", 2, 1 },
        { "x", 3, 1 },
        { "y", 4, 1 },
    };
    size_t order[4], n = 0;

    (void)state;
    /* a is draining; max 2 ranks: b survives, x joins, y waits. */
    assert_int_equal(eepd_view_order(cur, 2, cands, 4, 2, order, &n), EEP_OK);
    assert_int_equal(n, 2);
    assert_string_equal(cands[order[0]].id, "b");
    assert_string_equal(cands[order[1]].id, "x");
    assert_int_equal(eepd_view_order(cur, 2, NULL, 3, 0, order, &n), EEP_ERR_INVALID_ARG);
}

static void test_order_ties_by_id(void **state)
{
    eepd_candidate_t cands[] = { { "zz", 7, 1 }, { "aa", 7, 1 } };
    size_t           order[2], n = 0;

    (void)state;
    assert_int_equal(eepd_view_order(NULL, 0, cands, 2, 0, order, &n), EEP_OK);
    assert_int_equal(n, 2);
    assert_string_equal(cands[order[0]].id, "aa");
}

static void test_place_even(void **state)
{
    uint32_t ranks[64], copies = 0, per_rank[4] = { 0 }, e;

    (void)state;
    assert_int_equal(eepd_view_place(10, 0, 4, ranks, &copies), EEP_OK);
    assert_int_equal(copies, 1);
    for (e = 0; e < 10; e++) {
        per_rank[ranks[e]]++;
        if (e > 0) {
            assert_true(ranks[e] >= ranks[e - 1]); /* contiguous blocks */
        }
    }
    for (e = 0; e < 4; e++) {
        assert_true(per_rank[e] == 2 || per_rank[e] == 3);
    }
}

static void test_place_redundant(void **state)
{
    uint32_t ranks[64], copies = 0, e;

    (void)state;
    assert_int_equal(eepd_view_place(8, 1, 4, ranks, &copies), EEP_OK);
    assert_int_equal(copies, 2);
    for (e = 0; e < 8; e++) {
        assert_int_not_equal(ranks[2 * e], ranks[2 * e + 1]);
        assert_int_equal(ranks[2 * e + 1], (ranks[2 * e] + 1) % 4);
    }
    /* More copies than ranks: capped. */
    assert_int_equal(eepd_view_place(3, 5, 2, ranks, &copies), EEP_OK);
    assert_int_equal(copies, 2);
    assert_int_equal(eepd_view_place(3, 0, 0, ranks, &copies), EEP_ERR_INVALID_ARG);
}

static void test_settle_window(void **state)
{
    eepd_settle_t s;

    (void)state;
    eepd_settle_reset(&s);
    assert_false(eepd_settle_ready(&s, 1000, 100));
    eepd_settle_note(&s, 1000);
    assert_false(eepd_settle_ready(&s, 1050, 100));
    assert_true(eepd_settle_ready(&s, 1100, 100));
    /* Changes keep coming: the window slides, but no longer than 4x after the first. */
    eepd_settle_note(&s, 1090);
    eepd_settle_note(&s, 1180);
    eepd_settle_note(&s, 1270);
    eepd_settle_note(&s, 1360);
    assert_false(eepd_settle_ready(&s, 1390, 100));
    assert_true(eepd_settle_ready(&s, 1400, 100));
}

static void test_epoch_plausible(void **state)
{
    (void)state;
    assert_true(eepd_epoch_plausible(0, 1, 1000));
    assert_true(eepd_epoch_plausible(0, 123456789, 1000)); /* nothing known yet */
    assert_false(eepd_epoch_plausible(0, 0, 1000));
    assert_false(eepd_epoch_plausible(0, UINT64_MAX, 1000)); /* the forged 2^64-1 */
    assert_false(eepd_epoch_plausible(0, EEPD_EPOCH_MAX + 1, 1000));
    assert_true(eepd_epoch_plausible(0, EEPD_EPOCH_MAX, UINT64_MAX));
    assert_true(eepd_epoch_plausible(7, 1007, 1000));
    assert_false(eepd_epoch_plausible(7, 1008, 1000));
    assert_true(eepd_epoch_plausible(7, 3, 1000)); /* old, not implausible: the caller decides */
}

static void test_epoch_rule(void **state)
{
    (void)state;
    assert_int_equal(eepd_epoch_check(0, 1), EEP_OK);
    assert_int_equal(eepd_epoch_check(5, 5), EEP_ERR_STALE_EPOCH);
    assert_int_equal(eepd_epoch_check(5, 4), EEP_ERR_STALE_EPOCH);
}

static void test_differs(void **state)
{
    const char *a[] = { "x", "y" }, *b[] = { "x", "y" }, *c[] = { "y", "x" };

    (void)state;
    assert_false(eepd_view_differs(a, 2, b, 2));
    assert_true(eepd_view_differs(a, 2, c, 2));
    assert_true(eepd_view_differs(a, 2, b, 1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_survivors_keep_order_joiners_append),
        cmocka_unit_test(test_order_ineligible_and_max),
        cmocka_unit_test(test_order_ties_by_id),
        cmocka_unit_test(test_place_even),
        cmocka_unit_test(test_place_redundant),
        cmocka_unit_test(test_settle_window),
        cmocka_unit_test(test_epoch_rule),
        cmocka_unit_test(test_epoch_plausible),
        cmocka_unit_test(test_differs),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
