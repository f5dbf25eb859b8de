/*
 * test_view_faults.c - the view-application state machine (elastic/runtime/runtime_view.h) under
 * faults, driven by the FAKE communicator and membership provider of view_apply_fake.h: a kernel
 * timeout before and during a view, shrinks that fail everywhere or on one survivor (the fresh
 * fallback), a fresh communicator that cannot be made, views given up for newer ones, and the
 * old set released early (params.release_early).  Views applied as decided: test_view_apply.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "eep/membership.h"
#include "elastic/runtime/runtime_view.h"
#include "tests/elastic/runtime/view_apply_fake.h"
#include "util/log.h"

/* A bounded wait names peer c before any view: reported once, c marked dead, its experts lost;
   the view without c then shrinks and clears the fault. */
static void test_timeout_fault_before_view(void **state)
{
    static const char *const ABD[] = { "a", "b", "d" };
    fake_rank_t              ranks[4];
    uint8_t                  lost[NEXPERTS];
    int                      mark[4], n_lost, e;

    (void)state;
    cluster4(ranks, mark);
    assert_int_equal(eep_view_machine_fault(&ranks[0].m, 2, "dispatch timeout"), EEP_OK);
    assert_int_equal(eep_view_machine_fault(&ranks[0].m, 2, "combine timeout"), EEP_OK);
    assert_int_equal(n_reports, 1);
    assert_string_equal(reports[0].reporter, "a");
    assert_int_equal(reports[0].rank, 2);
    assert_int_equal(reports[0].epoch, 1);
    assert_string_equal(reports[0].reason, "dispatch timeout");
    assert_int_equal(ranks[0].m.state, EEP_VIEW_STATE_DEGRADED);
    assert_int_equal(eep_view_machine_dead(&ranks[0].m, 2), 1);
    assert_int_equal(eep_view_machine_dead(&ranks[0].m, 1), 0);
    assert_int_equal(eep_view_machine_lost_experts(&ranks[0].m, lost, &n_lost), EEP_OK);
    assert_int_equal(n_lost, NEXPERTS / 4);
    for (e = 0; e < NEXPERTS; e++) {
        assert_int_equal(lost[e], e / 4 == 2);
    }
    assert_int_equal(eep_view_machine_fault(&ranks[0].m, 4, "x"), EEP_ERR_INVALID_ARG);
    /* Nothing was rebuilt on the fault alone. */
    expect_log(&ranks[0].fc, mark[0], NULL);

    apply_all(ranks, 4, 2, ABD, 3, 0, EEP_OK);
    expect_log(&ranks[0].fc, mark[0], "shrink c1 -[2] -> c2", "window c2", "devcomm c2", "abort c1",
               NULL);
    assert_int_equal(ranks[0].m.state, EEP_VIEW_STATE_RUNNING);
    assert_int_equal(eep_view_machine_lost_experts(&ranks[0].m, NULL, &n_lost), EEP_OK);
    assert_int_equal(n_lost, 0);
    cluster_cleanup(ranks, 4);
}

/* A fault on d is pending when a view arrives that removes b but keeps d: shrink without b, d
   stays dead under its new rank; a view that changes nothing keeps the fault; the view without d
   ends it.  A fault with no known suspect lasts until the communicator is rebuilt. */
static void test_view_while_fault_pending(void **state)
{
    static const char *const ACD[] = { "a", "c", "d" };
    static const char *const AC[]  = { "a", "c" };
    fake_rank_t              ranks[4];
    uint8_t                  lost[NEXPERTS];
    tview_t                  t;
    int                      mark[4], n_lost, e;

    (void)state;
    cluster4(ranks, mark);
    assert_int_equal(eep_view_machine_fault(&ranks[0].m, 3, "barrier timeout"), EEP_OK);
    assert_int_equal(eep_view_machine_apply(&ranks[0].m, tview(&t, 2, ACD, 3, "a", 0), NULL),
                     EEP_OK);
    expect_log(&ranks[0].fc, mark[0], "shrink c1 -[1] -> c2", "window c2", "devcomm c2", "abort c1",
               NULL);
    assert_int_equal(ranks[0].m.state, EEP_VIEW_STATE_DEGRADED);
    assert_int_equal(eep_view_machine_dead(&ranks[0].m, 2), 1); /* d, now rank 2 */
    assert_int_equal(eep_view_machine_dead(&ranks[0].m, 1), 0);
    assert_int_equal(eep_view_machine_lost_experts(&ranks[0].m, lost, &n_lost), EEP_OK);
    for (e = 0; e < NEXPERTS; e++) {
        assert_int_equal(lost[e], t.pl[e].rank == 2);
    }
    assert_true(n_lost == 5 || n_lost == 6);
    /* Same members, new epoch: nothing to rebuild, still degraded; d's fault is reported again
       if it recurs in this epoch. */
    mark[0] = ranks[0].fc.n;
    assert_int_equal(eep_view_machine_apply(&ranks[0].m, tview(&t, 3, ACD, 3, "a", 0), NULL),
                     EEP_OK);
    expect_log(&ranks[0].fc, mark[0], NULL);
    assert_int_equal(ranks[0].m.state, EEP_VIEW_STATE_DEGRADED);
    assert_int_equal(eep_view_machine_fault(&ranks[0].m, 2, "barrier timeout"), EEP_OK);
    assert_int_equal(n_reports, 2);
    assert_int_equal(reports[1].epoch, 3);
    /* The view without d. */
    assert_int_equal(eep_view_machine_apply(&ranks[0].m, tview(&t, 4, AC, 2, "a", 0), NULL),
                     EEP_OK);
    assert_int_equal(ranks[0].m.state, EEP_VIEW_STATE_RUNNING);
    /* An unknown suspect: degraded, reported, no one dead; kept by a view that changes nothing. */
    assert_int_equal(eep_view_machine_fault(&ranks[0].m, -1, "device fault"), EEP_OK);
    assert_int_equal(reports[2].rank, -1);
    assert_int_equal(ranks[0].m.state, EEP_VIEW_STATE_DEGRADED);
    assert_int_equal(eep_view_machine_apply(&ranks[0].m, tview(&t, 5, AC, 2, "a", 0), NULL),
                     EEP_OK);
    assert_int_equal(ranks[0].m.state, EEP_VIEW_STATE_DEGRADED);
    assert_int_equal(eep_view_machine_apply(
                         &ranks[0].m, tview(&t, 6, (const char *const[]){ "a" }, 1, "a", 0), NULL),
                     EEP_OK);
    assert_int_equal(ranks[0].m.state, EEP_VIEW_STATE_RUNNING);
    cluster_cleanup(ranks, 4);
}

/* Every survivor's shrink fails: each falls back to a fresh communicator under attempt 1, whose
   id the root publishes; the old set still goes last. */
static void test_failed_shrink_falls_back(void **state)
{
    static const char *const ABD[] = { "a", "b", "d" };
    fake_rank_t              ranks[4];
    eep_view_plan_t          plan;
    tview_t                  t;
    int                      mark[4];

    (void)state;
    cluster4(ranks, mark);
    ranks[0].fc.fail_shrink = 1;
    ranks[1].fc.fail_shrink = 1;
    ranks[3].fc.fail_window = 1; /* d's shrink works, its window on the shrunk comm does not */
    apply_all(ranks, 4, 2, ABD, 3, 0, EEP_OK);
    expect_log(&ranks[0].fc, mark[0], "shrink c1 -[2] failed", "uid u2", "publish e2 a1 u2",
               "create u2 world 3 rank 0 -> c2", "window c2", "devcomm c2", "abort c1", NULL);
    expect_log(&ranks[1].fc, mark[1], "shrink c1 -[2] failed", "fetch e2 a1 u2",
               "create u2 world 3 rank 1 -> c2", "window c2", "devcomm c2", "abort c1", NULL);
    expect_log(&ranks[3].fc, mark[3], "shrink c1 -[2] -> c2", "window c2 failed", "discard c2",
               "fetch e2 a1 u2", "create u2 world 3 rank 2 -> c3", "window c3", "devcomm c3",
               "abort c1", NULL);
    assert_int_equal(ranks[0].m.stats.fallbacks, 1);
    assert_int_equal(ranks[0].m.stats.shrinks, 0);
    assert_int_equal(ranks[0].m.stats.fresh, 2);
    /* The plan reports what was done. */
    ranks[0].fc.fail_shrink = 1;
    assert_int_equal(
        eep_view_machine_apply(&ranks[0].m,
                               tview(&t, 3, (const char *const[]){ "a", "b" }, 2, "a", 0), &plan),
        EEP_OK);
    assert_int_equal(plan.action, EEP_VIEW_ACTION_FRESH);
    assert_string_equal(plan.why, "the shrink failed");
    cluster_cleanup(ranks, 4);
}

/* The shrink fails on b only: a and d go on with the shrunk comm, b finds no fallback id (the
   root did not need one), times out, aborts its old set, reports itself and is FAILED; the view
   that removes it fences it; it rejoins as a newcomer with a fresh communicator. */
static void test_partial_shrink_failure(void **state)
{
    static const char *const ABD[]  = { "a", "b", "d" };
    static const char *const AD[]   = { "a", "d" };
    static const char *const ADB2[] = { "a", "d", "b2" };
    fake_rank_t              ranks[4];
    tview_t                  t;
    int                      mark[4];

    (void)state;
    cluster4(ranks, mark);
    ranks[1].fc.fail_shrink = 1;
    assert_int_equal(eep_view_machine_apply(&ranks[0].m, tview(&t, 2, ABD, 3, "a", 0), NULL),
                     EEP_OK);
    assert_int_equal(eep_view_machine_apply(&ranks[1].m, tview(&t, 2, ABD, 3, "b", 0), NULL),
                     EEP_ERR_TIMEOUT);
    expect_log(&ranks[1].fc, mark[1], "shrink c1 -[2] failed", "fetch e2 a1 timeout", "abort c1",
               NULL);
    assert_int_equal(ranks[1].m.state, EEP_VIEW_STATE_FAILED);
    assert_int_equal(ranks[1].m.stats.failed, 1);
    assert_int_equal(n_reports, 1);
    assert_string_equal(reports[0].reporter, "b");
    assert_int_equal(reports[0].rank, 1); /* itself */
    assert_int_equal(reports[0].epoch, 2);
    /* A fault while FAILED has nothing to act on. */
    assert_int_equal(eep_view_machine_fault(&ranks[1].m, 0, "x"), EEP_ERR_FENCED);
    assert_int_equal(eep_view_machine_apply(&ranks[3].m, tview(&t, 2, ABD, 3, "d", 0), NULL),
                     EEP_OK);
    /* eepd evicts b: a and d shrink from the epoch-2 comm (b is its rank 1); b is fenced. */
    apply_all(ranks, 4, 3, AD, 2, 0, EEP_OK);
    expect_log(&ranks[3].fc, mark[3], "shrink c1 -[2] -> c2", "window c2", "devcomm c2", "abort c1",
               "shrink c2 -[1] -> c3", "window c3", "devcomm c3", "abort c2", NULL);
    assert_int_equal(eep_view_machine_apply(&ranks[1].m, tview(&t, 3, AD, 2, "b", 0), NULL),
                     EEP_ERR_FENCED);
    assert_int_equal(ranks[1].m.state, EEP_VIEW_STATE_FENCED);
    ranks[1].id = "b2";
    apply_all(ranks, 4, 4, ADB2, 3, 0, EEP_OK);
    assert_int_equal(ranks[1].m.state, EEP_VIEW_STATE_RUNNING);
    assert_int_equal(ranks[1].m.view.my_rank, 2);
    cluster_cleanup(ranks, 4);
}

/* A survivor whose new communicator cannot be made (an addition: a fresh one): FAILED, its old set
   aborted, reported naming itself; once it rejoins (a new member id), the next view's fresh
   communicator takes it in. */
static void test_fresh_failure(void **state)
{
    static const char *const ABCDE[]  = { "a", "b", "c", "d", "e" };
    static const char *const ABDEC2[] = { "a", "b", "d", "e", "c2" };
    fake_rank_t              ranks[5];
    tview_t                  t;
    int                      mark[4], i;

    (void)state;
    cluster4(ranks, mark);
    rank_init(&ranks[4], "e");
    ranks[2].fc.fail_create = 1;
    for (i = 0; i < 5; i++) {
        assert_int_equal(
            eep_view_machine_apply(&ranks[i].m, tview(&t, 2, ABCDE, 5, ranks[i].id, 0), NULL),
            i == 2 ? EEP_ERR_NCCL : EEP_OK);
    }
    expect_log(&ranks[2].fc, mark[2], "fetch e2 a0 u2", "create u2 world 5 rank 2 failed",
               "abort c1", NULL);
    assert_int_equal(ranks[2].m.state, EEP_VIEW_STATE_FAILED);
    assert_int_equal(n_reports, 1);
    assert_int_equal(reports[0].rank, 2);
    assert_string_equal(reports[0].reason, "view apply failed");
    /* c rejoins as c2: an addition for everyone, a fresh communicator for all five. */
    ranks[2].id = "c2";
    apply_all(ranks, 5, 3, ABDEC2, 5, 0, EEP_OK);
    expect_log(&ranks[2].fc, mark[2] + 3, "fetch e3 a0 u3", "create u3 world 5 rank 4 -> c2",
               "window c2", "devcomm c2", NULL);
    assert_int_equal(ranks[2].m.state, EEP_VIEW_STATE_RUNNING);
    for (i = 0; i < 5; i++) {
        assert_int_equal(ranks[i].m.view.epoch, 3);
    }
    cluster_cleanup(ranks, 5);
}

/*
 * A member skipped a view (it went straight to a newer one): the others' waits for it are given
 * up (EEP_ERR_STALE_EPOCH from the comm step).  Nothing changes - no fallback, no report, the old
 * set kept - and the newer view is applied from the old one, which is what the skipper does too:
 * the same exclusion list everywhere.
 */
static void test_abandoned_view(void **state)
{
    static const char *const ABC[] = { "a", "b", "c" };
    static const char *const AB[]  = { "a", "b" };
    static const char *const ABE[] = { "a", "b", "e" };
    fake_rank_t              ranks[5];
    tview_t                  t;
    int                      mark[4], i;

    (void)state;
    cluster4(ranks, mark);
    for (i = 0; i < 2; i++) {
        ranks[i].fc.abandon = 1;
        assert_int_equal(
            eep_view_machine_apply(&ranks[i].m, tview(&t, 2, ABC, 3, ranks[i].id, 0), NULL),
            EEP_ERR_STALE_EPOCH);
        expect_log(&ranks[i].fc, mark[i], "shrink c1 -[3] abandoned", NULL);
        assert_int_equal(ranks[i].m.state, EEP_VIEW_STATE_RUNNING);
        assert_int_equal(ranks[i].m.view.epoch, 1);
        assert_int_equal(ID(ranks[i].m.set.comm), 1);
        assert_int_equal(ranks[i].m.stats.abandoned, 1);
        assert_int_equal(ranks[i].m.stats.fallbacks, 0);
        /* the abandoned epoch counts as seen */
        assert_int_equal(
            eep_view_machine_apply(&ranks[i].m, tview(&t, 2, ABC, 3, ranks[i].id, 0), NULL),
            EEP_ERR_STALE_EPOCH);
        assert_int_equal(ranks[i].m.stats.refused, 1);
        mark[i] = ranks[i].fc.n;
    }
    assert_int_equal(n_reports, 0);
    /* c never applied 2 and dies; epoch 3 is shrunk from epoch 1's comm by a and b alike */
    apply_all(ranks, 2, 3, AB, 2, 0, EEP_OK);
    for (i = 0; i < 2; i++) {
        expect_log(&ranks[i].fc, mark[i], "shrink c1 -[2,3] -> c2", "window c2", "devcomm c2",
                   "abort c1", NULL);
        assert_int_equal(ranks[i].m.view.world, 2);
        mark[i] = ranks[i].fc.n;
    }
    /* A newcomer whose fresh communicator is given up stays a newcomer, with nothing to undo. */
    rank_init(&ranks[4], "e");
    ranks[4].fc.abandon = 1;
    apply_all(ranks, 2, 4, ABE, 3, 0, EEP_OK);
    assert_int_equal(eep_view_machine_apply(&ranks[4].m, tview(&t, 4, ABE, 3, "e", 0), NULL),
                     EEP_ERR_STALE_EPOCH);
    expect_log(&ranks[4].fc, 0, "fetch e4 a0 u2", "create u2 world 3 rank 2 abandoned", NULL);
    assert_int_equal(ranks[4].m.state, EEP_VIEW_STATE_NONE);
    assert_null(ranks[4].m.set.comm);
    assert_int_equal(ranks[4].m.last_epoch, 4);
    assert_int_equal(n_reports, 0);
    cluster_cleanup(ranks, 2);
    eep_view_machine_cleanup(&ranks[2].m);
    eep_view_machine_cleanup(&ranks[3].m);
    eep_view_machine_cleanup(&ranks[4].m);
}

/*
 * params.release_early (EEP_VIEW_RELEASE_EARLY): a fresh view hands the old set to abort_async
 * before it builds the new one (the release overlaps the creation); a shrink keeps the usual
 * order.  A fresh view given up after that leaves no set: state FAILED, no report, and the newer
 * view is fresh on every member alike, even where it only removes members.
 */
static void test_release_early(void **state)
{
    static const char *const ABCDE[] = { "a", "b", "c", "d", "e" };
    static const char *const ABCDF[] = { "a", "b", "c", "d", "f" };
    fake_rank_t              ranks[5];
    tview_t                  t;
    int                      mark[4], i;

    (void)state;
    cluster4(ranks, mark);
    for (i = 0; i < 4; i++) {
        ranks[i].m.p.release_early = 1;
    }
    rank_init(&ranks[4], "e");
    apply_all(ranks, 5, 2, ABCDE, 5, 0, EEP_OK);
    expect_log(&ranks[0].fc, mark[0], "abort c1", "uid u2", "publish e2 a0 u2",
               "create u2 world 5 rank 0 -> c2", "window c2", "devcomm c2", NULL);
    expect_log(&ranks[2].fc, mark[2], "abort c1", "fetch e2 a0 u2",
               "create u2 world 5 rank 2 -> c2", "window c2", "devcomm c2", NULL);
    for (i = 0; i < 4; i++) {
        assert_int_equal(ranks[i].m.state, EEP_VIEW_STATE_RUNNING);
        assert_int_equal(ID(ranks[i].m.set.comm), 2);
        mark[i] = ranks[i].fc.n;
    }
    /* a shrink: the old set goes after the new one is made, as without the flag */
    apply_all(ranks, 4, 3, ABCD, 4, 0, EEP_OK);
    expect_log(&ranks[1].fc, mark[1], "shrink c2 -[4] -> c3", "window c3", "devcomm c3", "abort c2",
               NULL);
    for (i = 0; i < 4; i++) {
        mark[i] = ranks[i].fc.n;
    }
    /* a newcomer f that never comes: every member gives the fresh view up, with no set left */
    for (i = 0; i < 4; i++) {
        ranks[i].fc.abandon = 1;
        assert_int_equal(
            eep_view_machine_apply(&ranks[i].m, tview(&t, 4, ABCDF, 5, ranks[i].id, 0), NULL),
            EEP_ERR_STALE_EPOCH);
        assert_int_equal(ranks[i].m.state, EEP_VIEW_STATE_FAILED);
        assert_null(ranks[i].m.set.comm);
        assert_int_equal(ranks[i].m.stats.abandoned, 1);
        assert_int_equal(eep_view_machine_fault(&ranks[i].m, 1, "dispatch timeout"),
                         EEP_ERR_FENCED);
    }
    expect_log(&ranks[0].fc, mark[0], "abort c3", "uid u3", "publish e4 a0 u3",
               "create u3 world 5 rank 0 abandoned", NULL);
    expect_log(&ranks[3].fc, mark[3], "abort c3", "fetch e4 a0 u3",
               "create u3 world 5 rank 3 abandoned", NULL);
    assert_int_equal(n_reports, 0);
    for (i = 0; i < 4; i++) {
        mark[i] = ranks[i].fc.n;
    }
    /* the newer view has epoch 3's members: fresh on all (no set to shrink), nothing to abort */
    apply_all(ranks, 4, 5, ABCD, 4, 0, EEP_OK);
    expect_log(&ranks[0].fc, mark[0], "uid u4", "publish e5 a0 u4",
               "create u4 world 4 rank 0 -> c4", "window c4", "devcomm c4", NULL);
    expect_log(&ranks[2].fc, mark[2], "fetch e5 a0 u4", "create u4 world 4 rank 2 -> c4",
               "window c4", "devcomm c4", NULL);
    for (i = 0; i < 4; i++) {
        assert_int_equal(ranks[i].m.state, EEP_VIEW_STATE_RUNNING);
        assert_int_equal(ranks[i].m.view.epoch, 5);
    }
    assert_int_equal(n_reports, 0);
    cluster_cleanup(ranks, 4);
    eep_view_machine_cleanup(&ranks[4].m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_timeout_fault_before_view, setup),
        cmocka_unit_test_setup(test_view_while_fault_pending, setup),
        cmocka_unit_test_setup(test_failed_shrink_falls_back, setup),
        cmocka_unit_test_setup(test_partial_shrink_failure, setup),
        cmocka_unit_test_setup(test_fresh_failure, setup),
        cmocka_unit_test_setup(test_abandoned_view, setup),
        cmocka_unit_test_setup(test_release_early, setup),
    };

    eep_log_set_level(EEP_LOG_LEVEL_ERROR);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
