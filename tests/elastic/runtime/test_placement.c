/*
 * test_placement.c - expert placement as data (include/eep/membership.h): the default policy is
 * contiguous and as even as possible on every rank count a shrink makes (256 experts on 8, 7, 5,
 * 3 ranks), agrees with eepd's formula and with the old arithmetic placement; the checker refuses
 * each kind of bad placement naming the expert, and writes nothing on failure; the view check
 * names the bad field.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "eep/ep.h"
#include "eep/layout.h"
#include "eep/membership.h"
#include "util/log.h"

static char last_msg[1024];

static void hook(eep_log_level_t level, eep_log_subsys_t subsys, const char *message, void *arg)
{
    (void)level;
    (void)subsys;
    (void)arg;
    snprintf(last_msg, sizeof(last_msg), "%s", message);
}

static void expect_msg(const char *needle)
{
    if (strstr(last_msg, needle) == NULL) {
        fail_msg("message \"%s\" does not name \"%s\"", last_msg, needle);
    }
}

static int setup(void **state)
{
    (void)state;
    eep_log_set_level(EEP_LOG_LEVEL_ERROR);
    eep_log_set_hook(hook, NULL);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    eep_log_set_hook(NULL, NULL);
    return 0;
}

static void test_default_even_and_contiguous(void **state)
{
    static const int shapes[][2] = { { 256, 8 }, { 256, 7 }, { 256, 5 },     { 256, 3 }, { 256, 1 },
                                     { 3, 8 },   { 1, 1 },   { 2048, 1024 }, { 5, 2 } };
    eep_expert_place_t pl[EEP_EP_MAX_EXPERTS];
    int                counts[EEP_MAX_RANKS];
    size_t             i;

    (void)state;
    for (i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        const int E = shapes[i][0], W = shapes[i][1];
        int       e, r, lo = E, hi = 0, total = 0;

        assert_int_equal(eep_placement_default(E, W, pl), EEP_OK);
        assert_int_equal(eep_placement_check(pl, E, W, counts), EEP_OK);
        for (e = 0; e < E; e++) {
            /* eepd_view_place's primary copy: floor(e * N / E). */
            assert_int_equal(pl[e].rank, (int)(((int64_t)e * W) / E));
            if (e > 0) {
                /* Contiguous: ranks never go back, a slot follows the previous one. */
                assert_true(pl[e].rank >= pl[e - 1].rank);
                if (pl[e].rank == pl[e - 1].rank) {
                    assert_int_equal(pl[e].slot, pl[e - 1].slot + 1);
                } else {
                    assert_int_equal(pl[e].slot, 0);
                }
            }
        }
        for (r = 0; r < W; r++) {
            lo = counts[r] < lo ? counts[r] : lo;
            hi = counts[r] > hi ? counts[r] : hi;
            total += counts[r];
        }
        assert_int_equal(total, E);
        assert_true(hi - lo <= 1);
        if (E % W == 0) {
            /* The arithmetic placement the kernels used before views. */
            for (e = 0; e < E; e++) {
                assert_int_equal(pl[e].rank, e / (E / W));
                assert_int_equal(pl[e].slot, e % (E / W));
            }
        }
    }
    /* 256 on 7: 36 or 37 each. */
    assert_int_equal(eep_placement_default(256, 7, pl), EEP_OK);
    assert_int_equal(eep_placement_check(pl, 256, 7, counts), EEP_OK);
    assert_true(counts[0] == 36 || counts[0] == 37);
}

static void test_default_bad_arguments(void **state)
{
    eep_expert_place_t pl[4] = { { 9, 9 }, { 9, 9 }, { 9, 9 }, { 9, 9 } };

    (void)state;
    assert_int_equal(eep_placement_default(0, 2, pl), EEP_ERR_INVALID_ARG);
    expect_msg("num_experts");
    assert_int_equal(eep_placement_default(EEP_EP_MAX_EXPERTS + 1, 2, pl), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_placement_default(4, 0, pl), EEP_ERR_INVALID_ARG);
    expect_msg("world");
    assert_int_equal(eep_placement_default(4, EEP_MAX_RANKS + 1, pl), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_placement_default(4, 2, NULL), EEP_ERR_INVALID_ARG);
    expect_msg("placement_p");
    /* Nothing written on failure. */
    assert_int_equal(pl[0].rank, 9);
}

/* 8 experts on 3 ranks, uneven on purpose: rank 0 holds 4, rank 1 holds 0, rank 2 holds 4. */
static void uneven(eep_expert_place_t *pl)
{
    int e;

    for (e = 0; e < 8; e++) {
        pl[e].rank = e % 2 == 0 ? 0 : 2;
        pl[e].slot = e / 2;
    }
}

static void test_check_accepts_uneven(void **state)
{
    eep_expert_place_t pl[8];
    int                counts[3] = { -1, -1, -1 };

    (void)state;
    uneven(pl);
    assert_int_equal(eep_placement_check(pl, 8, 3, counts), EEP_OK);
    assert_int_equal(counts[0], 4);
    assert_int_equal(counts[1], 0);
    assert_int_equal(counts[2], 4);
    assert_int_equal(eep_placement_check(pl, 8, 3, NULL), EEP_OK);
}

static void test_check_refuses(void **state)
{
    eep_expert_place_t pl[8];
    int                counts[3] = { -7, -7, -7 };

    (void)state;
    uneven(pl);
    pl[5].rank = 3; /* world is 3 */
    assert_int_equal(eep_placement_check(pl, 8, 3, counts), EEP_ERR_INVALID_ARG);
    expect_msg("expert 5 is placed on rank 3");
    assert_int_equal(counts[0], -7);

    uneven(pl);
    pl[2].rank = -1;
    assert_int_equal(eep_placement_check(pl, 8, 3, counts), EEP_ERR_INVALID_ARG);
    expect_msg("expert 2 is placed on rank -1");

    uneven(pl);
    pl[7].slot = -2;
    assert_int_equal(eep_placement_check(pl, 8, 3, counts), EEP_ERR_INVALID_ARG);
    expect_msg("expert 7 has a negative slot");

    /* A gap: rank 2's slots 0, 1, 2, 5 (it holds 4). */
    uneven(pl);
    pl[7].slot = 5;
    assert_int_equal(eep_placement_check(pl, 8, 3, counts), EEP_ERR_INVALID_ARG);
    expect_msg("expert 7 is in slot 5 of rank 2, which holds 4 experts");

    /* Two experts in one slot (and so one slot empty). */
    uneven(pl);
    pl[6].slot = 0;
    assert_int_equal(eep_placement_check(pl, 8, 3, counts), EEP_ERR_INVALID_ARG);
    expect_msg("expert 0 and expert 6 are both in slot 0 of rank 0");

    /* Dimensions and NULL. */
    uneven(pl);
    assert_int_equal(eep_placement_check(NULL, 8, 3, counts), EEP_ERR_INVALID_ARG);
    expect_msg("placement");
    assert_int_equal(eep_placement_check(pl, 0, 3, counts), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_placement_check(pl, 8, 0, counts), EEP_ERR_INVALID_ARG);
    assert_int_equal(counts[1], -7);
}

static void test_view_check(void **state)
{
    const char        *ids[3] = { "a", "b", "c" };
    const char        *dup[3] = { "a", "b", "a" };
    eep_expert_place_t pl[8];
    eep_view_t         v;

    (void)state;
    uneven(pl);
    memset(&v, 0, sizeof(v));
    v.size        = sizeof(v);
    v.epoch       = 4;
    v.world       = 3;
    v.member_ids  = ids;
    v.my_rank     = 1;
    v.root        = 0;
    v.num_experts = 8;
    v.placement   = pl;
    assert_int_equal(eep_view_check(&v), EEP_OK);
    v.my_rank = -1; /* a view that does not hold this process is still a valid view */
    assert_int_equal(eep_view_check(&v), EEP_OK);

    v.epoch = 0;
    assert_int_equal(eep_view_check(&v), EEP_ERR_INVALID_ARG);
    expect_msg("epoch");
    v.epoch = 4;
    v.root  = 3;
    assert_int_equal(eep_view_check(&v), EEP_ERR_INVALID_ARG);
    expect_msg("root");
    v.root    = 0;
    v.my_rank = 3;
    assert_int_equal(eep_view_check(&v), EEP_ERR_INVALID_ARG);
    expect_msg("my_rank");
    v.my_rank    = 1;
    v.member_ids = dup;
    assert_int_equal(eep_view_check(&v), EEP_ERR_INVALID_ARG);
    expect_msg("ranks 0 and 2 are both member a");
    v.member_ids = ids;
    pl[3].rank   = 7;
    assert_int_equal(eep_view_check(&v), EEP_ERR_INVALID_ARG);
    expect_msg("expert 3");
    pl[3].rank    = 2;
    v.num_experts = 0; /* no MoE layer: no placement */
    v.placement   = NULL;
    assert_int_equal(eep_view_check(&v), EEP_OK);
    v.size = 8;
    assert_int_equal(eep_view_check(&v), EEP_ERR_INVALID_ARG);
    expect_msg("size");
    assert_int_equal(eep_view_check(NULL), EEP_ERR_INVALID_ARG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_even_and_contiguous),
        cmocka_unit_test(test_default_bad_arguments),
        cmocka_unit_test(test_check_accepts_uneven),
        cmocka_unit_test(test_check_refuses),
        cmocka_unit_test(test_view_check),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
