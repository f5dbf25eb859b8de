/*
 * view_apply_fake.h - what the view-machine tests share (test_view_apply.c: views applied as
 * decided; test_view_faults.c: faults, failures and views given up): a FAKE communicator and a FAKE
 * membership provider (no NCCL, no etcd).  Several ranks live in one process, each a machine
 * with its own fake communicator log; the fake provider's store of unique ids is shared, so the
 * root must have published before the others fetch (they are applied root first, as the bounded
 * fetch would order them).  Every case checks the exact sequence of communicator operations each
 * rank made.  Header-only, for one test file per binary (its state is static); include after
 * cmocka.h.
 */
#ifndef EEP_VIEW_APPLY_FAKE_H
#define EEP_VIEW_APPLY_FAKE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "eep/membership.h"
#include "elastic/runtime/runtime_view.h"

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

static inline void fc_log(fake_comm_t *fc, const char *fmt, ...)
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

static inline void rank_init(fake_rank_t *r, const char *id)
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
static inline const eep_view_t *tview(tview_t *t, uint64_t epoch, const char *const *ids, int n,
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

static inline fake_rank_t *find_rank(fake_rank_t *ranks, int nr, const char *id)
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
static inline void apply_all(fake_rank_t *ranks, int nr, uint64_t epoch, const char *const *ids,
                             int n, int root, eep_status_t want)
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
static inline void expect_log(const fake_comm_t *fc, int from, ...)
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
static inline void cluster4(fake_rank_t *ranks, int *mark)
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

static inline void cluster_cleanup(fake_rank_t *ranks, int nr)
{
    int i;

    for (i = 0; i < nr; i++) {
        eep_view_machine_cleanup(&ranks[i].m);
    }
}

static inline int setup(void **state)
{
    (void)state;
    n_store     = 0;
    n_reports   = 0;
    uid_counter = 0;
    return 0;
}

#endif /* EEP_VIEW_APPLY_FAKE_H */
