/*
 * test_view_orderings.c - the view machine (elastic/runtime/runtime_view.h) through every
 * ordering of the events of one fault round, over a FAKE communicator that models shared memory:
 * no NCCL, no etcd, no GPU.
 *
 * Four ranks a b c d, root a; d stops (SIGKILL or SIGSTOP: it applies nothing while down).  Events,
 * every permutation with D after V (60 orderings):
 *   T  the survivors' kernels time out on d (a fault naming d's rank, degraded mode);
 *   V  eepd publishes a view without d;
 *   N  a newcomer e joins: eepd publishes a view with e added (d still in it when V has not come:
 *      the fresh communicator then cannot form while d is down, and every member of it fails);
 *   Z  d wakes up: first its stalled kernel stores into the windows of its communicator (a
 *      zombie's stray writes), then it applies every view published while it was down;
 *   D  the view of V is delivered again (a duplicate, refused as stale).
 * Checked for each ordering: at the end a b c e run one communicator of the newest epoch with
 * members a b c e in order, d is fenced and holds no communicator; a stray store never lands in a
 * window that a rank uses under a view without d (fresh windows per view); each communicator set
 * is released exactly once and only after its successor exists (no leak, no double abort); a
 * timeout before V reports d once per survivor and marks its 4 of 16 experts lost.  Every ordering
 * runs twice: with the old set released once the new one is complete, and released early (when a
 * fresh view starts building: params.release_early, the runtime's default).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "eep/membership.h"
#include "elastic/runtime/runtime_view.h"
#include "util/log.h"

#define NR       5 /* a b c d e */
#define NEXPERTS 16
#define MAXWIN   256
#define STRAY    0xdeadbeefu

/* ---- the fake shared memory: one window per (communicator, member) ---------------------- */

typedef struct {
    char     comm_key[96]; /* the communicator's identity, the same on every member */
    int      owner;        /* index of the rank that registered it */
    uint32_t data[4];      /* what peers stored into it */
    int      live;
} fake_window_t;

static fake_window_t windows[MAXWIN];
static int           n_windows;

typedef struct {
    char key[96];
    int  rank;
} fake_comm_t;

typedef struct {
    int                idx; /* 0..4 */
    const char        *id;
    int                live_sets; /* comm objects made and not yet released */
    int                fail_create;
    eep_view_machine_t m;
    eep_membership_t   ms;
} fake_rank_t;

static fake_rank_t ranks[NR];

static eep_status_t fake_shrink(void *ctx, void *old_comm, const int *exclude, int n_exclude,
                                void **comm_p)
{
    fake_rank_t *r   = ctx;
    fake_comm_t *old = old_comm, *c = calloc(1, sizeof(*c));
    char         tail[32];
    int          i;

    assert_non_null(c);
    snprintf(c->key, sizeof(c->key), "%.80s-[", old->key);
    for (i = 0; i < n_exclude; i++) {
        snprintf(tail, sizeof(tail), "%s%d", i ? "," : "", exclude[i]);
        strncat(c->key, tail, sizeof(c->key) - strlen(c->key) - 1);
    }
    strncat(c->key, "]", sizeof(c->key) - strlen(c->key) - 1);
    r->live_sets++;
    *comm_p = c;
    return EEP_OK;
}

static int uid_counter;

static eep_status_t fake_uid_create(void *ctx, eep_comm_uid_t *uid_p)
{
    (void)ctx;
    memset(uid_p, 0, sizeof(*uid_p));
    uid_p->bytes[0] = (unsigned char)++uid_counter;
    return EEP_OK;
}

static int creates, creates_beside_old; /* fresh communicators; those made with an old set alive */

static eep_status_t fake_create(void *ctx, const eep_comm_uid_t *uid, int world, int rank,
                                void **comm_p)
{
    fake_rank_t *r = ctx;
    fake_comm_t *c;

    creates++;
    creates_beside_old += r->live_sets > 0;
    if (r->fail_create) {
        return EEP_ERR_TIMEOUT; /* a member of the view is down: the init never completes */
    }
    c = calloc(1, sizeof(*c));
    assert_non_null(c);
    snprintf(c->key, sizeof(c->key), "u%d/%d", uid->bytes[0], world);
    c->rank = rank;
    r->live_sets++;
    *comm_p = c;
    return EEP_OK;
}

static eep_status_t fake_window(void *ctx, void *comm, void **window_p)
{
    fake_rank_t   *r = ctx;
    fake_window_t *w;

    assert_true(n_windows < MAXWIN);
    w = &windows[n_windows++];
    snprintf(w->comm_key, sizeof(w->comm_key), "%s", ((fake_comm_t *)comm)->key);
    w->owner  = r->idx;
    w->live   = 1;
    *window_p = w;
    return EEP_OK;
}

static eep_status_t fake_devcomm(void *ctx, void *comm, void *window, void **devcomm_p)
{
    (void)ctx;
    assert_string_equal(((fake_window_t *)window)->comm_key, ((fake_comm_t *)comm)->key);
    *devcomm_p = comm;
    return EEP_OK;
}

static void fake_release(fake_rank_t *r, const eep_view_comm_set_t *set)
{
    if (set->window != NULL) {
        assert_true(((fake_window_t *)set->window)->live); /* never released twice */
        ((fake_window_t *)set->window)->live = 0;
    }
    assert_true(r->live_sets > 0);
    r->live_sets--;
    free(set->comm);
}

static void fake_discard(void *ctx, const eep_view_comm_set_t *set)
{
    fake_release(ctx, set);
}

static void fake_abort_async(void *ctx, const eep_view_comm_set_t *set)
{
    fake_rank_t *r = ctx;

    /* The successor exists first, or this is the machine dropping its own set (fenced,
       failed, cleanup): never a set that stays in use. */
    assert_true(set == &r->m.set || r->m.set.comm != set->comm);
    fake_release(r, set);
}

static const eep_view_comm_ops_t fake_comm_ops = {
    .name            = "fake-shared-memory",
    .shrink          = fake_shrink,
    .uid_create      = fake_uid_create,
    .create          = fake_create,
    .window_register = fake_window,
    .devcomm_create  = fake_devcomm,
    .discard         = fake_discard,
    .abort_async     = fake_abort_async,
};

/* ---- the fake provider: unique ids by (epoch, attempt), reports counted ------------------ */

static struct {
    uint64_t       epoch;
    int            attempt;
    eep_comm_uid_t uid;
} store[64];
static int n_store;
static int reports_of_d[NR];

static eep_status_t fake_report(void *ctx, int world_rank, uint64_t epoch, const char *reason)
{
    fake_rank_t *r = ctx;

    (void)epoch;
    (void)reason;
    if (world_rank == 3) {
        reports_of_d[r->idx]++;
    }
    return EEP_OK;
}

static eep_status_t fake_publish(void *ctx, uint64_t epoch, int attempt, const eep_comm_uid_t *uid)
{
    (void)ctx;
    assert_true(n_store < 64);
    store[n_store].epoch   = epoch;
    store[n_store].attempt = attempt;
    store[n_store].uid     = *uid;
    n_store++;
    return EEP_OK;
}

static eep_status_t fake_fetch(void *ctx, uint64_t epoch, int attempt, int timeout_ms,
                               eep_comm_uid_t *uid_p)
{
    int i;

    (void)ctx;
    assert_true(timeout_ms > 0);
    for (i = n_store - 1; i >= 0; i--) {
        if (store[i].epoch == epoch && store[i].attempt == attempt) {
            *uid_p = store[i].uid;
            return EEP_OK;
        }
    }
    return EEP_ERR_TIMEOUT;
}

static const eep_membership_ops_t fake_membership_ops = {
    .name         = "fake",
    .report_fault = fake_report,
    .publish_uid  = fake_publish,
    .fetch_uid    = fake_fetch,
};

/* ---- eepd's side: views ------------------------------------------------------------------- */

static const char *const IDS[NR]  = { "a", "b", "c", "d", "e" };
static const char *const FINAL[4] = { "a", "b", "c", "e" };

typedef struct {
    uint64_t           epoch;
    int                n;
    const char        *ids[NR];
    eep_expert_place_t pl[NEXPERTS];
} pub_view_t;

static pub_view_t views[8];
static int        n_views;
static int        d_down, d_removed, e_joined;
static int        d_applied; /* views d has applied (it catches up when it wakes) */

static const char *members[NR];
static int         n_members;

static void make_view(eep_view_t *v, const pub_view_t *p, const char *me)
{
    int i;

    memset(v, 0, sizeof(*v));
    v->size        = sizeof(*v);
    v->epoch       = p->epoch;
    v->world       = p->n;
    v->member_ids  = p->ids;
    v->my_rank     = -1;
    v->root        = 0;
    v->num_experts = NEXPERTS;
    v->placement   = p->pl;
    for (i = 0; i < p->n; i++) {
        if (strcmp(p->ids[i], me) == 0) {
            v->my_rank = i;
        }
    }
}

static int in_view(const pub_view_t *p, const char *id)
{
    int i;

    for (i = 0; i < p->n; i++) {
        if (strcmp(p->ids[i], id) == 0) {
            return 1;
        }
    }
    return 0;
}

/* Apply view @p k on rank @p r; the expected outcome follows from the view and the ranks. */
static void apply_on(int r, int k, int down_member)
{
    eep_view_t   v;
    eep_status_t status;

    make_view(&v, &views[k], ranks[r].id);
    ranks[r].fail_create = down_member;
    status               = eep_view_machine_apply(&ranks[r].m, &v, NULL);
    ranks[r].fail_create = 0;
    if (v.my_rank < 0) {
        assert_int_equal(status, EEP_ERR_FENCED);
        assert_int_equal(ranks[r].m.state, EEP_VIEW_STATE_FENCED);
    } else if (down_member && ranks[r].m.state != EEP_VIEW_STATE_RUNNING) {
        assert_int_equal(status, EEP_ERR_TIMEOUT);
        assert_int_equal(ranks[r].m.state, EEP_VIEW_STATE_FAILED);
    } else {
        assert_int_equal(status, EEP_OK);
    }
    assert_null(ranks[r].m.set.comm == NULL && status == EEP_OK ? "no set" : NULL);
}

/* eepd publishes the current member list; every rank that is up and in it applies it, the
   root first (the root is rank 0 of every view here: a). */
static void publish(void)
{
    pub_view_t *p = &views[n_views];
    int         i, k = n_views, down;

    assert_true(n_views < 8);
    memset(p, 0, sizeof(*p));
    p->epoch = (uint64_t)n_views + 1;
    p->n     = n_members;
    for (i = 0; i < n_members; i++) {
        p->ids[i] = members[i];
    }
    assert_int_equal(eep_placement_default(NEXPERTS, n_members, p->pl), EEP_OK);
    n_views++;
    down = d_down && in_view(p, "d"); /* a fresh communicator with d cannot form */
    for (i = 0; i < NR; i++) {
        if (i == 3 && d_down) {
            continue;
        }
        if (i == 4 && !e_joined) {
            continue;
        }
        if (in_view(p, IDS[i]) || ranks[i].m.view.world > 0) {
            apply_on(i, k, down);
        }
        if (i == 3) {
            d_applied = n_views;
        }
    }
}

static void remove_member(const char *id)
{
    int i, j = 0;

    for (i = 0; i < n_members; i++) {
        if (strcmp(members[i], id) != 0) {
            members[j++] = members[i];
        }
    }
    n_members = j;
}

/* ---- the events ----------------------------------------------------------------------------- */

static void ev_timeout(void)
{
    int i, lost = 0;

    if (d_removed) {
        return; /* a view already left d out: the runtime cleared its fault records */
    }
    for (i = 0; i < 3; i++) {
        if (ranks[i].m.state != EEP_VIEW_STATE_RUNNING &&
            ranks[i].m.state != EEP_VIEW_STATE_DEGRADED) {
            continue; /* failed (a fresh comm with d): no kernel ran */
        }
        assert_int_equal(eep_view_machine_fault(&ranks[i].m, ranks[i].m.view.world > 3 ? 3 : -1,
                                                "dispatch timeout"),
                         EEP_OK);
        assert_int_equal(eep_view_machine_fault(&ranks[i].m, 3, "dispatch timeout"), EEP_OK);
        assert_int_equal(ranks[i].m.state, EEP_VIEW_STATE_DEGRADED);
        assert_int_equal(eep_view_machine_lost_experts(&ranks[i].m, NULL, &lost), EEP_OK);
        /* d is rank 3 of a 4- or 5-rank view: 4 of 16 experts, or 3 of 16 on 5 ranks */
        assert_int_equal(lost, ranks[i].m.view.world == 4 ? 4 : 3);
        assert_int_equal(reports_of_d[i], 1); /* once, however many faults */
    }
}

static void ev_view_without_d(void)
{
    remove_member("d");
    d_removed = 1;
    publish();
}

static void ev_newcomer(void)
{
    members[n_members++] = "e";
    e_joined             = 1;
    publish();
}

/* d wakes: its stalled kernel's stores land in its communicator's windows, then it catches up. */
static void ev_zombie_wakes(void)
{
    const fake_comm_t *c = ranks[3].m.set.comm;
    int                w, r, k;

    if (c != NULL) {
        for (w = 0; w < n_windows; w++) {
            if (strcmp(windows[w].comm_key, c->key) != 0 || windows[w].owner == 3) {
                continue;
            }
            /* Never into a window a rank uses under a view that removed d. */
            for (r = 0; r < NR; r++) {
                if (ranks[r].m.set.window == &windows[w]) {
                    assert_false(d_removed && r != 3);
                }
            }
            windows[w].data[0] = STRAY;
        }
    }
    d_down = 0;
    for (k = d_applied; k < n_views; k++) {
        apply_on(3, k, 0);
    }
    d_applied = n_views;
}

static void ev_duplicate(void)
{
    eep_view_t v;
    void      *set   = ranks[0].m.set.comm;
    uint64_t   epoch = ranks[0].m.view.epoch;

    make_view(&v, &views[n_views - 1], "a");
    assert_int_equal(eep_view_machine_apply(&ranks[0].m, &v, NULL), EEP_ERR_STALE_EPOCH);
    assert_ptr_equal(ranks[0].m.set.comm, set);
    assert_int_equal(ranks[0].m.view.epoch, epoch);
}

/* ---- one ordering --------------------------------------------------------------------------- */

static int release_early; /* params.release_early of every rank in the next ordering */

static void run_ordering(const char *order)
{
    eep_view_machine_params_t p;
    int                       i, j;

    memset(windows, 0, sizeof(windows));
    n_windows = n_store = n_views = 0;
    uid_counter = d_removed = e_joined = d_applied = 0;
    memset(reports_of_d, 0, sizeof(reports_of_d));
    for (i = 0; i < NR; i++) {
        memset(&ranks[i], 0, sizeof(ranks[i]));
        ranks[i].idx    = i;
        ranks[i].id     = IDS[i];
        ranks[i].ms.ops = &fake_membership_ops;
        ranks[i].ms.ctx = &ranks[i];
        memset(&p, 0, sizeof(p));
        p.size          = sizeof(p);
        p.comm_ops      = &fake_comm_ops;
        p.comm_ctx      = &ranks[i];
        p.membership    = &ranks[i].ms;
        p.release_early = release_early;
        assert_int_equal(eep_view_machine_init(&ranks[i].m, &p), EEP_OK);
    }
    n_members = 4;
    for (i = 0; i < 4; i++) {
        members[i] = IDS[i];
    }
    d_down = 0;
    publish(); /* epoch 1: a b c d */
    d_down = 1;
    for (i = 0; order[i] != '\0'; i++) {
        switch (order[i]) {
        case 'T':
            ev_timeout();
            break;
        case 'V':
            ev_view_without_d();
            break;
        case 'N':
            ev_newcomer();
            break;
        case 'Z':
            ev_zombie_wakes();
            break;
        case 'D':
            ev_duplicate();
            break;
        default:
            fail_msg("bad event %c", order[i]);
        }
    }
    /* The end: a b c e on one communicator of the newest epoch, in that order. */
    for (i = 0; i < NR; i++) {
        const eep_view_machine_t *m = &ranks[i].m;

        if (i == 3) {
            assert_int_equal(m->state, EEP_VIEW_STATE_FENCED);
            assert_null(m->set.comm);
            assert_int_equal(ranks[i].live_sets, 0);
            continue;
        }
        assert_int_equal(m->state, EEP_VIEW_STATE_RUNNING);
        assert_int_equal(m->view.epoch, (uint64_t)n_views);
        assert_int_equal(m->view.world, 4);
        for (j = 0; j < 4; j++) {
            assert_string_equal(m->view.member_ids[j], FINAL[j]);
        }
        assert_int_equal(m->view.my_rank, i == 4 ? 3 : i);
        assert_int_equal(ranks[i].live_sets, 1);
        assert_string_equal(((fake_comm_t *)m->set.comm)->key,
                            ((fake_comm_t *)ranks[0].m.set.comm)->key);
        /* fenced: no stray store in the window in use */
        assert_int_equal(((fake_window_t *)m->set.window)->data[0], 0);
        assert_int_equal(eep_view_machine_dead(m, 3), 0);
    }
    for (i = 0; i < NR; i++) {
        eep_view_machine_cleanup(&ranks[i].m);
        assert_int_equal(ranks[i].live_sets, 0);
    }
}

static int next_perm(char *s, int n)
{
    int  i = n - 2, j = n - 1;
    char t;

    while (i >= 0 && s[i] >= s[i + 1]) {
        i--;
    }
    if (i < 0) {
        return 0;
    }
    while (s[j] <= s[i]) {
        j--;
    }
    t = s[i], s[i] = s[j], s[j] = t;
    for (i++, j = n - 1; i < j; i++, j--) {
        t = s[i], s[i] = s[j], s[j] = t;
    }
    return 1;
}

static void test_every_ordering(void **state)
{
    (void)state;
    for (release_early = 0; release_early <= 1; release_early++) {
        char order[] = "DNTVZ"; /* sorted: the first permutation */
        int  n = 0, with_stray = 0;

        creates = creates_beside_old = 0;
        do {
            if (strchr(order, 'D') < strchr(order, 'V')) {
                continue; /* a duplicate of V comes after V */
            }
            run_ordering(order);
            for (int w = 0; w < n_windows; w++) {
                with_stray += windows[w].data[0] == STRAY;
            }
            n++;
        } while (next_perm(order, 5));
        printf("release_early %d: %d orderings of T V N Z D passed; %d stray stores landed, none "
               "in a window in use\n",
               release_early, n, with_stray);
        assert_int_equal(n, 60);
        assert_true(with_stray > 0); /* the zombie did store somewhere: the check had teeth */
        /* Released early, no fresh communicator is built beside an old set; else survivors do. */
        assert_true(creates > 0);
        if (release_early) {
            assert_int_equal(creates_beside_old, 0);
        } else {
            assert_true(creates_beside_old > 0);
        }
    }
    release_early = 0;
}

/* Two of the orderings by name, so that a failure names a plain scenario. */
static void test_kill_timeout_view_newcomer(void **state)
{
    (void)state;
    run_ordering("TVDNZ");
}

static void test_newcomer_before_the_view(void **state)
{
    (void)state;
    run_ordering("NTZVD");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill_timeout_view_newcomer),
        cmocka_unit_test(test_newcomer_before_the_view),
        cmocka_unit_test(test_every_ordering),
    };

    eep_log_set_level(EEP_LOG_LEVEL_NONE);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
