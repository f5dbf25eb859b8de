/*
 * test_view_apply.c - the view-application state machine (elastic/runtime/runtime_view.h) as
 * decided, driven by the FAKE communicator and membership provider of view_apply_fake.h: the
 * decision from every survivor's seat, first views, shrinks (the exclusion list every survivor
 * agrees on), fresh communicators, a view that removes this rank, stale epochs, two views in a
 * row, and the order (new comm, window, device comm, then the old set's abort).  Faults, failures
 * and views given up: test_view_faults.c.
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

/* The decision alone, from every survivor's seat: the same action and exclusion list. */
static void test_decide(void **state)
{
    static const char *const ABD[]   = { "a", "b", "d" };
    static const char *const BD[]    = { "b", "d" };
    static const char *const ABCDE[] = { "a", "b", "c", "d", "e" };
    static const char *const ABDE[]  = { "a", "b", "d", "e" };
    static const char *const BACD[]  = { "b", "a", "c", "d" };
    const char *const        seat[]  = { "a", "b", "d" };
    eep_view_copy_t          cur;
    eep_view_plan_t          plan;
    tview_t                  t;
    char                    *ids[4] = { "a", "b", "c", "d" };
    int                      i;

    (void)state;
    memset(&cur, 0, sizeof(cur));
    cur.epoch      = 1;
    cur.world      = 4;
    cur.member_ids = ids;
    for (i = 0; i < 3; i++) {
        cur.my_rank = seat[i][0] == 'd' ? 3 : seat[i][0] - 'a';
        assert_int_equal(eep_view_decide(&cur, 1, 1, tview(&t, 2, ABD, 3, seat[i], 0), &plan),
                         EEP_OK);
        assert_int_equal(plan.action, EEP_VIEW_ACTION_SHRINK);
        assert_int_equal(plan.n_exclude, 1);
        assert_int_equal(plan.exclude[0], 2);
        assert_int_equal(plan.new_world, 3);
    }
    cur.my_rank = 1;
    assert_int_equal(eep_view_decide(&cur, 1, 1, tview(&t, 2, BD, 2, "b", 0), &plan), EEP_OK);
    assert_int_equal(plan.action, EEP_VIEW_ACTION_SHRINK);
    assert_int_equal(plan.n_exclude, 2);
    assert_int_equal(plan.exclude[0], 0);
    assert_int_equal(plan.exclude[1], 2);
    assert_int_equal(plan.new_rank, 0);
    assert_int_equal(eep_view_decide(&cur, 1, 1, tview(&t, 2, ABCD, 4, "b", 0), &plan), EEP_OK);
    assert_int_equal(plan.action, EEP_VIEW_ACTION_NONE);
    assert_int_equal(eep_view_decide(&cur, 1, 1, tview(&t, 2, ABCDE, 5, "b", 0), &plan), EEP_OK);
    assert_int_equal(plan.action, EEP_VIEW_ACTION_FRESH);
    assert_string_equal(plan.why, "the view adds members");
    assert_int_equal(eep_view_decide(&cur, 1, 1, tview(&t, 2, ABDE, 4, "b", 0), &plan), EEP_OK);
    assert_int_equal(plan.action, EEP_VIEW_ACTION_FRESH);
    assert_int_equal(plan.n_exclude, 0);
    assert_int_equal(eep_view_decide(&cur, 1, 1, tview(&t, 2, BACD, 4, "b", 0), &plan), EEP_OK);
    assert_int_equal(plan.action, EEP_VIEW_ACTION_FRESH);
    assert_string_equal(plan.why, "the view reorders the survivors");
    assert_int_equal(eep_view_decide(&cur, 1, 1, tview(&t, 2, ABD, 3, "c", 0), &plan), EEP_OK);
    assert_int_equal(plan.action, EEP_VIEW_ACTION_REFUSE_REMOVED);
    assert_int_equal(eep_view_decide(&cur, 1, 2, tview(&t, 2, ABD, 3, "b", 0), &plan), EEP_OK);
    assert_int_equal(plan.action, EEP_VIEW_ACTION_REFUSE_STALE);
    /* Without a usable communicator only a fresh one will do, whatever the views say. */
    assert_int_equal(eep_view_decide(&cur, 0, 1, tview(&t, 2, ABD, 3, "b", 0), &plan), EEP_OK);
    assert_int_equal(plan.action, EEP_VIEW_ACTION_FRESH);
    assert_int_equal(eep_view_decide(NULL, 0, 0, tview(&t, 1, ABD, 3, "b", 0), &plan), EEP_OK);
    assert_int_equal(plan.action, EEP_VIEW_ACTION_FRESH);
    assert_int_equal(eep_view_decide(&cur, 1, 1, NULL, &plan), EEP_ERR_INVALID_ARG);
}

/* The first view: the root makes and publishes the id, every other rank fetches it. */
static void test_first_view_is_fresh(void **state)
{
    fake_rank_t ranks[4];
    int         mark[4];

    (void)state;
    cluster4(ranks, mark);
    expect_log(&ranks[0].fc, 0, "uid u1", "publish e1 a0 u1", "create u1 world 4 rank 0 -> c1",
               "window c1", "devcomm c1", NULL);
    expect_log(&ranks[2].fc, 0, "fetch e1 a0 u1", "create u1 world 4 rank 2 -> c1", "window c1",
               "devcomm c1", NULL);
    assert_int_equal(ranks[2].m.view.epoch, 1);
    assert_int_equal(ranks[2].m.stats.fresh, 1);
    cluster_cleanup(ranks, 4);
    /* Cleanup hands the set to abort_async. */
    expect_log(&ranks[3].fc, mark[3], "abort c1", NULL);
}

static void test_remove_one_shrinks(void **state)
{
    static const char *const ABD[] = { "a", "b", "d" };
    fake_rank_t              ranks[4];
    int                      mark[4], i;

    (void)state;
    cluster4(ranks, mark);
    apply_all(ranks, 4, 2, ABD, 3, 0, EEP_OK);
    for (i = 0; i < 4; i++) {
        if (i == 2) {
            continue;
        }
        /* New comm, window, dev comm, and only then the old set's abort. */
        expect_log(&ranks[i].fc, mark[i], "shrink c1 -[2] -> c2", "window c2", "devcomm c2",
                   "abort c1", NULL);
        assert_int_equal(ranks[i].m.state, EEP_VIEW_STATE_RUNNING);
        assert_int_equal(ranks[i].m.view.world, 3);
        assert_int_equal(ranks[i].m.set.comm, COMM(2));
        assert_int_equal(ranks[i].m.stats.shrinks, 1);
    }
    assert_int_equal(ranks[3].m.view.my_rank, 2);
    /* No unique id was needed. */
    assert_int_equal(n_store, 1);
    cluster_cleanup(ranks, 4);
}

static void test_remove_several_shrinks(void **state)
{
    static const char *const BD[] = { "b", "d" };
    fake_rank_t              ranks[4];
    int                      mark[4];

    (void)state;
    cluster4(ranks, mark);
    apply_all(ranks, 4, 2, BD, 2, 0, EEP_OK);
    expect_log(&ranks[1].fc, mark[1], "shrink c1 -[0,2] -> c2", "window c2", "devcomm c2",
               "abort c1", NULL);
    expect_log(&ranks[3].fc, mark[3], "shrink c1 -[0,2] -> c2", "window c2", "devcomm c2",
               "abort c1", NULL);
    assert_int_equal(ranks[1].m.view.my_rank, 0);
    assert_int_equal(ranks[3].m.view.my_rank, 1);
    cluster_cleanup(ranks, 4);
}

/* Rank 0 (the root) dies: the survivors shrink without it, and the next fresh communicator's id
   comes from the new root. */
static void test_remove_rank0_root_moves(void **state)
{
    static const char *const BCD[]  = { "b", "c", "d" };
    static const char *const BCDE[] = { "b", "c", "d", "e" };
    fake_rank_t              ranks[5];
    int                      mark[4];

    (void)state;
    cluster4(ranks, mark);
    apply_all(ranks, 4, 2, BCD, 3, 0, EEP_OK);
    expect_log(&ranks[1].fc, mark[1], "shrink c1 -[0] -> c2", "window c2", "devcomm c2", "abort c1",
               NULL);
    assert_int_equal(ranks[1].m.view.root, 0);
    assert_int_equal(ranks[1].m.view.my_rank, 0);
    mark[1] = ranks[1].fc.n;
    mark[3] = ranks[3].fc.n;
    /* A newcomer: b, now rank 0 and root, publishes. */
    rank_init(&ranks[4], "e");
    apply_all(ranks + 1, 4, 3, BCDE, 4, 0, EEP_OK);
    expect_log(&ranks[1].fc, mark[1], "uid u2", "publish e3 a0 u2",
               "create u2 world 4 rank 0 -> c3", "window c3", "devcomm c3", "abort c2", NULL);
    expect_log(&ranks[4].fc, 0, "fetch e3 a0 u2", "create u2 world 4 rank 3 -> c1", "window c1",
               "devcomm c1", NULL);
    cluster_cleanup(ranks, 5);
}

static void test_addition_is_fresh(void **state)
{
    static const char *const ABCDE[] = { "a", "b", "c", "d", "e" };
    fake_rank_t              ranks[5];
    int                      mark[4];

    (void)state;
    cluster4(ranks, mark);
    rank_init(&ranks[4], "e");
    apply_all(ranks, 5, 2, ABCDE, 5, 0, EEP_OK);
    expect_log(&ranks[0].fc, mark[0], "uid u2", "publish e2 a0 u2",
               "create u2 world 5 rank 0 -> c2", "window c2", "devcomm c2", "abort c1", NULL);
    expect_log(&ranks[2].fc, mark[2], "fetch e2 a0 u2", "create u2 world 5 rank 2 -> c2",
               "window c2", "devcomm c2", "abort c1", NULL);
    expect_log(&ranks[4].fc, 0, "fetch e2 a0 u2", "create u2 world 5 rank 4 -> c1", "window c1",
               "devcomm c1", NULL);
    assert_int_equal(ranks[4].m.state, EEP_VIEW_STATE_RUNNING);
    cluster_cleanup(ranks, 5);
}

static void test_removal_and_addition_is_fresh(void **state)
{
    static const char *const ABDE[] = { "a", "b", "d", "e" };
    fake_rank_t              ranks[5];
    int                      mark[4];

    (void)state;
    cluster4(ranks, mark);
    rank_init(&ranks[4], "e");
    apply_all(ranks, 5, 2, ABDE, 4, 0, EEP_OK);
    expect_log(&ranks[3].fc, mark[3], "fetch e2 a0 u2", "create u2 world 4 rank 2 -> c2",
               "window c2", "devcomm c2", "abort c1", NULL);
    /* c is not in the view: it was not asked (apply_all skips it); ask it now. */
    {
        tview_t t;

        assert_int_equal(eep_view_machine_apply(&ranks[2].m, tview(&t, 2, ABDE, 4, "c", 0), NULL),
                         EEP_ERR_FENCED);
        expect_log(&ranks[2].fc, mark[2], "abort c1", NULL);
    }
    cluster_cleanup(ranks, 5);
}

/* A view that removes this rank: fenced, its old set aborted; later readmitted as a new member. */
static void test_view_removes_this_rank(void **state)
{
    static const char *const ABD[]  = { "a", "b", "d" };
    static const char *const ABDC[] = { "a", "b", "d", "c2" };
    fake_rank_t              ranks[4];
    eep_view_plan_t          plan;
    tview_t                  t;
    int                      mark[4];

    (void)state;
    cluster4(ranks, mark);
    assert_int_equal(eep_view_machine_apply(&ranks[2].m, tview(&t, 2, ABD, 3, "c", 0), &plan),
                     EEP_ERR_FENCED);
    assert_int_equal(plan.action, EEP_VIEW_ACTION_REFUSE_REMOVED);
    assert_int_equal(ranks[2].m.state, EEP_VIEW_STATE_FENCED);
    expect_log(&ranks[2].fc, mark[2], "abort c1", NULL);
    /* A zombie's kernel fault after the fence changes nothing. */
    assert_int_equal(eep_view_machine_fault(&ranks[2].m, 0, "dispatch timeout"), EEP_ERR_FENCED);
    assert_int_equal(n_reports, 0);
    /* The old epoch again is stale even for a fenced rank. */
    assert_int_equal(eep_view_machine_apply(&ranks[2].m, tview(&t, 2, ABD, 3, "c", 0), NULL),
                     EEP_ERR_STALE_EPOCH);
    /* The others shrink; then c rejoins as member c2 (a new id): a fresh comm for all. */
    apply_all(ranks, 4, 2, ABD, 3, 0, EEP_OK);
    ranks[2].id = "c2";
    apply_all(ranks, 4, 3, ABDC, 4, 0, EEP_OK);
    expect_log(&ranks[2].fc, mark[2] + 1, "fetch e3 a0 u2", "create u2 world 4 rank 3 -> c2",
               "window c2", "devcomm c2", NULL);
    assert_int_equal(ranks[2].m.state, EEP_VIEW_STATE_RUNNING);
    cluster_cleanup(ranks, 4);
}

static void test_stale_and_duplicate_epochs(void **state)
{
    static const char *const ABD[] = { "a", "b", "d" };
    fake_rank_t              ranks[4];
    tview_t                  t;
    int                      mark[4];

    (void)state;
    cluster4(ranks, mark);
    apply_all(ranks, 4, 2, ABD, 3, 0, EEP_OK);
    mark[1] = ranks[1].fc.n;
    /* The same epoch again (a duplicate delivery), then an older one: nothing is touched. */
    assert_int_equal(eep_view_machine_apply(&ranks[1].m, tview(&t, 2, ABD, 3, "b", 0), NULL),
                     EEP_ERR_STALE_EPOCH);
    assert_int_equal(eep_view_machine_apply(&ranks[1].m, tview(&t, 1, ABCD, 4, "b", 0), NULL),
                     EEP_ERR_STALE_EPOCH);
    expect_log(&ranks[1].fc, mark[1], NULL);
    assert_int_equal(ranks[1].m.view.epoch, 2);
    assert_int_equal(ranks[1].m.stats.refused, 2);
    /* A malformed view (an expert on no rank of it) is refused before anything is decided. */
    tview(&t, 3, ABD, 3, "b", 0);
    t.pl[5].rank = 3;
    assert_int_equal(eep_view_machine_apply(&ranks[1].m, &t.v, NULL), EEP_ERR_INVALID_ARG);
    assert_int_equal(ranks[1].m.last_epoch, 2);
    expect_log(&ranks[1].fc, mark[1], NULL);
    cluster_cleanup(ranks, 4);
}

/* Two views in a row: each shrink's exclusion list is in the previous view's rank order. */
static void test_two_views_in_a_row(void **state)
{
    static const char *const ABC[] = { "a", "b", "c" };
    static const char *const AC[]  = { "a", "c" };
    fake_rank_t              ranks[4];
    int                      mark[4];

    (void)state;
    cluster4(ranks, mark);
    apply_all(ranks, 4, 2, ABC, 3, 0, EEP_OK);
    apply_all(ranks, 4, 3, AC, 2, 0, EEP_OK);
    expect_log(&ranks[2].fc, mark[2], "shrink c1 -[3] -> c2", "window c2", "devcomm c2", "abort c1",
               "shrink c2 -[1] -> c3", "window c3", "devcomm c3", "abort c2", NULL);
    assert_int_equal(ranks[2].m.view.my_rank, 1);
    assert_int_equal(ranks[2].m.view.epoch, 3);
    assert_int_equal(ranks[0].m.stats.shrinks, 2);
    cluster_cleanup(ranks, 4);
}

static void test_init_arguments(void **state)
{
    eep_view_machine_params_t p;
    eep_view_machine_t        m;
    eep_membership_t          ms = { &fake_membership_ops, NULL };

    (void)state;
    memset(&p, 0, sizeof(p));
    p.size     = sizeof(p);
    p.comm_ops = &fake_comm_ops;
    assert_int_equal(eep_view_machine_init(&m, &p), EEP_ERR_INVALID_ARG); /* no membership */
    p.membership = &ms;
    p.timeout_ms = -1;
    assert_int_equal(eep_view_machine_init(&m, &p), EEP_ERR_INVALID_ARG);
    p.timeout_ms = 0;
    p.size       = 4;
    assert_int_equal(eep_view_machine_init(&m, &p), EEP_ERR_INVALID_ARG);
    p.size = sizeof(p);
    assert_int_equal(eep_view_machine_init(&m, &p), EEP_OK);
    assert_int_equal(m.p.timeout_ms, 10000);
    assert_int_equal(m.state, EEP_VIEW_STATE_NONE);
    assert_int_equal(eep_view_machine_lost_experts(&m, NULL, NULL), EEP_ERR_NOT_FOUND);
    assert_int_equal(eep_view_machine_fault(&m, 0, "x"), EEP_ERR_FENCED);
    assert_string_equal(eep_view_state_name(EEP_VIEW_STATE_DEGRADED), "degraded");
    assert_string_equal(eep_view_action_name(EEP_VIEW_ACTION_SHRINK), "shrink");
    eep_view_machine_cleanup(&m);
    eep_view_machine_cleanup(NULL);
    assert_int_equal(eep_view_machine_apply(NULL, NULL, NULL), EEP_ERR_INVALID_ARG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_decide, setup),
        cmocka_unit_test_setup(test_first_view_is_fresh, setup),
        cmocka_unit_test_setup(test_remove_one_shrinks, setup),
        cmocka_unit_test_setup(test_remove_several_shrinks, setup),
        cmocka_unit_test_setup(test_remove_rank0_root_moves, setup),
        cmocka_unit_test_setup(test_addition_is_fresh, setup),
        cmocka_unit_test_setup(test_removal_and_addition_is_fresh, setup),
        cmocka_unit_test_setup(test_view_removes_this_rank, setup),
        cmocka_unit_test_setup(test_stale_and_duplicate_epochs, setup),
        cmocka_unit_test_setup(test_two_views_in_a_row, setup),
        cmocka_unit_test_setup(test_init_arguments, setup),
    };

    eep_log_set_level(EEP_LOG_LEVEL_ERROR);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
