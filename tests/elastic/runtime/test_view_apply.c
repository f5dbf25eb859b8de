/*
 * test_view_apply.c - the view-application state machine (elastic/runtime/runtime_view.h) driven
 * by a FAKE communicator and a FAKE membership provider: no NCCL, no etcd.  Several ranks live in
 * this one process, each a machine with its own fake communicator log; the fake provider's store
 * of unique ids is shared, so the root must have published before the others fetch (they are
 * applied root first, as the bounded fetch would order them).  Every case checks the exact
 * sequence of communicator operations each rank made: what was decided, the exclusion list every
 * survivor agrees on, and the order (new comm, window, device comm, then the old set's abort).
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
#include "util/log.h"

#define MAXR     8
#define NEXPERTS 16

/* ---- the fake communicator ------------------------------------------------------------- */

typedef struct {
    char log[128][96];
    int  n;
    int  next_id;     /* comm ids of this rank: c1, c2, ... */
    int  fail_shrink; /* the next shrink fails */
    int  fail_window; /* the next window registration fails */
    int  fail_create; /* the next create fails */
    int  abandon;     /* the next shrink or create is given up: a newer view is waiting */
} fake_comm_t;

static void fc_log(fake_comm_t *fc, const char *fmt, ...)
{
    va_list ap;

    assert_true(fc->n < 128);
    va_start(ap, fmt);
    vsnprintf(fc->log[fc->n++], sizeof(fc->log[0]), fmt, ap);
    va_end(ap);
}

#define COMM(_id)   ((void *)(uintptr_t)(_id))
#define ID(_p)      ((int)(uintptr_t)(_p))
#define WINDOW_BASE 1000
#define DEVC_BASE   2000

static int uid_counter;

static eep_status_t fake_shrink(void *ctx, void *old_comm, const int *exclude, int n_exclude,
                                void **comm_p)
{
    fake_comm_t *fc        = ctx;
    char         list[256] = "";
    int          i;

    for (i = 0; i < n_exclude; i++) {
        snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%d", i ? "," : "",
                 exclude[i]);
    }
    if (fc->fail_shrink) {
        fc->fail_shrink = 0;
        fc_log(fc, "shrink c%d -[%s] failed", ID(old_comm), list);
        return EEP_ERR_PEER_TIMEOUT;
    }
    if (fc->abandon) {
        fc->abandon = 0;
        fc_log(fc, "shrink c%d -[%s] abandoned", ID(old_comm), list);
        return EEP_ERR_STALE_EPOCH;
    }
    *comm_p = COMM(++fc->next_id);
    fc_log(fc, "shrink c%d -[%s] -> c%d", ID(old_comm), list, fc->next_id);
    return EEP_OK;
}

static eep_status_t fake_uid_create(void *ctx, eep_comm_uid_t *uid_p)
{
    memset(uid_p, 0, sizeof(*uid_p));
    uid_p->bytes[0] = (unsigned char)++uid_counter;
    fc_log(ctx, "uid u%d", uid_counter);
    return EEP_OK;
}

static eep_status_t fake_create(void *ctx, const eep_comm_uid_t *uid, int world, int rank,
                                void **comm_p)
{
    fake_comm_t *fc = ctx;

    if (fc->abandon) {
        fc->abandon = 0;
        fc_log(fc, "create u%d world %d rank %d abandoned", uid->bytes[0], world, rank);
        return EEP_ERR_STALE_EPOCH;
    }
    if (fc->fail_create) {
        fc->fail_create = 0;
        fc_log(fc, "create u%d world %d rank %d failed", uid->bytes[0], world, rank);
        return EEP_ERR_NCCL;
    }
    *comm_p = COMM(++fc->next_id);
    fc_log(fc, "create u%d world %d rank %d -> c%d", uid->bytes[0], world, rank, fc->next_id);
    return EEP_OK;
}

static eep_status_t fake_window(void *ctx, void *comm, void **window_p)
{
    fake_comm_t *fc = ctx;

    if (fc->fail_window) {
        fc->fail_window = 0;
        fc_log(fc, "window c%d failed", ID(comm));
        return EEP_ERR_NCCL;
    }
    *window_p = COMM(WINDOW_BASE + ID(comm));
    fc_log(fc, "window c%d", ID(comm));
    return EEP_OK;
}

static eep_status_t fake_devcomm(void *ctx, void *comm, void *window, void **devcomm_p)
{
    assert_int_equal(ID(window), WINDOW_BASE + ID(comm));
    *devcomm_p = COMM(DEVC_BASE + ID(comm));
    fc_log(ctx, "devcomm c%d", ID(comm));
    return EEP_OK;
}

static void fake_discard(void *ctx, const eep_view_comm_set_t *set)
{
    fc_log(ctx, "discard c%d", ID(set->comm));
}

static void fake_abort_async(void *ctx, const eep_view_comm_set_t *set)
{
    /* A set handed here is complete: window and device communicator of the same comm. */
    assert_int_equal(ID(set->window), WINDOW_BASE + ID(set->comm));
    assert_int_equal(ID(set->devcomm), DEVC_BASE + ID(set->comm));
    fc_log(ctx, "abort c%d", ID(set->comm));
}

static const eep_view_comm_ops_t fake_comm_ops = {
    .name            = "fake",
    .shrink          = fake_shrink,
    .uid_create      = fake_uid_create,
    .create          = fake_create,
    .window_register = fake_window,
    .devcomm_create  = fake_devcomm,
    .discard         = fake_discard,
    .abort_async     = fake_abort_async,
};

/* ---- the fake membership provider (only what the machine calls) ------------------------- */

typedef struct {
    const char        *id;
    fake_comm_t        fc;
    eep_view_machine_t m;
    eep_membership_t   ms;
} fake_rank_t;

static struct {
    uint64_t       epoch;
    int            attempt;
    eep_comm_uid_t uid;
} store[64];
static int n_store;

static struct {
    const char *reporter;
    int         rank;
    uint64_t    epoch;
    char        reason[64];
} reports[64];
static int n_reports;

static eep_status_t fake_report(void *ctx, int world_rank, uint64_t epoch, const char *reason)
{
    fake_rank_t *r = ctx;

    assert_true(n_reports < 64);
    reports[n_reports].reporter = r->id;
    reports[n_reports].rank     = world_rank;
    reports[n_reports].epoch    = epoch;
    snprintf(reports[n_reports].reason, sizeof(reports[0].reason), "%s", reason);
    n_reports++;
    return EEP_OK;
}

static eep_status_t fake_publish(void *ctx, uint64_t epoch, int attempt, const eep_comm_uid_t *uid)
{
    fake_rank_t *r = ctx;

    assert_true(n_store < 64);
    store[n_store].epoch   = epoch;
    store[n_store].attempt = attempt;
    store[n_store].uid     = *uid;
    n_store++;
    fc_log(&r->fc, "publish e%llu a%d u%d", (unsigned long long)epoch, attempt, uid->bytes[0]);
    return EEP_OK;
}

static eep_status_t fake_fetch(void *ctx, uint64_t epoch, int attempt, int timeout_ms,
                               eep_comm_uid_t *uid_p)
{
    fake_rank_t *r = ctx;
    int          i;

    assert_true(timeout_ms > 0);
    for (i = 0; i < n_store; i++) {
        if (store[i].epoch == epoch && store[i].attempt == attempt) {
            *uid_p = store[i].uid;
            fc_log(&r->fc, "fetch e%llu a%d u%d", (unsigned long long)epoch, attempt,
                   uid_p->bytes[0]);
            return EEP_OK;
        }
    }
    fc_log(&r->fc, "fetch e%llu a%d timeout", (unsigned long long)epoch, attempt);
    return EEP_ERR_TIMEOUT;
}

static const eep_membership_ops_t fake_membership_ops = {
    .name         = "fake",
    .report_fault = fake_report,
    .publish_uid  = fake_publish,
    .fetch_uid    = fake_fetch,
};

static void rank_init(fake_rank_t *r, const char *id)
{
    eep_view_machine_params_t p;

    memset(r, 0, sizeof(*r));
    r->id     = id;
    r->ms.ops = &fake_membership_ops;
    r->ms.ctx = r;
    memset(&p, 0, sizeof(p));
    p.size       = sizeof(p);
    p.comm_ops   = &fake_comm_ops;
    p.comm_ctx   = &r->fc;
    p.membership = &r->ms;
    assert_int_equal(eep_view_machine_init(&r->m, &p), EEP_OK);
}

/* ---- views --------------------------------------------------------------------------------- */

typedef struct {
    eep_view_t         v;
    const char        *ids[MAXR];
    eep_expert_place_t pl[NEXPERTS];
} tview_t;

/* A view of @p n members @p ids (rank order) as member @p me sees it. */
static const eep_view_t *tview(tview_t *t, uint64_t epoch, const char *const *ids, int n,
                               const char *me, int root)
{
    int i;

    memset(t, 0, sizeof(*t));
    for (i = 0; i < n; i++) {
        t->ids[i] = ids[i];
    }
    assert_int_equal(eep_placement_default(NEXPERTS, n, t->pl), EEP_OK);
    t->v.size        = sizeof(t->v);
    t->v.epoch       = epoch;
    t->v.world       = n;
    t->v.member_ids  = t->ids;
    t->v.my_rank     = -1;
    t->v.root        = root;
    t->v.num_experts = NEXPERTS;
    t->v.placement   = t->pl;
    for (i = 0; i < n; i++) {
        if (strcmp(ids[i], me) == 0) {
            t->v.my_rank = i;
        }
    }
    return &t->v;
}

static fake_rank_t *find_rank(fake_rank_t *ranks, int nr, const char *id)
{
    int i;

    for (i = 0; i < nr; i++) {
        if (strcmp(ranks[i].id, id) == 0) {
            return &ranks[i];
        }
    }
    return NULL;
}

/* Apply one view on each of @p ranks that is in it, the root first; each must give @p want. */
static void apply_all(fake_rank_t *ranks, int nr, uint64_t epoch, const char *const *ids, int n,
                      int root, eep_status_t want)
{
    fake_rank_t *first = find_rank(ranks, nr, ids[root]);
    tview_t      t;
    int          i;

    assert_non_null(first);
    assert_int_equal(
        eep_view_machine_apply(&first->m, tview(&t, epoch, ids, n, first->id, root), NULL), want);
    for (i = 0; i < nr; i++) {
        if (&ranks[i] != first && find_rank(ranks, nr, ranks[i].id) != NULL) {
            int in = 0, j;

            for (j = 0; j < n; j++) {
                in = in || strcmp(ids[j], ranks[i].id) == 0;
            }
            if (in) {
                assert_int_equal(eep_view_machine_apply(&ranks[i].m,
                                                        tview(&t, epoch, ids, n, ranks[i].id, root),
                                                        NULL),
                                 want);
            }
        }
    }
}

/* The log of @p fc from entry @p from on is exactly the NULL-terminated list. */
static void expect_log(const fake_comm_t *fc, int from, ...)
{
    const char *want;
    va_list     ap;
    int         i = from;

    va_start(ap, from);
    while ((want = va_arg(ap, const char *)) != NULL) {
        if (i >= fc->n) {
            va_end(ap);
            fail_msg("log entry %d missing: wanted \"%s\"", i, want);
        }
        if (strcmp(fc->log[i], want) != 0) {
            va_end(ap);
            fail_msg("log entry %d is \"%s\", wanted \"%s\"", i, fc->log[i], want);
        }
        i++;
    }
    va_end(ap);
    if (i != fc->n) {
        fail_msg("log has %d entries after the expected ones, the first \"%s\"", fc->n - i,
                 fc->log[i]);
    }
}

static const char *const ABCD[] = { "a", "b", "c", "d" };

/* Four ranks a b c d at epoch 1 (root a); returns with every log mark set to its length. */
static void cluster4(fake_rank_t *ranks, int *mark)
{
    int i;

    for (i = 0; i < 4; i++) {
        rank_init(&ranks[i], ABCD[i]);
    }
    apply_all(ranks, 4, 1, ABCD, 4, 0, EEP_OK);
    for (i = 0; i < 4; i++) {
        assert_int_equal(ranks[i].m.state, EEP_VIEW_STATE_RUNNING);
        mark[i] = ranks[i].fc.n;
    }
}

static void cluster_cleanup(fake_rank_t *ranks, int nr)
{
    int i;

    for (i = 0; i < nr; i++) {
        eep_view_machine_cleanup(&ranks[i].m);
    }
}

static int setup(void **state)
{
    (void)state;
    n_store     = 0;
    n_reports   = 0;
    uid_counter = 0;
    return 0;
}

/* ---- cases --------------------------------------------------------------------------------- */

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
    fake_rank_t              ranks[6];
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
        cmocka_unit_test_setup(test_decide, setup),
        cmocka_unit_test_setup(test_first_view_is_fresh, setup),
        cmocka_unit_test_setup(test_remove_one_shrinks, setup),
        cmocka_unit_test_setup(test_remove_several_shrinks, setup),
        cmocka_unit_test_setup(test_remove_rank0_root_moves, setup),
        cmocka_unit_test_setup(test_addition_is_fresh, setup),
        cmocka_unit_test_setup(test_removal_and_addition_is_fresh, setup),
        cmocka_unit_test_setup(test_view_removes_this_rank, setup),
        cmocka_unit_test_setup(test_stale_and_duplicate_epochs, setup),
        cmocka_unit_test_setup(test_timeout_fault_before_view, setup),
        cmocka_unit_test_setup(test_view_while_fault_pending, setup),
        cmocka_unit_test_setup(test_failed_shrink_falls_back, setup),
        cmocka_unit_test_setup(test_partial_shrink_failure, setup),
        cmocka_unit_test_setup(test_fresh_failure, setup),
        cmocka_unit_test_setup(test_two_views_in_a_row, setup),
        cmocka_unit_test_setup(test_init_arguments, setup),
        cmocka_unit_test_setup(test_abandoned_view, setup),
        cmocka_unit_test_setup(test_release_early, setup),
    };

    eep_log_set_level(EEP_LOG_LEVEL_ERROR);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
